import BoardKit
import BoardKitTesting
import BusZeroMQ
import Foundation

/// Across hosts: a command over tcp+CURVE between two network namespaces (client on B, broker
/// and echo board on A) against the C baseline doing the same (REQ-like DEALER → `zmq_proxy`
/// with a CURVE front → echo), measured by one client process on B in alternated rounds; then how
/// long a cut link takes to be reported and how long the edge scope takes to come back.
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
    }

    static let parentManifest = #"""
        {"scopes": [{"name": "edge"}],
         "boards": [{"id": "bench.echo", "executable": "bench-echo-board", "start": "always"}]}
        """#
    static let edgeManifest = #"""
        {"scopes": [{"name": "edge"}],
         "boards": [{"id": "sensor", "executable": "bench-echo-board", "scope": "edge", "start": "always", "restart": "always"}]}
        """#

    /// What the remote keys may do on A: the client on B calls the echo board, B's motherboard
    /// serves `edge`.
    static let policy = #"""
        {"rules": [{"allow": ["call"], "principals": ["ops"], "targets": ["bench.echo"]},
                   {"allow": ["serve"], "principals": ["edge-b"], "targets": ["edge/*"]}]}
        """#

    static func run(settings: BenchSettings, quick: Bool, report: Report) async throws {
        try await NetworkLab.with { lab in
            let place = lab.isolated ? "two network namespaces" : "127.0.0.1 (no network namespaces here)"
            progress("across hosts: tcp+CURVE between \(place)")
            _ = try await lab.startParent(manifest: parentManifest, policy: policy)
            try lab.expectOK(try await lab.busctlA("wait", "--timeout", "30"))

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
                    "--tcp-client", lab.parentEndpoint, "--tcp-server-key", "\(lab.stateA)/curve/server.pub", "--tcp-client-key",
                    "\(lab.directory)/ops.key", "--tcp-baseline", baselineEndpoint, "--tcp-baseline-key", "\(lab.directory)/baseline.key",
                    "--tcp-requests", "\(quick ? 2_000 : settings.latencyRequests / 2)", "--tcp-seconds",
                    "\(quick ? 1.5 : settings.throughputSeconds / 2)",
                ], in: 1)
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
        endpoint: String, serverKey: String, clientKey: String, baselineEndpoint: String, baselineKey: String, requests: Int, seconds: Double,
        settings: BenchSettings
    ) async throws {
        let clientKeys = try CurveKeyPair.load(path: clientKey)
        var address = BusAddress(runtimeDirectory: FileManager.default.temporaryDirectory.path, endpoint: endpoint)
        address.curve = try CurveClientCredentials(serverKey: try CurveKeyPair.load(path: serverKey).publicKey, client: clientKeys)
        let base = BaselineBench(
            endpoint: baselineEndpoint,
            curve: try CurveClientCredentials(serverKey: try CurveKeyPair.load(path: baselineKey).publicKey, client: clientKeys))
        let bus = BoardBusBench(address: address)
        let payload = echoPayload(bytes: 100)
        let (baseHistogram, busHistograms) = try await alternatedLatency(
            label: "100 B over tcp+CURVE", base: base, bus: bus, payload: payload, requests: requests, warmup: requests / 10, calls: [.raw])
        var (baseRate, busRate) = (0.0, 0.0)
        let rounds = 3
        for round in 1...rounds {
            progress("throughput over tcp+CURVE: round \(round)/\(rounds)")
            baseRate += try base.throughput(payload: payload, clients: settings.clients, window: settings.window, seconds: seconds / Double(rounds))
            busRate +=
                try await bus.throughput(
                    payload: payload, clients: settings.clients, window: settings.window, seconds: seconds / Double(rounds), command: "echo.raw")
        }
        let (b, e) = (LatencySummary(baseHistogram), LatencySummary(busHistograms[0]))
        let result = ClientResult(
            baseline: [b.p50, b.p90, b.p99, b.p999], boardBus: [e.p50, e.p90, e.p99, e.p999], baselineRate: baseRate / Double(rounds),
            boardBusRate: busRate / Double(rounds))
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
