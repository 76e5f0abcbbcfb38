import BusCore
import BoardKit
import BoardKitTesting
import BusZeroMQ
import Foundation
import Histogram

/// BoardBus: client SDK → real `motherboard` → real board process (`bench-echo-board`) → back.
struct BoardBusBench {
    /// The fleet, for what starts processes (cold start, busctl); nil for a broker reached over tcp.
    let fleet: TestFleet?
    let address: BusAddress
    static let board: BoardID = "bench.echo"

    init(fleet: TestFleet) {
        self.fleet = fleet
        address = fleet.address
    }

    init(address: BusAddress) {
        fleet = nil
        self.address = address
    }

    /// With `traced`, each request starts a new trace (the header carries a W3C trace context).
    func latency(
        payload: Data, requests: Int, warmup: Int, command: String = "echo", contentType: String? = nil, traced: Bool = false
    ) async throws -> Histogram<UInt64> {
        let client = try BusClient(address: address)
        defer { client.close() }
        // The caller runs on the client's socket thread (its task executor), as a board's handlers do.
        return try await withTaskExecutorPreference(client.executor) {
            var histogram = makeHistogram()
            for index in 0..<(warmup + requests) {
                let trace = traced ? TraceContext.newTrace() : nil
                let start = monotonicNanoseconds()
                _ = try await Self.call(client, command: command, payload: payload, contentType: contentType, trace: trace, timeout: .seconds(5))
                if index >= warmup { _ = histogram.record(monotonicNanoseconds() - start) }
            }
            return histogram
        }
    }

    /// `clients` connections, each with `window` requests in flight, for `seconds`.
    func throughput(
        payload: Data, clients: Int, window: Int, seconds: Double, command: String = "echo", contentType: String? = nil, traced: Bool = false
    ) async throws -> Double {
        let connections = try (0..<clients).map { _ in try BusClient(address: address) }
        defer { connections.forEach { $0.close() } }
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        let start = monotonicNanoseconds()
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in connections {
                for _ in 0..<window {
                    group.addTask(executorPreference: client.executor) {
                        var completed = 0
                        while monotonicNanoseconds() < deadline {
                            _ = try await Self.call(
                                client, command: command, payload: payload, contentType: contentType, trace: traced ? TraceContext.newTrace() : nil,
                                timeout: .seconds(10))
                            completed += 1
                        }
                        return completed
                    }
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(total) / (Double(monotonicNanoseconds() - start) / 1e9)
    }

    /// One echo call; in a new trace when `trace` is given (the untraced call pays for no task-local
    /// value, as an application's call does not).
    private nonisolated(nonsending) static func call(
        _ client: BusClient, command: String, payload: Data, contentType: String?, trace: TraceContext?, timeout: Duration
    ) async throws -> Data {
        guard let trace else { return try await client.call(board, command: command, payload: payload, contentType: contentType, timeout: timeout) }
        return try await BusTrace.$current.withValue(trace) {
            try await client.call(board, command: command, payload: payload, contentType: contentType, timeout: timeout)
        }
    }

    /// Time from `activate` of an on-demand board that is not running to its reply (the broker
    /// starts the process, queues the input, delivers it once the board registers).
    func coldStart() async throws -> Double {
        let board: BoardID = "bench.cold"
        guard let fleet else { throw BusError(.badArgument, "cold start needs a local fleet") }
        return try await fleet.withClient { client in
            let start = monotonicNanoseconds()
            try await client.activate(board, payload: Data("{}".utf8), timeout: .seconds(30))
            let elapsed = Double(monotonicNanoseconds() - start) / 1e6
            // Stop it again, so the next round starts cold.
            if let pid = fleet.pid(of: board) { kill(pid, SIGTERM) }
            _ = try await client.waitForBoardToStop(board)
            return elapsed
        }
    }

    /// Wall time of one `busctl list` process, in milliseconds.
    func busctlList() async throws -> Double {
        guard let fleet else { throw BusError(.badArgument, "busctl list needs a local fleet") }
        let start = monotonicNanoseconds()
        let result = try await fleet.busctl("list", timeout: .seconds(30))
        guard result.exitCode == 0 else { throw BusError(.transport, "busctl list failed: \(result.standardError)") }
        return Double(monotonicNanoseconds() - start) / 1e6
    }
}

/// A `busctl monitor`-like consumer attached to everything the broker routes, on its own
/// connection, reading as fast as it can; detached by closing that connection.
struct AttachedMonitor {
    let client: BusClient
    let reader: Task<(events: Int, dropped: Int), Never>

    static func attach(_ fleet: TestFleet) async throws -> AttachedMonitor {
        let client = try BusClient(address: fleet.address)
        let stream = try await client.monitor(MonitorRequest(), timeout: .seconds(5))
        let reader = Task { () -> (events: Int, dropped: Int) in
            var (events, dropped) = (0, 0)
            for await push in stream {
                dropped += push.dropped
                if push.event != nil { events += 1 }
            }
            return (events, dropped)
        }
        return AttachedMonitor(client: client, reader: reader)
    }

    /// Detaches; returns what it read and what the broker dropped for it.
    func detach() async -> (events: Int, dropped: Int) {
        client.close()
        reader.cancel()
        return await reader.value
    }
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

extension BusClient {
    /// Waits until a manifest board is no longer running.
    func waitForBoardToStop(_ board: BoardID) async throws -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while ContinuousClock.now < deadline {
            if try await status(board).state == .stopped { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}
