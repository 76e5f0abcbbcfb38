import BusCore
import Foundation
import Logging
import MotherboardCore
import MotherboardTesting

/// The broker's own work per round trip, without sockets: decode, route, remember, re-encode a
/// command and its reply. Tells how much of the gap to the baseline is the broker's logic.
enum BrokerLogicBench {
    static let board = PeerID(Data([0, 1, 2, 3, 4]))
    static let client = PeerID(Data([0, 9, 9, 9, 9]))

    /// A motherboard with the echo board registered.
    static func motherboard(transport: some MotherboardTransport) throws -> Motherboard {
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let motherboard = try Motherboard(manifest: FleetManifest(), transport: transport, logger: logger)
        let registration = Envelope(
            header: EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1),
            payload: try PayloadCodec.encode(Registration(id: "bench.echo", pid: 1)))
        motherboard.receive(try registration.frames(), from: board, now: .now)
        return motherboard
    }

    /// Nanoseconds per round trip (command in, forwarded, reply in, relayed). Each message comes
    /// in as the transport hands it over: a header decoded from bytes, a payload copied.
    static func roundTrip(iterations: Int) throws -> Double {
        let transport = RecordingTransport(encodesHeaders: true)
        let motherboard = try motherboard(transport: transport)
        let (board, client) = (Self.board, Self.client)
        let now = ContinuousClock.now
        let requestHeader = try HeaderCodec.encode(
            EnvelopeHeader(
                kind: .command, flags: .replyExpected, correlationID: 5, timeoutMilliseconds: 5000, target: "bench.echo", typeName: "echo"))
        let payload = [UInt8](echoPayload(bytes: 100))
        let replyBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 8192, alignment: 8)
        defer { replyBuffer.deallocate() }
        func arrive(_ header: UnsafeRawBufferPointer, from peer: PeerID) throws {
            let envelope = Envelope(header: try HeaderCodec.decode(header), payload: Data(payload))
            motherboard.receive(.success(envelope), from: peer, now: now)
        }
        let start = monotonicNanoseconds()
        for _ in 0..<iterations {
            try requestHeader.withUnsafeBytes { try arrive($0, from: client) }
            guard let forwarded = transport.sent.last?.envelope else { throw BusError(.transport, "nothing forwarded") }
            transport.sent.removeAll(keepingCapacity: true)
            // The board's answer, as its bytes reach the broker.
            let length = try HeaderCodec.encode(forwarded.reply(source: "bench.echo").header, into: replyBuffer)
            try arrive(UnsafeRawBufferPointer(rebasing: replyBuffer[0..<length]), from: board)
        }
        return Double(monotonicNanoseconds() - start) / Double(iterations)
    }

    /// Nanoseconds per round trip routed in place, as the real broker routes commands and replies:
    /// each header copied into a frame-like buffer (as it arrives), read and rewritten there.
    static func roundTripInPlace(iterations: Int) throws -> Double {
        let motherboard = try motherboard(transport: RecordingTransport(encodesHeaders: true))
        let now = ContinuousClock.now
        let request = try HeaderCodec.encode(
            EnvelopeHeader(
                kind: .command, flags: .replyExpected, correlationID: 5, timeoutMilliseconds: 5000, target: "bench.echo", typeName: "echo"))
        let reply = try HeaderCodec.encode(EnvelopeHeader(kind: .reply, source: "bench.echo"))
        let frame = UnsafeMutableRawBufferPointer.allocate(byteCount: 8192, alignment: 8)
        defer { frame.deallocate() }
        let requestFrame = UnsafeMutableRawBufferPointer(rebasing: frame[0..<request.count])
        let replyFrame = UnsafeMutableRawBufferPointer(rebasing: frame[0..<reply.count])
        let start = monotonicNanoseconds()
        for _ in 0..<iterations {
            requestFrame.copyBytes(from: request)
            guard motherboard.routeInPlace(requestFrame, from: client, now: now)?.peer == board else {
                throw BusError(.transport, "command not routed in place")
            }
            // The board answers under the correlation id the broker gave the command.
            let forwarded = try HeaderLayout(UnsafeRawBufferPointer(requestFrame)).correlationID
            replyFrame.copyBytes(from: reply)
            HeaderLayout.setCorrelationID(forwarded, in: replyFrame)
            guard motherboard.routeInPlace(replyFrame, from: board, now: now)?.peer == client else {
                throw BusError(.transport, "reply not routed in place")
            }
        }
        return Double(monotonicNanoseconds() - start) / Double(iterations)
    }
}
