import BoardKit
import BoardKitTesting
import BusZeroMQ
import Foundation
import Histogram

/// BoardBus: client SDK → real `motherboard` → real board process (`bench-echo-board`) → back.
struct BoardBusBench {
    let fleet: TestFleet
    static let board: BoardID = "bench.echo"

    func latency(payload: Data, requests: Int, warmup: Int) async throws -> Histogram<UInt64> {
        let client = try BusClient(address: fleet.address)
        defer { client.close() }
        // The caller runs on the client's socket thread (its task executor), as a board's handlers do.
        return try await withTaskExecutorPreference(client.executor) {
            var histogram = makeHistogram()
            for index in 0..<(warmup + requests) {
                let start = monotonicNanoseconds()
                _ = try await client.call(Self.board, command: "echo", payload: payload, timeout: .seconds(5))
                if index >= warmup { _ = histogram.record(monotonicNanoseconds() - start) }
            }
            return histogram
        }
    }

    /// `clients` connections, each with `window` requests in flight, for `seconds`.
    func throughput(payload: Data, clients: Int, window: Int, seconds: Double) async throws -> Double {
        let connections = try (0..<clients).map { _ in try BusClient(address: fleet.address) }
        defer { connections.forEach { $0.close() } }
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        let start = monotonicNanoseconds()
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in connections {
                for _ in 0..<window {
                    group.addTask(executorPreference: client.executor) {
                        var completed = 0
                        while monotonicNanoseconds() < deadline {
                            _ = try await client.call(Self.board, command: "echo", payload: payload, timeout: .seconds(10))
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

    /// Time from starting a board process that is not running to its first reply.
    func coldStart(index: Int) async throws -> Double {
        let start = monotonicNanoseconds()
        let board = try await fleet.startBoard("bench-echo-board", id: try BoardID(validating: "bench.cold\(index)"), timeout: .seconds(30))
        defer { Task { await board.stop() } }
        try await fleet.withClient { client in
            _ = try await client.call(try BoardID(validating: "bench.cold\(index)"), command: "echo", payload: echoPayload(bytes: 100), timeout: .seconds(5))
        }
        let elapsed = Double(monotonicNanoseconds() - start) / 1e6
        await board.stop()
        return elapsed
    }

    /// Wall time of one `busctl list` process, in milliseconds.
    func busctlList() async throws -> Double {
        let start = monotonicNanoseconds()
        let result = try await fleet.busctl("list", timeout: .seconds(30))
        guard result.exitCode == 0 else { throw BusError(.transport, "busctl list failed: \(result.standardError)") }
        return Double(monotonicNanoseconds() - start) / 1e6
    }
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
