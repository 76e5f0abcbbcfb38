import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Testing

/// Seeing inside a running fleet: `busctl monitor`, the trace of one user action across
/// processes, and the metrics, each through the real broker and real board processes.
@Suite("Observability", .serialized, .timeLimit(.minutes(3)))
struct ObservabilityIntegrationTests {
    static let parser = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/parse_metrics.py").path

    /// A `busctl monitor` running in the background until stopped, writing its lines to a file.
    struct BackgroundMonitor {
        let process: ChildProcess
        let output: String

        init(_ fleet: TestFleet, name: String, _ arguments: [String]) async throws {
            output = "\(fleet.directory)/\(name).jsonl"
            process = try await ChildProcess(
                executable: "\(fleet.binaryDirectory)/busctl", arguments: ["monitor", "--json", "--output", output] + arguments,
                environment: fleet.environment, directory: fleet.directory, name: name)
        }

        var events: [MonitorEvent] {
            let data = FileManager.default.contents(atPath: output) ?? Data()
            return data.split(separator: UInt8(ascii: "\n")).compactMap { try? PayloadCodec.decode(MonitorEvent.self, from: Data($0)) }
        }
    }

    /// How many monitors the broker has, from `busctl metrics`.
    static func monitorsAttached(_ fleet: TestFleet) async throws -> Int? {
        let text = try await fleet.busctl("metrics").standardOutput
        return text.split(separator: "\n").first { $0.hasPrefix("boardbus_monitors ") }.flatMap { Double($0.split(separator: " ")[1]) }.map(Int.init)
    }

    /// Logging in (`auth.login` → flow → `app.dashboard` → `nextToBoard` → `demo.greeter`) is
    /// one trace: `busctl activate --trace` prints its id, a monitor sees every hop carry it, and
    /// `busctl monitor --input FILE --trace ID` shows just that trace, in order. A second monitor
    /// with another filter runs at the same time and sees only what it selects.
    @Test func aLoginIsOneTraceAcrossProcessesAndMonitorsSeeIt() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let all = try await BackgroundMonitor(fleet, name: "monitor-all", ["--payload"])
            let outputs = try await BackgroundMonitor(fleet, name: "monitor-outputs", ["--kind", "output"])
            #expect(try await eventually { try await Self.monitorsAttached(fleet) == 2 })
            // Untraced traffic in between, which `--trace` must leave out.
            #expect(try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Zoë"}"#).exitCode == 0)
            let login = try await fleet.busctl("activate", "auth.login", #"{"username":"ann"}"#, "--trace", "--trace-state", "vendor=a1,other=b2")
            #expect(login.exitCode == 0, "\(login.standardError)")
            let trace = try #require(login.standardError.split(separator: "\n").first { $0.hasPrefix("trace ") }).dropFirst(6)
            #expect(TraceContext.isTraceID(String(trace)))
            #expect(
                try await eventually {
                    all.events.contains { $0.kind == "activation" && $0.target == "demo.greeter" && $0.trace == String(trace) }
                })
            _ = await all.process.stop()
            _ = await outputs.process.stop()

            // Every hop of the login carries the trace, across the three board processes.
            let hops = all.events.filter { $0.trace == String(trace) }.map { "\($0.kind) \($0.source) → \($0.target)" }
            for hop in [
                "output auth.login → motherboard", "activation auth.login → app.dashboard", "activation app.dashboard → demo.greeter",
                "action auth.login → demo.greeter",
            ] {
                #expect(hops.contains(hop), "\(hop) not in \(hops)")
            }
            // And its W3C tracestate, carried on by each board's handler (header field 8).
            let states = Set(all.events.filter { $0.trace == String(trace) }.map { $0.traceState ?? "none" })
            #expect(states == ["vendor=a1,other=b2"], "\(states)")
            let first = try #require(all.events.firstIndex { $0.trace == String(trace) })
            #expect(all.events[first].kind == "activation" && all.events[first].target == "auth.login")
            // The untraced call is there, with its payload and round trip, but in no trace.
            let greet = try #require(all.events.first { $0.kind == "command" && $0.type == "greet" })
            #expect(greet.trace == nil && greet.payload == #"{"name":"Zoë"}"# && greet.payloadBytes == 15)
            let answer = try #require(all.events.first { $0.kind == "reply" && $0.source == "demo.greeter" && $0.trace == nil })
            #expect(answer.correlationID == greet.correlationID && (answer.roundTripMicroseconds ?? -1) >= 0)

