import BusCore
import Foundation
import Synchronization
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// The admission gate: a rule written once holds on both of the broker's paths, the parsed one
/// (which answers the refusal) and the in-place one (which leaves a refused message to it).
@Suite("Admission gate")
struct AdmissionTests {
    let greeter = PeerID(Data([3]))
    let dashboard = PeerID(Data([2]))

    func harness(rules: [AdmissionRule]) throws -> Harness {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.register("app.dashboard", peer: dashboard)
        harness.transport.sent.removeAll()
        harness.motherboard.access.admissionRules = rules
        return harness
    }

    /// Routes `header` in place; where it goes, nil when it is left to the parsed path.
    func routeInPlace(_ harness: Harness, _ header: EnvelopeHeader, from peer: PeerID) throws -> PeerID? {
        var frame = try HeaderCodec.encode(header)
        return frame.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: peer, now: harness.now) }?.peer
    }

    @Test func aRuleWrittenOnceHoldsOnBothPathsAndSeesWhoSends() throws {
        let seen = Mutex<[String]>([])
        // Only boards may call the greeter (a test-only rule: the policy of who may do what sits here).
        let rule = AdmissionRule(name: "boards only") { request in
            seen.withLock { $0.append("\(request.kind) \(request.peerKind) \(request.board.map { "\($0)" } ?? "-") → \(request.target)") }
            return request.kind == .command && request.peerKind != .board && request.target == "demo.greeter"
                ? BusError(.unauthorized, "only boards may call demo.greeter") : nil
        }
        let command = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 41, target: "demo.greeter", typeName: "greet")

        // In place: a client's command is left to the parsed path, and nothing is remembered.
        let inPlace = try harness(rules: [rule])
        #expect(try routeInPlace(inPlace, command, from: inPlace.client) == nil)
        #expect(inPlace.motherboard.replies.isEmpty)
        #expect(inPlace.motherboard.registry[ScopedName(scope: "", name: "demo.greeter")]?.commandsHandled == 0)
        // …which refuses it, to the client, with the rule's reason.
        let parsed = try harness(rules: [rule])
        parsed.deliver(Envelope(header: command, payload: Data("{}".utf8)), from: parsed.client)
        let answer = try #require(parsed.transport.sent.last)
        #expect(parsed.transport.sent.count == 1 && answer.peer == parsed.client)
        #expect(answer.envelope.header.kind == .error && answer.envelope.header.typeName == "unauthorized")
        #expect(answer.envelope.header.correlationID == 41)

        // A board's command passes the rule and goes in place, as before.
        var fromBoard = command
        fromBoard.source = "app.dashboard"
        #expect(try routeInPlace(inPlace, fromBoard, from: dashboard) == greeter)
        #expect(
            seen.withLock { $0 } == [
                "command client - → demo.greeter", "command client - → demo.greeter", "command board app.dashboard → demo.greeter",
            ])
    }

    @Test func theBrokersOwnRulesAreTheSameOnBothPaths() throws {
        let harness = try harness(rules: [])
        // An error reply with a content type: refused on the parsed path, so not routed in place
        // either (the in-place path routed it before the gate).
        var frame = try HeaderCodec.encode(
            EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 7, target: "demo.greeter", typeName: "greet"))
        let forwarded = frame.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: harness.client, now: harness.now) }
        #expect(forwarded?.peer == greeter)
        let correlationID = try HeaderCodec.decode(Data(frame)).correlationID
        var error = EnvelopeHeader(kind: .error, correlationID: correlationID, source: "demo.greeter", typeName: "badArgument")
        error.contentType = "application/cbor"
        #expect(try routeInPlace(harness, error, from: greeter) == nil)
        harness.transport.sent.removeAll()
        harness.deliver(Envelope(header: error, payload: Data()), from: greeter)
        // Refused, and not relayed (an answer waits for no reply, so none is sent back).
        #expect(harness.transport.sent.isEmpty)
        #expect(harness.motherboard.replies.count == 1, "the refused error must not finish the client's request")
    }
}

/// Control operations are a table: one added (here a test-only one) is answered, and refused to
/// callers it does not admit, without touching the broker elsewhere.
@Suite("Control operations")
struct ControlOperationTableTests {
    let greeter = PeerID(Data([3]))

    func control(_ harness: Harness, _ operation: String, from peer: PeerID) -> EnvelopeHeader? {
        harness.transport.sent.removeAll()
        harness.deliver(
            Envelope(header: EnvelopeHeader(kind: .control, flags: .replyExpected, correlationID: 9, typeName: operation), payload: Data("{}".utf8)),
            from: peer)
        return harness.transport.sent.last?.envelope.header
    }

    @Test func anOperationAddedToTheTableIsAnsweredAndGuardedByItsCaller() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.motherboard.controlOperations["test.boards"] = ControlOperationHandler(caller: .registeredBoard("boards only")) {
            motherboard, envelope, inbound in
            motherboard.reply(to: envelope, from: inbound.peer, with: Delivery(delivered: motherboard.registry.boards.count))
        }
        #expect(control(harness, "test.boards", from: greeter)?.kind == .reply)
        let refused = control(harness, "test.boards", from: harness.client)
        #expect(refused?.kind == .error && refused?.typeName == "notRegistered")
        // Every operation has an entry; an unknown name is `malformed`; the federation ones are marked.
        #expect(control(harness, "nosuch", from: harness.client)?.typeName == "malformed")
        let federation = Set(Motherboard.defaultControlOperations.filter(\.value.federation).keys)
        #expect(
            federation == [ControlOperation.uplinkAttach, ControlOperation.exportAttach, ControlOperation.linkChain, ControlOperation.uplinkChain])
        #expect(control(harness, ControlOperation.uplinkChain, from: harness.client)?.typeName == "unauthorized")
        #expect(control(harness, ControlOperation.registerFlow, from: harness.client)?.typeName == "notRegistered")
    }
}
