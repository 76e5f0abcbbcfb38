import BusCore
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardGateways

/// The link of an attached motherboard without a socket: its own motherboard's messages, the
/// parent's and the time in, what it sends recorded.
@Suite("Uplink session")
struct UplinkSessionTests {
    let links = RecordingUplinkLinks()
    let session: UplinkSession
    var now = ContinuousClock.now
    let sensor = ScopedName(scope: "edge", name: "sensor")

    init() {
        session = UplinkSession(endpoint: "tcp://192.0.2.1:7000", secret: "s3cret", links: links, logger: Logger(label: "test"))
    }

    /// Attached to its own motherboard, the parent heard, `edge/sensor` registered there.
    mutating func attachedAndServing() throws {
        session.tick(now: now)
        let attach = try #require(links.toLocals.first { $0.header.typeName == ControlOperation.uplinkAttach })
        #expect(try PayloadCodec.decode(UplinkAttach.self, from: attach.payload).secret == "s3cret")
        session.fromOwnMotherboard(attach.reply(payload: try PayloadCodec.encode(LinkChain(ids: [7]))), now: now)
        let registration = Registration(id: "sensor", pid: 42, scope: "edge", commands: ["greet"], actions: ["app.announce"], stores: ["readings"])
        session.fromOwnMotherboard(
            Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkBoard), payload: try PayloadCodec.encode(registration)),
            now: now)
        let register = try #require(links.asBoards.last)
        session.forServedBoard(register.reply(payload: Data("{}".utf8)), now: now)
        parentHeard()
    }

    mutating func parentHeard() {
        session.fromParentLink(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: 0)), now: now)
        session.tick(now: now)
    }

    @Test mutating func servedBoardsRegisterOverOneConnectionWithoutTheirActions() throws {
        try attachedAndServing()
        let register = try #require(links.asBoards.first { $0.header.kind == .register })
        let exported = try PayloadCodec.decode(Registration.self, from: register.payload)
        #expect(exported.sharesConnection == true && exported.actions.isEmpty && exported.stores == ["readings"])
        #expect(exported.secret != nil && exported.secret != "s3cret")
        #expect(register.header.source == "sensor" && register.header.scope == "edge")
        #expect(session.servedBoards == [sensor: true])
        #expect(session.isLinkUp)
        // The link asks the parent whether attaching makes a cycle, with its motherboard's id.
        let chain = try #require(links.toParents.first { $0.header.typeName == ControlOperation.linkChain })
        #expect(try PayloadCodec.decode(LinkChain.self, from: chain.payload).ids == [7])
    }

    @Test mutating func theParentsRequestGoesDownAndItsAnswerBackAsTheBoard() throws {
        try attachedAndServing()
        session.forServedBoard(
            Envelope(
                header: EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 900, timeoutMilliseconds: 2_000, target: "sensor", scope: "edge",
                    typeName: "greet"), payload: Data(#"{"name":"A"}"#.utf8)), now: now)
        let down = try #require(links.toLocals.last)
        #expect(down.header.kind == .command && down.header.target == "sensor" && down.header.scope == "edge")
        #expect(down.header.correlationID != 900)
        session.fromOwnMotherboard(down.reply(payload: Data("hello".utf8)), now: now)
        let answer = try #require(links.asBoards.last)
        #expect(answer.header.kind == .reply && answer.header.correlationID == 900 && answer.payload == Data("hello".utf8))
        #expect(answer.header.source == "sensor" && answer.header.scope == "edge")

        // A store request goes to the board that owns the store.
        session.forServedBoard(
            Envelope(
                header: EnvelopeHeader(kind: .dispatch, flags: .replyExpected, correlationID: 901, target: "readings", scope: "edge", typeName: "add")
            ),
            now: now)
        #expect(links.toLocals.last?.header.kind == .dispatch && links.toLocals.last?.header.scope == "edge")
    }

    @Test mutating func whatGoesUpWaitsForTheLinksConnectionWithinItsDeadline() throws {
        try attachedAndServing()
        links.linkTakes = false
        func up(_ correlation: UInt64, timeout: UInt32) {
            session.fromOwnMotherboard(
                Envelope(
                    header: EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: correlation, timeoutMilliseconds: timeout, target: "demo.greeter",
                        typeName: "greet")), now: now)
        }
        up(1, timeout: 2_000)
        #expect(session.holdsMessages)
        #expect(links.toParents.allSatisfy { $0.header.kind != .command })
        // The connection is made: it leaves, with what is left of its deadline.
        links.linkTakes = true
        now = now.advanced(by: .milliseconds(400))
        parentHeard()
        let sent = try #require(links.toParents.last { $0.header.kind == .command })
        #expect(sent.header.timeoutMilliseconds <= 1_600 && sent.header.timeoutMilliseconds > 0)
        session.fromParentLink(sent.reply(payload: Data("hi".utf8)), now: now)
        #expect(links.toLocals.last?.header.correlationID == 1 && links.toLocals.last?.payload == Data("hi".utf8))

        // One that cannot leave in three quarters of its deadline is answered unreachable.
        links.linkTakes = false
        up(2, timeout: 1_000)
        now = now.advanced(by: .milliseconds(800))
        parentHeard()
        let refused = try #require(links.toLocals.last)
        #expect(refused.header.correlationID == 2 && refused.carriedError?.code == .unreachable)
    }

    /// A held message whose send fails when the connection is made leaves the queue: its sender
    /// is answered `unreachable` at once (not at its deadline) and the message after it goes.
    @Test mutating func aHeldMessageThatFailsToSendIsAnsweredAtOnceAndTheNextOneGoes() throws {
        try attachedAndServing()
        links.linkTakes = false
        for correlation in UInt64(1)...2 {
            session.fromOwnMotherboard(
                Envelope(
                    header: EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: correlation, timeoutMilliseconds: 10_000, target: "demo.greeter",
                        typeName: "greet"), payload: Data("\(correlation)".utf8)), now: now)
        }
        #expect(session.holdsMessages)
        links.linkTakes = true
        links.failingCommands = 1
        now = now.advanced(by: .milliseconds(100))
        parentHeard()
        let failed = try #require(links.toLocals.last { $0.header.correlationID == 1 })
        #expect(failed.carriedError?.code == .unreachable, "\(failed.header)")
        #expect(failed.carriedError?.message.contains("could not send") == true)
        let sent = links.toParents.filter { $0.header.kind == .command }
        #expect(sent.map(\.payload) == [Data("2".utf8)])
        #expect(!session.holdsMessages)
        #expect(!links.toLocals.contains { $0.header.correlationID == 2 })
    }

    @Test mutating func aSilentParentTakesTheLinkDownAndItsBoardsRegisterAgainWhenItReturns() throws {
        try attachedAndServing()
        session.fromOwnMotherboard(
            Envelope(header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 5, target: "demo.greeter", typeName: "greet")),
            now: now)
        now = now.advanced(by: .seconds(3))
        session.tick(now: now)
        #expect(!session.isLinkUp)
        #expect(links.toLocals.last?.header.correlationID == 5 && links.toLocals.last?.carriedError?.code == .unreachable)
        #expect(session.servedBoards == [sensor: false])
        now = now.advanced(by: .seconds(3))
        session.tick(now: now)
        #expect(links.diagnoses == 1)
        // New requests are answered at once while it is down.
        session.fromOwnMotherboard(
            Envelope(header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 6, target: "demo.greeter", typeName: "greet")),
            now: now)
        #expect(links.toLocals.last?.header.correlationID == 6 && links.toLocals.last?.carriedError?.code == .unreachable)
        // The parent is back: the board registers again, once accepted it is served.
        parentHeard()
        now = now.advanced(by: .seconds(2))
        session.tick(now: now)
        let again = try #require(links.asBoards.last { $0.header.kind == .register })
        session.forServedBoard(again.reply(payload: Data("{}".utf8)), now: now)
        #expect(session.servedBoards == [sensor: true])
    }

    @Test mutating func aParentThatSaysAttachingMakesACycleIsServedNothing() throws {
        try attachedAndServing()
        let chain = try #require(links.toParents.first { $0.header.typeName == ControlOperation.linkChain })
        session.fromParentLink(chain.errorReply(BusError(.badArgument, "cycle")), now: now)
        #expect(session.servedBoards.isEmpty)
        #expect(links.asBoards.last?.header.kind == .unregister && links.asBoards.last?.header.source == "sensor")
        session.fromOwnMotherboard(
            Envelope(header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 8, target: "demo.greeter", typeName: "greet")),
            now: now)
        #expect(links.toLocals.last?.carriedError?.code == .badArgument)
    }
}