            // Read back through a filter: exactly the trace's messages, in the order routed.
            let replay = try await fleet.busctl("monitor", "--input", all.output, "--trace", String(trace), "--json")
            #expect(replay.exitCode == 0, "\(replay.standardError)")
            let replayed = replay.standardOutput.split(separator: "\n").compactMap {
                try? PayloadCodec.decode(MonitorEvent.self, from: Data($0.utf8))
            }
            #expect(
                replayed
                    == all.events.filter { $0.trace == String(trace) }.map {
                        var event = $0
                        event.payload = nil
                        event.payloadCut = nil
                        return event
                    })
            #expect(replayed.map(\.time) == replayed.map(\.time).sorted())
            // Text mode and a combined filter on the same file.
            let text = try await fleet.busctl("monitor", "--input", all.output, "--board", "demo.greeter", "--kind", "activation")
            #expect(text.standardOutput.split(separator: "\n").count == 1 && text.standardOutput.contains("app.dashboard → demo.greeter Welcome"))

            // The second monitor saw the outputs only.
            #expect(!outputs.events.isEmpty && outputs.events.allSatisfy { $0.kind == "output" })
        }
    }

    /// A monitor that does not read is never waited for: routing goes on, the broker drops what
    /// does not fit its window, and the monitor, once it reads, is told how many it missed —
    /// every selected message is either shown or counted.
    @Test func aMonitorThatDoesNotReadIsToldHowManyItMissed() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            try await fleet.withClient { client in
                let request = MonitorRequest(filter: MonitorFilter(boards: ["demo.greeter"], kinds: ["command"]), window: 5)
                let stream = try await client.monitor(request, timeout: .seconds(10))
                for index in 0..<40 {
                    _ = try await client.call("demo.greeter", command: "greet", payload: Data(#"{"name":"n\#(index)"}"#.utf8), timeout: .seconds(10))
                }
                var shown = 0
                var missed = 0
                for await push in stream {
                    missed += push.dropped
                    if push.event != nil { shown += 1 }
                    if shown + missed >= 40 { break }
                }
                #expect(shown == 5 && missed == 35)
                let metrics = try await client.metrics(timeout: .seconds(10)).text
                #expect(metrics.contains("boardbus_monitor_dropped_total 35"))
            }
        }
    }

    /// A monitor killed with SIGKILL is forgotten: its connection is gone, and the broker stops
    /// feeding it (and counting it) on the next message it would have shown.
    @Test func aMonitorThatDiesIsForgotten() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let monitor = try await BackgroundMonitor(fleet, name: "monitor-killed", [])
            #expect(try await eventually { try await Self.monitorsAttached(fleet) == 1 })
            kill(monitor.process.pid, SIGKILL)
            _ = try await monitor.process.wait(timeout: .seconds(10))
            #expect(
                try await eventually(timeout: .seconds(15)) {
                    _ = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"x"}"#)
                    return try await Self.monitorsAttached(fleet) == 0
                })
            #expect(fleet.brokerLog.contains("monitor detached"))
        }
    }

    /// `busctl metrics` and `/metrics` over HTTP give the same counters, which Prometheus's own
    /// parser reads: messages by board and kind, errors by code, the round-trip histogram.
    @Test func metricsParseWithPrometheusOwnParserOverBusctlAndHTTP() async throws {
        let manifest = exampleManifest.replacingOccurrences(of: #""boards": ["#, with: #""metricsListen": "127.0.0.1:0", "boards": ["#)
        try await TestFleet.with(manifest: manifest) { fleet in
            for _ in 0..<3 { #expect(try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"x"}"#).exitCode == 0) }
            #expect(try await fleet.busctl("call", "demo.greeter", "nosuch").exitCode == 1)
            let text = try await fleet.busctl("metrics")
            #expect(text.exitCode == 0)
            let file = "\(fleet.directory)/metrics.txt"
            try text.standardOutput.write(toFile: file, atomically: true, encoding: .utf8)
            let address = try String(contentsOfFile: "\(fleet.address.runtimeDirectory)/metrics.addr", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            for source in [file, "http://\(address)/metrics"] {
                let parsed = try await ChildProcess(
                    executable: "/usr/bin/python3", arguments: [Self.parser, source], environment: fleet.environment,
                    directory: fleet.directory, name: "parse-metrics"
                ).wait(timeout: .seconds(30))
                #expect(parsed.exitCode == 0, "\(parsed.standardError)")
                let exposition = try parsed.decodedOutput(as: Exposition.self)
                if source.hasPrefix("http") { #expect(exposition.contentType.hasPrefix("text/plain; version=0.0.4")) }
                #expect(exposition.families["boardbus_messages"] == "counter")
                #expect(exposition.families["boardbus_request_duration_seconds"] == "histogram")
                #expect(
                    exposition.value("boardbus_messages_total", ["board": "demo.greeter", "direction": "out", "kind": "command"]) == 4)
                #expect(exposition.value("boardbus_errors_total", ["board": "demo.greeter", "code": "unknownCommand"]) == 1)
                #expect(exposition.value("boardbus_request_duration_seconds_count", ["board": "demo.greeter"]) == 4)
                #expect(exposition.value("boardbus_boards", [:]) == 3)
            }
        }
    }

    /// `busctl introspect` shows each payload's shape, derived from the board's Codable types;
    /// `--json` gives JSON Schemas; a call whose payload does not match says what was expected.
    @Test func introspectionShowsPayloadShapesAndACallSaysWhatItExpects() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let json = try await fleet.busctl("introspect", "demo.greeter", "--json")
            let found = try decode(Introspection.self, from: json)
            let schemas = try #require(found.schemas)
            let greet = try #require(schemas.commands["greet"])
            #expect(greet.request.type == "object" && greet.request.properties?["name"]?.type == "string" && greet.request.required == ["name"])
            #expect(greet.reply.properties?["message"]?.type == "string")
            #expect(schemas.input?.properties?["name"]?.type == "string")
            #expect(schemas.actions["auth.userLoggedIn"]?.properties?["username"]?.type == "string")
            #expect(json.standardOutput.contains(#""required" : ["#))
            let login = try decode(Introspection.self, from: try await fleet.busctl("introspect", "auth.login", "--json"))
            #expect(login.schemas?.outputs["LoginSucceeded"]?.properties?.keys.sorted() == ["token", "username"])

            let text = try await fleet.busctl("introspect", "demo.greeter")
            #expect(text.standardOutput.contains("command greet  {name: string} → {message: string}"))

            let wrong = try await fleet.busctl("call", "demo.greeter", "greet", #"{"nam":"x"}"#)
            #expect(wrong.exitCode == 1)
            #expect(wrong.standardError.contains("busctl: typeMismatch: ") && wrong.standardError.contains("'greet' expects {name: string}"))
        }
    }

    struct Exposition: Decodable {
        var contentType: String
        var families: [String: String]
        var samples: [Sample]

        struct Sample: Decodable {
            var name: String
            var labels: [String: String]
            var value: Double

            init(from decoder: any Decoder) throws {
                var container = try decoder.unkeyedContainer()
                name = try container.decode(String.self)
                labels = try container.decode([String: String].self)
                value = try container.decode(Double.self)
            }
        }

        /// The value of the one sample with this name whose labels include `labels`.
        func value(_ name: String, _ labels: [String: String]) -> Double? {
            let found = samples.filter { sample in sample.name == name && labels.allSatisfy { key, value in sample.labels[key] == value } }
            return found.count == 1 ? found[0].value : nil
        }
    }
}
