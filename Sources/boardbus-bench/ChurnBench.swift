import BusCore
import BoardKit
import BusZeroMQ
import Foundation

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
        let (registered, seconds) = try onThread { () -> (Int, Double) in
            let context = try ZMQContext(maximumSockets: Int32(boards + 64))
            defer { context.terminate() }
            var sockets: [ZMQSocket] = []
            defer { sockets.forEach { $0.close() } }
            let start = monotonicNanoseconds()
            for index in 0..<boards {
                let socket = try ZMQSocket(context: context, kind: .dealer)
                sockets.append(socket)
                try socket.connect(endpoint)
                let registration = Registration(id: try BoardID(validating: "churn.board\(index)"), pid: getpid(), commands: ["echo"])
                let header = EnvelopeHeader(
                    kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 30_000, source: registration.id.rawValue)
                _ = try socket.send(try Envelope(header: header, payload: try PayloadCodec.encode(registration)).frames())
            }
            for socket in sockets {
                guard socket.waitReadable(timeoutMilliseconds: 30_000), let frames = try socket.receive(),
                    try Envelope(frames: frames).header.kind == .reply
                else { throw BusError(.timeout, "a churn board was not registered") }
            }
            let seconds = Double(monotonicNanoseconds() - start) / 1e9
            let registered = residentKiB(of: brokerPID) ?? 0
            for socket in sockets {
                _ = try socket.send(try Envelope(header: EnvelopeHeader(kind: .unregister, source: "")).frames())
            }
            return (registered, seconds)
        }
        // The broker trims its heap on its tick once the boards are gone: wait until it settles.
        var after = residentKiB(of: brokerPID) ?? 0
        var steady = 0
        for _ in 0..<50 where steady < 5 {
            try await Task.sleep(for: .milliseconds(100))
            let now = residentKiB(of: brokerPID) ?? 0
            steady = abs(now - after) < 256 ? steady + 1 : 0
            after = now
        }
        return Result(boards: boards, beforeKiB: before, registeredKiB: registered, afterKiB: after, registerSeconds: seconds)
    }
}
