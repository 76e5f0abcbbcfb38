import BusCore
import BoardKit
import BoardKitTesting
import BusZeroMQ
import Foundation

/// Across hosts: a command over tcp+CURVE between two network namespaces (client on B, broker
/// and echo board on A) against the C baseline doing the same (REQ-like DEALER → `zmq_proxy`
/// with a CURVE front → echo), measured by one client process on B in alternated rounds; then how
/// long a cut link takes to be reported and how long the edge scope takes to come back.
///
/// With Debian's nats-server, the same client also calls the echo board through NATS: a
/// motherboard of its own on B, joined with A's to a nats-server on A (`--nats`), against the
/// direct link, same run.
///
/// Where network namespaces cannot be made (not root, no iproute2), the same over 127.0.0.1, the
/// link "cut" by stopping the edge motherboard, and the rows say so.
enum NetworkBench {
    /// What the client on host B measured.
    struct ClientResult: Codable {
        var baseline: [Double]
        var boardBus: [Double]
        var baselineRate: Double
        var boardBusRate: Double
        /// Through NATS, when it was measured.
        var nats: [Double]?
        var natsRate: Double?
    }

    static let natsServer = "/usr/sbin/nats-server"

    static let parentManifest = #"""
        {"scopes": [{"name": "edge"}],
         "boards": [{"id": "bench.echo", "executable": "bench-echo-board", "start": "always"}]}
        """#
    static let edgeManifest = #"""
        {"scopes": [{"name": "edge"}],
         "boards": [{"id": "sensor", "executable": "bench-echo-board", "scope": "edge", "start": "always", "restart": "always"}]}
        """#

    /// What the remote principals may do on A: the client on B calls the echo board (over tcp,
    /// and through NATS), B's motherboard serves `edge`.
    static let policy = #"""
        {"rules": [{"allow": ["call"], "principals": ["ops", "nats"], "targets": ["bench.echo"]},
                   {"allow": ["serve"], "principals": ["edge-b"], "targets": ["edge/*"]}]}
        """#

    static func run(settings: BenchSettings, quick: Bool, report: Report) async throws {
        try await NetworkLab.with { lab in
            let place = lab.isolated ? "two network namespaces" : "127.0.0.1 (no network namespaces here)"
            progress("across hosts: tcp+CURVE between \(place)")
            // NATS: a nats-server on A that A's motherboard joins, and a motherboard on B that
            // joins it too, for B's client to call A's echo board through.
            let natsURL = "nats://\(lab.parentAddress):\(lab.port + 2)"
            let hasNATS = FileManager.default.isExecutableFile(atPath: natsServer)
            if hasNATS {
                let server = try await lab.start(
                    natsServer, ["-a", lab.parentAddress, "-p", "\(lab.port + 2)", "-P", "\(lab.directory)/nats.pid"], in: 0, runtime: nil)
                let ready = await eventually(timeout: .seconds(10)) { server.standardError.contains("Server is ready") }
                guard ready else { throw BusError(.transport, "nats-server did not start: \(server.standardError)") }
            } else {
                report.note("across hosts through NATS: left out (no \(natsServer); Debian's nats-server has it)")
            }
            let natsArguments = { (host: String) in ["--nats", natsURL, "--nats-fleet", "bench", "--nats-host", host] }
            _ = try await lab.startParent(manifest: parentManifest, policy: policy, arguments: hasNATS ? natsArguments("host-a") : [])
            try lab.expectOK(try await lab.busctlA("wait", "--timeout", "30"))
            var natsBus: [String] = []
            if hasNATS {
                let runtime = "\(lab.directory)/n"
                _ = try await lab.startMotherboard(
                    manifest: #"{"boards": []}"#, named: "nats-b", arguments: natsArguments("host-b"), in: 1, runtime: runtime)
                let listed = try await eventually(timeout: .seconds(20)) {
                    let list = try await lab.run(lab.binaries + "/busctl", ["list"], in: 1, runtime: runtime)
                    return list.standardOutput.contains("bench.echo")
                }
                guard listed else { throw BusError(.timeout, "B's motherboard did not see A's echo board through NATS") }
                natsBus = ["--nats-bus", "ipc://\(runtime)/motherboard.sock"]
            }

            // The baseline: the C proxy with a CURVE front on A's address, its echo on A.
            try lab.expectOK(
                try await lab.run(lab.binaries + "/busctl", ["keys", "new", "baseline", "--out", "\(lab.directory)/baseline.key"], in: nil))
            let proxyKeys = try CurveKeyPair.load(path: "\(lab.directory)/baseline.key")
            let baselineEndpoint = "tcp://\(lab.parentAddress):\(lab.port + 1)"
            let proxy = try await lab.start(
                lab.binaries + "/zmq-baseline-proxy", [baselineEndpoint, "ipc://\(lab.directory)/baseline-back.sock", proxyKeys.secretKey ?? ""],
                in: 0, runtime: nil)
            try await proxy.waitForOutput("READY", timeout: .seconds(10))
            let echo = try await lab.start(lab.binaries + "/zmq-baseline-echo", ["ipc://\(lab.directory)/baseline-back.sock"], in: 0, runtime: nil)
            try await echo.waitForOutput("READY", timeout: .seconds(10))

            let client = try await lab.run(
                lab.binaries + "/boardbus-bench",
                [
                    "tcp-client", lab.parentEndpoint, "--server-key", "\(lab.stateA)/curve/server.pub", "--client-key",
                    "\(lab.directory)/ops.key", "--baseline", baselineEndpoint, "--baseline-key", "\(lab.directory)/baseline.key",
                    "--requests", "\(quick ? 2_000 : settings.latencyRequests / 2)", "--seconds",
                    "\(quick ? 1.5 : settings.throughputSeconds / 2)",
                ] + natsBus, in: 1)
            try lab.expectOK(client)
            guard let line = client.standardOutput.split(separator: "\n").last else { throw BusError(.malformed, "no result from the tcp client") }
            let result = try JSONDecoder().decode(ClientResult.self, from: Data(line.utf8))
            let label = "100 B, tcp+CURVE across \(lab.isolated ? "network namespaces" : "127.0.0.1")"
            report.latency(
                label, baseline: LatencySummary(values: result.baseline), boardBus: LatencySummary(values: result.boardBus), judged: "tcp+CURVE echo",
                p50Guard: 1.3)
            report.throughput(
                "\(label), \(settings.clients)×\(settings.window) in flight", baseline: result.baselineRate, boardBus: result.boardBusRate,
                judged: "tcp+CURVE echo", floor: 0.33)
            if let nats = result.nats.map(LatencySummary.init(values:)), let natsRate = result.natsRate {
                let direct = LatencySummary(values: result.boardBus)
                let what = "100 B across hosts through NATS (B's motherboard → nats-server → A's) instead of the direct tcp+CURVE link"
                report.cost("\(what): round trip p50 (µs)", without: direct.p50, with: nats.p50)
                report.cost("\(what): round trip p99 (µs)", without: direct.p99, with: nats.p99)
                report.cost(
                    "\(what): throughput, \(settings.clients)×\(settings.window) in flight (msg/s)", without: result.boardBusRate, with: natsRate,
                    decimals: 0)
            }

            // One round in a quick run: each is about 3 s (the cut is noticed after the 2.5 s liveness timeout).
            try await linkTimes(lab: lab, rounds: quick ? 1 : 5, report: report)
        }
    }

    /// Cut the link under an edge scope and bring it back, `rounds` times: how long until a call
    /// across it is answered `unreachable`, until the parent shows the board unreachable, and
    /// until it is registered again once the link is back.
    static func linkTimes(lab: NetworkLab, rounds: Int, report: Report) async throws {
        _ = try await lab.startEdge(manifest: edgeManifest)
        try lab.expectOK(try await lab.busctlA("wait", "sensor", "--scope", "edge", "--timeout", "30"))
        let client = try BusClient(address: BusAddress(runtimeDirectory: lab.runtimeA))
        defer { client.close() }
        let edge = Scope("edge")
        var (answered, shown, recovered) = ([Double](), [Double](), [Double]())
        func state() async -> BoardState? { try? await client.status("sensor", scope: edge, timeout: .seconds(2)).state }
        func waitFor(_ wanted: BoardState, from start: UInt64) async throws -> Double {
            while await state() != wanted {
                guard monotonicNanoseconds() - start < 30_000_000_000 else { throw BusError(.timeout, "sensor never became \(wanted)") }
                try await Task.sleep(for: .milliseconds(10))
            }
            return Double(monotonicNanoseconds() - start) / 1e6
        }
        for round in 1...rounds {
            progress("cut link: round \(round)/\(rounds)")
            _ = try await client.call("sensor", command: "echo.raw", payload: echoPayload(bytes: 100), scope: edge, timeout: .seconds(10))
            try await lab.cutLink()
            let cut = monotonicNanoseconds()
            do {
                _ = try await client.call("sensor", command: "echo.raw", payload: echoPayload(bytes: 100), scope: edge, timeout: .seconds(20))
                throw BusError(.handlerFailed, "a call across a cut link was answered")
            } catch let error as BusError where error.code == .unreachable {
                answered.append(Double(monotonicNanoseconds() - cut) / 1e6)
            }
            shown.append(try await waitFor(.unreachable, from: cut))
            try await lab.restoreLink()
            recovered.append(try await waitFor(.running, from: monotonicNanoseconds()))
        }
        let how = lab.isolated ? "ip link set down" : "edge motherboard stopped"
        report.single("cut link (\(how)): a call across it answered `unreachable` (median of \(rounds))", milliseconds: median(answered))
        report.single("cut link: the parent shows the board unreachable (median of \(rounds))", milliseconds: median(shown))
        report.single("link back: the edge board registered again (median of \(rounds))", milliseconds: median(recovered))
    }

    /// The client on host B: both targets alternated in rounds; one JSON line of results.
    static func client(
        endpoint: String, serverKey: String, clientKey: String, baselineEndpoint: String, baselineKey: String, natsBus: String?, requests: Int,
        seconds: Double, settings: BenchSettings
    ) async throws {
        let clientKeys = try CurveKeyPair.load(path: clientKey)
        var address = BusAddress(runtimeDirectory: FileManager.default.temporaryDirectory.path, endpoint: endpoint)
        address.curve = try CurveClientCredentials(serverKey: try CurveKeyPair.load(path: serverKey).publicKey, client: clientKeys)
        let base = BaselineBench(
            endpoint: baselineEndpoint,
            curve: try CurveClientCredentials(serverKey: try CurveKeyPair.load(path: baselineKey).publicKey, client: clientKeys))
        let bus = BoardBusBench(address: address)
        let nats = natsBus.map { BoardBusBench(address: BusAddress(runtimeDirectory: FileManager.default.temporaryDirectory.path, endpoint: $0)) }
        let payload = echoPayload(bytes: 100)
        // The three alternated in each round, so that none gets a quieter machine.
        var (baseHistogram, busHistogram, natsHistogram) = (makeHistogram(), makeHistogram(), makeHistogram())
        let latencyRounds = 10
        for round in 1...latencyRounds {
            progress("round trip 100 B across hosts: round \(round)/\(latencyRounds)")
            let (count, warmup) = (requests / latencyRounds, requests / 10 / latencyRounds)
            baseHistogram.add(try base.latency(payload: payload, requests: count, warmup: warmup))
            busHistogram.add(try await bus.latency(payload: payload, requests: count, warmup: warmup, command: "echo.raw"))
            // A quarter as many through NATS, whose round trip is three to four times as long: the
            // client's run stays within its minute.
            if let nats {
                natsHistogram.add(try await nats.latency(payload: payload, requests: max(100, count / 4), warmup: warmup / 4, command: "echo.raw"))
            }
        }
        var (baseRate, busRate, natsRate) = (0.0, 0.0, 0.0)
        let rounds = 3
        let share = seconds / Double(rounds)
        for round in 1...rounds {
            progress("throughput across hosts: round \(round)/\(rounds)")
            baseRate += try base.throughput(payload: payload, clients: settings.clients, window: settings.window, seconds: share)
            busRate += try await bus.throughput(
                payload: payload, clients: settings.clients, window: settings.window, seconds: share, command: "echo.raw")
            if let nats {
                natsRate += try await nats.throughput(
                    payload: payload, clients: settings.clients, window: settings.window, seconds: share, command: "echo.raw")
            }
        }
        let (b, e, n) = (LatencySummary(baseHistogram), LatencySummary(busHistogram), LatencySummary(natsHistogram))
        let result = ClientResult(
            baseline: [b.p50, b.p90, b.p99, b.p999], boardBus: [e.p50, e.p90, e.p99, e.p999], baselineRate: baseRate / Double(rounds),
            boardBusRate: busRate / Double(rounds), nats: nats == nil ? nil : [n.p50, n.p90, n.p99, n.p999],
            natsRate: nats == nil ? nil : natsRate / Double(rounds))
        print(String(decoding: try JSONEncoder().encode(result), as: UTF8.self))
    }
}

extension LatencySummary {
    /// From p50, p90, p99 and p99.9 in µs (as a client in another process measured them).
    init(values: [Double]) {
        self = LatencySummary(makeHistogram())
        p50 = values[0]
        p90 = values[1]
        p99 = values[2]
        p999 = values[3]
    }
}
