import BoardKit
import BusCore
import BusZeroMQ
import Foundation
import Synchronization

/// Boards by the thousand, each on its own connection (raw DEALERs on one thread of their own),
/// that register, optionally register one run-time flow each, stay registered (heartbeats every
/// 500 ms, what the broker pushes read and dropped) until the body returns, then unregister.
enum ManyBoards {
    /// - Parameters:
    ///   - flows: whether each board registers a flow from itself to `bench.echo`.
    ///   - body: runs once they are all registered, with the seconds registering took.
    static func with<T>(
        count: Int, prefix: String, flows: Bool, endpoint: String, _ body: (_ registerSeconds: Double) async throws -> T
    ) async throws -> T {
        let ready = DispatchSemaphore(value: 0)
        let registered = Mutex<Result<Double, any Error>?>(nil)
        let stop = StopFlag()
        let pump = Thread.detachedResult {
            try serve(count: count, prefix: prefix, flows: flows, endpoint: endpoint, stop: stop) { seconds in
                registered.withLock { $0 = seconds }
                ready.signal()
            }
        }
        try onThread { ready.wait() }
        defer {
            stop.raise()
            _ = try? pump.wait()
        }
        let seconds = try registered.withLock { $0 }!.get()
        return try await body(seconds)
    }

    private static func serve(
        count: Int, prefix: String, flows: Bool, endpoint: String, stop: StopFlag, ready: (Result<Double, any Error>) -> Void
    ) throws {
        let context = try ZMQContext(maximumSockets: Int32(count + 64))
        defer { context.terminate() }
        var sockets: [(socket: ZMQSocket, id: BoardID)] = []
        defer { sockets.forEach { $0.socket.close() } }
        do {
            let start = monotonicNanoseconds()
            for index in 0..<count {
                let socket = try ZMQSocket(context: context, kind: .dealer)
                let id = try BoardID(validating: "\(prefix)\(index)")
                sockets.append((socket, id))
                try socket.connect(endpoint)
                let registration = Registration(id: id, pid: getpid(), commands: ["echo"])
                let header = EnvelopeHeader(
                    kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 30_000, source: id.rawValue)
                _ = try socket.send(try Envelope(header: header, payload: try PayloadCodec.encode(registration)).frames())
            }
            for (socket, _) in sockets { try awaitReply(on: socket, correlationID: 1, what: "registration") }
            let seconds = Double(monotonicNanoseconds() - start) / 1e9
            if flows {
                for (socket, id) in sockets {
                    let spec = FlowSpec(sources: [id], outputType: "ScaleTick", target: "bench.echo")
                    let header = EnvelopeHeader(
                        kind: .control, flags: .replyExpected, correlationID: 2, timeoutMilliseconds: 30_000, source: id.rawValue,
                        typeName: ControlOperation.registerFlow)
                    _ = try socket.send(try Envelope(header: header, payload: try PayloadCodec.encode(spec)).frames())
                }
                for (socket, _) in sockets { try awaitReply(on: socket, correlationID: 2, what: "flow registration") }
            }
            ready(.success(seconds))
        } catch {
            ready(.failure(error))
            throw error
        }
        // Each board heartbeats (and reads what waits for it) every 500 ms, in steps of at most
        // 250 a cycle (every 2 ms at 2 000 boards, 8 of them; every 50 ms at 10, one), at steps
        // paced by the clock so that late wake-ups do not stretch the cycle: as boards that are
        // processes of their own heartbeat at their own moments. Steps of a 25th every 20 ms
        // (80 boards at once at 2 000) were bursts that the round trips measured meanwhile waited
        // behind: the p99 with 2 000 boards read about 3–4.5 × the p99 with 10 (docs/BENCHMARKS.md,
        // "2 000 boards: p99").
        let steps = max(1, min(250, sockets.count))
        let stepNanoseconds = UInt64(500_000_000 / steps)
        var (turn, next) = (0, monotonicNanoseconds())
        while !stop.isRaised {
            next += stepNanoseconds
            let now = monotonicNanoseconds()
            if next > now { usleep(UInt32((next - now) / 1_000)) } else { next = now }
            for index in stride(from: turn % steps, to: sockets.count, by: steps) {
                let (socket, id) = sockets[index]
                while (try? socket.receive()) ?? nil != nil {}
                _ = try? socket.send(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: id.rawValue)).frames())
            }
            turn += 1
        }
        for (socket, _) in sockets {
            _ = try socket.send(try Envelope(header: EnvelopeHeader(kind: .unregister, source: "")).frames())
        }
    }

    /// Reads until the answer to `correlationID` (heartbeats from the broker may come first).
    private static func awaitReply(on socket: ZMQSocket, correlationID: UInt64, what: String) throws {
        let deadline = monotonicNanoseconds() + 30_000_000_000
        while monotonicNanoseconds() < deadline {
            guard socket.waitReadable(timeoutMilliseconds: 1_000), let frames = try socket.receive() else { continue }
            let header = try Envelope(frames: frames).header
            guard header.correlationID == correlationID else { continue }
            if header.kind == .reply { return }
            throw BusError(.transport, "\(what) refused: \(header.typeName)")
        }
        throw BusError(.timeout, "no answer to a \(what)")
    }
}

/// Set once, read from another thread.
final class StopFlag: Sendable {
    private let raised = Atomic<Bool>(false)
    var isRaised: Bool { raised.load(ordering: .acquiring) }
    func raise() { raised.store(true, ordering: .releasing) }
}

/// Boards by the thousand registering and leaving: how long registering takes and whether the
/// broker gives the memory back once they are gone (it kept 99 MB of 28 MB after 2 000).
struct ChurnBench {
    let endpoint: String
    let brokerPID: Int32

    struct Result {
        var boards: Int
        var beforeKiB: Int
        var registeredKiB: Int
        var afterKiB: Int
        var registerSeconds: Double
    }

    /// Registers `boards` boards, each on its own connection, then unregisters them and closes.
    func run(boards: Int) async throws -> Result {
        let before = residentKiB(of: brokerPID) ?? 0
        let (seconds, registered) = try await ManyBoards.with(count: boards, prefix: "churn.board", flows: false, endpoint: endpoint) {
            ($0, residentKiB(of: brokerPID) ?? 0)
        }
        let after = try await settledResidentKiB(of: brokerPID)
        return Result(boards: boards, beforeKiB: before, registeredKiB: registered, afterKiB: after, registerSeconds: seconds)
    }
}

/// A process's resident memory once it stops changing (the broker trims its heap on its tick
/// once boards are gone, looking once a second): within 256 KiB for `window` (1.5 s by default,
/// for the broker's once-a-second look), read every 100 ms, at most 8 s.
func settledResidentKiB(of pid: Int32, steadyFor window: Duration = .milliseconds(1500)) async throws -> Int {
    var last = residentKiB(of: pid) ?? 0
    let steadyReadings = Int(window / .milliseconds(100))
    var steady = 0
    for _ in 0..<80 where steady < steadyReadings {
        try await Task.sleep(for: .milliseconds(100))
        let now = residentKiB(of: pid) ?? 0
        steady = abs(now - last) < 256 ? steady + 1 : 0
        last = now
    }
    return last
}
