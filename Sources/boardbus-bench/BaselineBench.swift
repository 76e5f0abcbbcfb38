import BusCore
import BusZeroMQ
import Foundation
import Histogram

/// The baseline: a client DEALER → C `zmq_proxy` (ROUTER/DEALER) → C echo DEALER → back.
/// Its clients block on their own threads, so nothing but ZeroMQ sits on the path; like
/// ``BusClient``s, they share the process's one libzmq context.
struct BaselineBench: Sendable {
    let endpoint: String
    /// The command named in the request header (the C echo ignores it; a BoardBus broker routes on it).
    var command = "echo"
    /// For a CURVE endpoint (tcp): the proxy's public key and the client's key pair.
    var curve: CurveClientCredentials? = nil

    /// The request's frame: a BoardBus request as the wire carries it (header, 0 byte, payload),
    /// so both sides move the same bytes.
    static func frames(payload: Data, command: String = "echo") throws -> [Data] {
        let header = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 1, target: "bench.echo", typeName: command)
        return try Envelope(header: header, payload: payload).frames()
    }

    func latency(payload: Data, requests: Int, warmup: Int) throws -> Histogram<UInt64> {
        try onThread {
            let context = try ZMQContext.shared()
            let socket = try connect(context)
            defer { socket.close() }
            let frames = try Self.frames(payload: payload, command: command)
            var histogram = makeHistogram()
            for index in 0..<(warmup + requests) {
                let start = monotonicNanoseconds()
                try roundTrip(socket, frames)
                if index >= warmup { _ = histogram.record(monotonicNanoseconds() - start) }
            }
            return histogram
        }
    }

    /// `clients` sockets on their own threads, each keeping `window` requests in flight.
    func throughput(payload: Data, clients: Int, window: Int, seconds: Double) throws -> Double {
        let frames = try Self.frames(payload: payload, command: command)
        let results = (0..<clients).map { _ in
            Thread.detachedResult { () throws -> Int in
                let context = try ZMQContext.shared()
                let socket = try connect(context)
                defer { socket.close() }
                let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
                var outstanding = 0
                var completed = 0
                for _ in 0..<window {
                    try send(socket, frames)
                    outstanding += 1
                }
                while outstanding > 0 {
                    guard socket.waitReadable(timeoutMilliseconds: 5_000), try socket.receive() != nil else {
                        throw BusError(.timeout, "baseline reply missing")
                    }
                    outstanding -= 1
                    completed += 1
                    if monotonicNanoseconds() < deadline {
                        try send(socket, frames)
                        outstanding += 1
                    }
                }
                return completed
            }
        }
        let start = monotonicNanoseconds()
        let total = try results.map { try $0.wait() }.reduce(0, +)
        return Double(total) / (Double(monotonicNanoseconds() - start) / 1e9)
    }

    private func connect(_ context: ZMQContext) throws -> ZMQSocket {
        let socket = try ZMQSocket(context: context, kind: .dealer)
        try socket.set(.sendHighWaterMark(10_000), .receiveHighWaterMark(10_000))
        if let curve {
            try socket.set(.curveServerKey(curve.serverKey), .curvePublicKey(curve.client.publicKey), .curveSecretKey(curve.client.secretKey ?? ""))
        }
        try socket.connect(endpoint)
        return socket
    }

    /// Sends, waiting while the socket's queue is full, for 5 s at most (a broker that stopped
    /// reading must not hang the bench). The clock is read only once the queue was found full:
    /// this runs for every message the baseline's client sends.
    private func send(_ socket: ZMQSocket, _ frames: [Data]) throws {
        guard try socket.send(frames) == .wouldBlock else { return }
        let deadline = monotonicNanoseconds() + 5_000_000_000
        repeat {
            guard monotonicNanoseconds() < deadline else { throw BusError(.timeout, "baseline request not taken in 5 s") }
            _ = socket.waitReadable(timeoutMilliseconds: 1)
        } while try socket.send(frames) == .wouldBlock
    }

    private func roundTrip(_ socket: ZMQSocket, _ frames: [Data]) throws {
        try send(socket, frames)
        guard socket.waitReadable(timeoutMilliseconds: 5_000), try socket.receive() != nil else {
            throw BusError(.timeout, "baseline reply missing")
        }
    }
}

/// Runs blocking work on a thread of its own (never on the concurrency pool).
func onThread<T>(_ body: @escaping @Sendable () throws -> T) throws -> T {
    try Thread.detachedResult(body).wait()
}

/// A result computed on a detached thread.
final class ThreadResult<T>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<T, any Error>?

    init(_ body: @escaping @Sendable () throws -> T) {
        let thread = Thread { [self] in
            result = Result { try body() }
            done.signal()
        }
        thread.start()
    }

    func wait() throws -> T {
        done.wait()
        return try result!.get()
    }
}

extension Thread {
    static func detachedResult<T>(_ body: @escaping @Sendable () throws -> T) -> ThreadResult<T> {
        ThreadResult(body)
    }
}
