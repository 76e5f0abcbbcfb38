import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// `routeInPlace` (the broker's path for commands and replies, on the received frames) sends what
/// `receive` (the path for parsed envelopes) sends, or declines and changes nothing.
@Suite("Routing in place")
struct InPlaceRoutingTests {
    let greeter = PeerID(Data([3]))
    let dashboard = PeerID(Data([2]))

    /// Two brokers in the same state: one is given parsed envelopes, the other header frames.
    func twins() throws -> (parsed: Harness, inPlace: Harness) {
        let (parsed, inPlace) = (try Harness(), try Harness())
        for harness in [parsed, inPlace] {
            harness.register("demo.greeter", peer: greeter)
            harness.register("app.dashboard", peer: dashboard)
        }
        return (parsed, inPlace)
    }

    /// Routes `header` in place; returns where it goes and the header as rewritten in the frame.
    func routeInPlace(_ harness: Harness, _ header: EnvelopeHeader, from peer: PeerID) throws -> (PeerID?, EnvelopeHeader) {
        var frame = try HeaderCodec.encode(header)
        let route = frame.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: peer, now: harness.now) }
        #expect(route == nil || route?.kind == header.kind)
        return (route?.peer, try HeaderCodec.decode(Data(frame)))
    }

    /// Routes `header` both ways and checks that both send the same header to the same peer.
    @discardableResult
    func expectSameRoute(_ twins: (parsed: Harness, inPlace: Harness), _ header: EnvelopeHeader, from peer: PeerID) throws -> EnvelopeHeader {
        twins.parsed.deliver(Envelope(header: header, payload: Data("{}".utf8)), from: peer)
        #expect(twins.parsed.transport.sent.count == 1)
        let sent = try #require(twins.parsed.transport.sent.last)
        twins.parsed.transport.sent.removeAll()
        let (destination, rewritten) = try routeInPlace(twins.inPlace, header, from: peer)
        #expect(destination == sent.peer)
        #expect(rewritten == sent.envelope.header)
        return rewritten
    }

    @Test func aClientsCommandAndItsReplyGoWhereParsedOnesGo() throws {
        let twins = try twins()
        let command = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 41, timeoutMilliseconds: 3_000, target: "demo.greeter", typeName: "greet")
        let forwarded = try expectSameRoute(twins, command, from: twins.parsed.client)
        #expect(forwarded.correlationID != 41 && forwarded.correlationID != 0)
        #expect(twins.inPlace.motherboard.replies.count == 1)
        #expect(twins.inPlace.motherboard.registry[ScopedName(scope: "", name: "demo.greeter")]?.commandsHandled == 1)

        // The board answers as BoardKit does: from itself, to the command's source (none).
        let reply = try expectSameRoute(
            twins, EnvelopeHeader(kind: .reply, correlationID: forwarded.correlationID, source: "demo.greeter"), from: greeter)
        #expect(reply.correlationID == 41)
        #expect(twins.inPlace.motherboard.replies.isEmpty)
    }

    @Test func errorRepliesAndCommandsWithoutAReplyToo() throws {
        let twins = try twins()
        let forwarded = try expectSameRoute(
            twins, EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 9, target: "demo.greeter", typeName: "greet"),
            from: twins.parsed.client)
        try expectSameRoute(
            twins, EnvelopeHeader(kind: .error, correlationID: forwarded.correlationID, source: "demo.greeter", typeName: "badArgument"),
            from: greeter)
        // Fire and forget: no correlation id, nothing remembered.
        let oneWay = try expectSameRoute(twins, EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: twins.parsed.client)
        #expect(oneWay.correlationID == 0)
        #expect(twins.inPlace.motherboard.replies.isEmpty)
    }

    @Test func aBoardsCommandThatNamesItselfGoesInPlace() throws {
        let twins = try twins()
        let command = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 5, source: "app.dashboard", target: "demo.greeter", typeName: "greet")
        let forwarded = try expectSameRoute(twins, command, from: dashboard)
        // An answer that names the dashboard as target (as another client library may send it)
        // needs the target cleared: parsed, not in place.
        let named = EnvelopeHeader(kind: .reply, correlationID: forwarded.correlationID, source: "demo.greeter", target: "app.dashboard")
        let (destination, _) = try routeInPlace(twins.inPlace, named, from: greeter)
        #expect(destination == nil)
        #expect(twins.inPlace.motherboard.replies.count == 1)
    }

    /// The answers BoardKit makes (`reply`, `errorReply`) name no target, whoever asked: a board's
    /// answer to another board goes in place, as parsed.
    @Test(arguments: [MessageKind.reply, .error])
    func aBoardsAnswerToABoardGoesInPlace(kind: MessageKind) throws {
        let twins = try twins()
        let command = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 5, source: "app.dashboard", target: "demo.greeter", typeName: "greet")
        let request = Envelope(header: try expectSameRoute(twins, command, from: dashboard))
        let answer =
            kind == .reply ? request.reply(source: "demo.greeter") : request.errorReply(BusError(.badArgument, "no name"), source: "demo.greeter")
        #expect(answer.header.target.isEmpty)
        let relayed = try expectSameRoute(twins, answer.header, from: greeter)
        #expect(relayed.correlationID == 5)
        #expect(twins.inPlace.motherboard.replies.isEmpty)
    }

    /// Each of these needs more than a new correlation id, or an answer from the broker.
    @Test func everythingElseIsDeclinedAndLeftUnchanged() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.register("app.dashboard", peer: dashboard)
        let client = harness.client
        let declined: [(String, EnvelopeHeader, PeerID)] = [
            ("unknown target", EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 1, target: "no.such", typeName: "x"), client),
            (
                "a board naming another source",
                EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 1, source: "auth.login", target: "demo.greeter"), dashboard
            ),
            (
                "a board naming another scope", EnvelopeHeader(kind: .command, source: "app.dashboard", target: "demo.greeter", scope: "checkout"),
                dashboard
            ),
            ("a board leaving its source empty", EnvelopeHeader(kind: .command, target: "demo.greeter"), dashboard),
            ("not ASCII", EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 1, target: "demo.greeter", typeName: "grüß"), client),
            ("an activation", EnvelopeHeader(kind: .activate, target: "demo.greeter"), client),
            ("an output", EnvelopeHeader(kind: .output, source: "demo.greeter", typeName: "Done"), greeter),
            ("a control request", EnvelopeHeader(kind: .control, flags: .replyExpected, correlationID: 1, typeName: "list"), client),
            ("a reply nobody waits for", EnvelopeHeader(kind: .reply, correlationID: 999, source: "demo.greeter"), greeter),
            ("a reply from a client", EnvelopeHeader(kind: .reply, correlationID: 1, source: "demo.greeter"), client),
        ]
        for (what, header, peer) in declined {
            let (destination, after) = try routeInPlace(harness, header, from: peer)
            #expect(destination == nil, "\(what)")
            #expect(after == header, "\(what)")
        }
        #expect(harness.motherboard.replies.isEmpty)
        #expect(harness.motherboard.registry[ScopedName(scope: "", name: "demo.greeter")]?.commandsHandled == 0)
        #expect(harness.transport.sent.isEmpty)
    }

    @Test func aForgedReplyIsDeclinedAndTheRealOneStillGoesInPlace() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.register("app.dashboard", peer: dashboard)
        let (_, forwarded) = try routeInPlace(
            harness, EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 12, target: "demo.greeter"), from: harness.client)
        let reply = EnvelopeHeader(kind: .reply, correlationID: forwarded.correlationID, source: "demo.greeter")
        let (forged, _) = try routeInPlace(harness, reply, from: dashboard)
        #expect(forged == nil)
        let (real, relayed) = try routeInPlace(harness, reply, from: greeter)
        #expect(real == harness.client)
        #expect(relayed.correlationID == 12)
    }

    @Test func aReplyToAnActionIsCountedNotRelayed() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter, actions: ["Refresh"])
        harness.request(EnvelopeHeader(kind: .action, typeName: "Refresh"), from: harness.client)
        let delivered = try #require(harness.transport.take(for: greeter).first)
        let (destination, _) = try routeInPlace(
            harness, EnvelopeHeader(kind: .reply, correlationID: delivered.header.correlationID, source: "demo.greeter"), from: greeter)
        #expect(destination == nil)
        #expect(harness.motherboard.replies.count == 1)
    }

    @Test func aRetiredInstanceIsLeftToTheParsedPath() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.register("app.dashboard", peer: dashboard)
        harness.request(EnvelopeHeader(kind: .complete, source: "app.dashboard"), from: dashboard)
        let (destination, _) = try routeInPlace(harness, EnvelopeHeader(kind: .command, target: "demo.greeter"), from: dashboard)
        #expect(destination == nil)
    }
}
