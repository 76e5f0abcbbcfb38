import BusCore
import Foundation
import Logging
import MotherboardCore

/// The broker's own work per round trip, without sockets: decode, route, remember, re-encode a
/// command and its reply. Tells how much of the gap to the baseline is the broker's logic.
enum BrokerLogicBench {
    final class DiscardingTransport: MotherboardTransport {
        var last: Envelope?
        func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
            last = envelope
            _ = envelope.frames()  // the real transport encodes too
            return true
        }
        func isConnected(_ peer: PeerID) -> Bool { true }
    }

    /// Nanoseconds per round trip (command in, forwarded, reply in, relayed).
    static func roundTrip(iterations: Int) throws -> Double {
        let transport = DiscardingTransport()
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let motherboard = try Motherboard(manifest: FleetManifest(), transport: transport, logger: logger)
        let board = PeerID(Data([0, 1, 2, 3, 4]))
        let client = PeerID(Data([0, 9, 9, 9, 9]))
        let now = ContinuousClock.now
        let registration = Envelope(
            header: EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1),
            payload: try PayloadCodec.encode(Registration(id: "bench.echo", pid: 1)))
        motherboard.receive(registration.frames(), from: board, now: now)
        let request = Envelope(
            header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 5, timeoutMilliseconds: 5000, target: "bench.echo", typeName: "echo"),
            payload: echoPayload(bytes: 100)).frames()
        let start = monotonicNanoseconds()
        for _ in 0..<iterations {
            motherboard.receive(request, from: client, now: now)
            guard let forwarded = transport.last else { throw BusError(.transport, "nothing forwarded") }
            motherboard.receive(forwarded.reply(payload: forwarded.payload, source: "bench.echo").frames(), from: board, now: now)
        }
        return Double(monotonicNanoseconds() - start) / Double(iterations)
    }
}
