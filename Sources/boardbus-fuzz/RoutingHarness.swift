import BusCore
import Foundation
import Logging
import MotherboardCore
import MotherboardTesting

/// The broker's two routing paths on the same header: what `routeInPlace` routes must be what
/// `receive` (the parsed path) sends, to the same peer with the same header; what it declines
/// it must leave untouched (the parsed path then answers it).
enum RoutingHarness {
    static let client = PeerID(Data([0xC0]))
    /// A broker's logger that says nothing below critical (a harness builds brokers by the thousand).
    static let quietLogger: Logger = {
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        return logger
    }()
    static let boards: [(BoardID, PeerID)] = [("demo.greeter", PeerID(Data([3]))), ("app.dashboard", PeerID(Data([2])))]
    static let now = ContinuousClock.now

    /// A broker with two registered boards and one client's command pending to the greeter
    /// (correlation id 41 from the client), so that replies have something to match.
    static func broker() -> (Motherboard, RecordingTransport) {
        let recorder = RecordingTransport()
        let motherboard = try! Motherboard(manifest: FleetManifest(), transport: recorder, logger: quietLogger)
        for (index, (id, peer)) in boards.enumerated() {
            var header = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: UInt64(index + 1), source: id.rawValue)
            header.timeoutMilliseconds = 1_000
            let registration = Registration(id: id, pid: 100 + Int32(index), commands: ["greet"])
            motherboard.receive(.success(Envelope(header: header, payload: try! PayloadCodec.encode(registration))), from: peer, now: now)
        }
        let command = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 41, target: "demo.greeter", typeName: "greet")
        motherboard.receive(.success(Envelope(header: command, payload: Data("{}".utf8))), from: client, now: now)
        recorder.sent.removeAll()
        return (motherboard, recorder)
    }

    /// Input: one byte choosing the sender (the client or a board), then the header frame.
    static func route(_ input: Data) {
        guard let first = input.first else { return }
        let senders = [client] + boards.map(\.1)
        let sender = senders[Int(first) % senders.count]
        let frame = Data(input.dropFirst())
        let (inPlace, inPlaceSent) = broker()
        let (parsed, parsedSent) = broker()
        var rewritten = [UInt8](frame)
        let route = rewritten.withUnsafeMutableBytes { inPlace.routeInPlace($0, from: sender, now: now) }
        guard let route else {
            precondition(rewritten == [UInt8](frame), "a header declined in place was changed")
            precondition(inPlaceSent.sent.isEmpty, "a header declined in place sent something")
            return
        }
        parsed.receive([frame, Data("{}".utf8)], from: sender, now: now)
        precondition(parsedSent.sent.count == 1, "routed in place, but the parsed path sent \(parsedSent.sent.count) messages")
        let expected = parsedSent.sent[0]
        precondition(expected.peer == route.peer, "routed in place to another peer than the parsed path")
        precondition((try? HeaderCodec.decode(Data(rewritten))) == expected.envelope.header, "routed in place with another header")
    }
}
