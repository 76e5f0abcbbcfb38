import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore
import MotherboardTesting

@Suite("Motherboard routing")
struct MotherboardTests {
    let login = PeerID(Data([1]))
    let dashboard = PeerID(Data([2]))
    let greeter = PeerID(Data([3]))

    @Test func registrationIsAcceptedAndListed() throws {
        let harness = try Harness()
        let replies = harness.register("auth.login", peer: login)
        #expect(replies.map(\.header.kind) == [.reply])
        #expect(replies[0].header.correlationID == 77)
        let accepted = try PayloadCodec.decode(RegistrationAccepted.self, from: replies[0].payload)
        #expect(accepted.livenessTimeoutMilliseconds == 2500)
        #expect(try harness.list().boards.map(\.id) == ["auth.login"])
    }

    /// A renewal that makes a store subscription again (this broker never had it: it restarted)
    /// tells the subscriber it may have missed changes; a renewal of a live subscription does not.
    @Test func aRenewalThatMakesASubscriptionAgainSaysSo() throws {
        let harness = try Harness()
        let renew = Envelope(header: EnvelopeHeader(kind: .store, target: "orders", scope: "eu", typeName: StoreOperation.renew))
        harness.deliver(renew, from: login)
        let told = harness.transport.take(for: login)
        #expect(told.map(\.header.typeName) == [StoreOperation.restored])
        #expect(told.first?.header.target == "orders" && told.first?.header.scope == "eu" && told.first?.header.correlationID == 0)
        harness.deliver(renew, from: login)
        #expect(harness.transport.take(for: login).isEmpty)
    }

    @Test func anIDHeldByAnotherLiveProcessIsRefused() throws {
        let harness = try Harness()
        harness.register("auth.login", peer: login, pid: 100)
        let replies = harness.register("auth.login", peer: dashboard, pid: 200)
        #expect(replies.first?.carriedError?.code == .idInUse)
        #expect(try harness.list().boards.map(\.pid) == [100])
    }

    /// A pid written in a registration proves nothing: an impostor that claims the live board's
    /// pid is refused (`idInUse`, counted), and only the board's own secret moves the id to a new
    /// connection.
    @Test func anIDIsTakenOverOnlyWithItsHoldersSecretNeverWithItsPID() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter, pid: 100, secret: "the-greeter's")
        #expect(harness.register("demo.greeter", peer: login, pid: 100).first?.carriedError?.code == .idInUse)
        #expect(harness.register("demo.greeter", peer: login, pid: 100, secret: "a guess").first?.carriedError?.code == .idInUse)
        #expect(harness.motherboard.counters.refusedRegistrations == 2)
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 5)
        #expect(harness.transport.take(for: greeter).count == 1)
        #expect(harness.transport.take(for: login).isEmpty)

        let moved = harness.register("demo.greeter", peer: dashboard, pid: 100, secret: "the-greeter's")
        #expect(moved.map(\.header.kind) == [.reply])
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 6)
        #expect(harness.transport.take(for: dashboard).count == 1)
    }

    /// A board that is alive but does not read what it is sent is not dropped (a full queue drops
    /// a board): the request that could not go to it is answered `busy` at once.
    @Test func commandsAreForwardedAndRepliesRelayed() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.request(
            EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), payload: Data("{}".utf8), from: harness.client, correlation: 41
        )
        let forwarded = try #require(harness.transport.take(for: greeter).first)
        #expect(forwarded.header.kind == .command)
        #expect(forwarded.header.correlationID != 41)
        harness.deliver(forwarded.reply(payload: Data(#"{"message":"hi"}"#.utf8)), from: greeter)
        let reply = try #require(harness.transport.take(for: harness.client).first)
        #expect(reply.header.kind == .reply)
        #expect(reply.header.correlationID == 41)
        #expect(reply.header.source == "demo.greeter")
        #expect(reply.payload == Data(#"{"message":"hi"}"#.utf8))
    }

    @Test func aReplyFromTheWrongPeerIsIgnoredAndTheRealOneStillRelayed() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.register("app.dashboard", peer: dashboard)
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 12)
        let forwarded = try #require(harness.transport.take(for: greeter).first)
        harness.deliver(forwarded.reply(payload: Data(#""forged""#.utf8)), from: dashboard)
        #expect(harness.transport.take(for: harness.client).isEmpty)
        // The request still waits for its board.
        harness.deliver(forwarded.reply(payload: Data(#""real""#.utf8)), from: greeter)
        let relayed = harness.transport.take(for: harness.client)
        #expect(relayed.count == 1)
        #expect(relayed.first?.header.correlationID == 12)
        #expect(relayed.first?.payload == Data(#""real""#.utf8))
    }

    @Test func unknownAndStoppedBoardsGetTypedErrors() throws {
        let manifest = FleetManifest(boards: [.init(id: "app.dashboard", executable: "BoardBusDemoDashboard")])
        let harness = try Harness(manifest: manifest)
        harness.request(EnvelopeHeader(kind: .command, target: "nope.board", typeName: "x"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .noSuchBoard)
        harness.request(EnvelopeHeader(kind: .activate, target: "app.dashboard"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .boardNotRunning)
        harness.request(EnvelopeHeader(kind: .command, target: "not a board id"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .noSuchBoard)
    }

    @Test func outputsRunEveryFlowInOrderAndUnheardOutputsAreCounted() throws {
        let manifest = FleetManifest(flows: ["auth.login ->> app.dashboard", "auth.login ->> demo.greeter ->> app.dashboard"])
        let harness = try Harness(manifest: manifest)
        harness.register("auth.login", peer: login)
        harness.register("app.dashboard", peer: dashboard)
        harness.register("demo.greeter", peer: greeter)
        harness.request(EnvelopeHeader(kind: .output, typeName: "LoginSucceeded"), payload: Data(#"{"u":1}"#.utf8), from: login)
        let order = harness.transport.sent.map(\.peer)
        #expect(order == [dashboard, greeter, login])
        let activation = try #require(harness.transport.take(for: dashboard).first)
        #expect(activation.header.kind == .activate)
        #expect(activation.header.source == "auth.login")
        #expect(activation.header.typeName == "LoginSucceeded")
        #expect(activation.payload == Data(#"{"u":1}"#.utf8))
        let ack = try #require(harness.transport.take(for: login).first)
        #expect(try PayloadCodec.decode(Delivery.self, from: ack.payload).delivered == 2)

        // No flow starts at the dashboard: dropped and counted, and still acknowledged.
        harness.request(EnvelopeHeader(kind: .output, typeName: "Nothing"), from: dashboard)
        #expect(harness.motherboard.counters.droppedOutputs == 1)
        let dropped = try #require(harness.transport.take(for: dashboard).first)
        #expect(try PayloadCodec.decode(Delivery.self, from: dropped.payload).delivered == 0)
        _ = harness.transport.take(for: greeter)
        harness.request(EnvelopeHeader(kind: .output, typeName: "Nothing"), from: greeter)
        #expect(harness.transport.take(for: dashboard).map(\.header.kind) == [.activate])
        harness.request(EnvelopeHeader(kind: .output, typeName: "Nothing"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .badArgument)
    }

    @Test func aBoardSpeaksAsItselfEvenWhenItNamesAnotherSource() throws {
        let harness = try Harness(manifest: FleetManifest(flows: ["auth.login ->> app.dashboard"]))
        harness.register("auth.login", peer: login)
        harness.register("app.dashboard", peer: dashboard)
        harness.register("demo.greeter", peer: greeter)
        harness.request(EnvelopeHeader(kind: .output, source: "auth.login", typeName: "Forged"), from: greeter)
        #expect(harness.transport.take(for: dashboard).isEmpty)
        #expect(harness.motherboard.counters.droppedOutputs == 1)
    }

    @Test func actionsReachSubscribersOnly() throws {
        let harness = try Harness()
        harness.register("app.dashboard", peer: dashboard, actions: ["app.announce"])
        harness.register("demo.greeter", peer: greeter, actions: ["app.announce", "other"])
        harness.register("auth.login", peer: login)
        harness.request(EnvelopeHeader(kind: .action, typeName: "app.announce"), payload: Data("{}".utf8), from: harness.client)
        let toDashboard = harness.transport.take(for: dashboard)
        #expect(toDashboard.map(\.header.kind) == [.action])
        #expect(harness.transport.take(for: greeter).map(\.header.kind) == [.action])
        #expect(harness.transport.take(for: login).isEmpty)
        // One subscriber acknowledges, the other dies: the sender hears of the one that handled it.
        harness.deliver(try #require(toDashboard.first).reply(), from: dashboard)
        harness.transport.unreachable.insert(greeter)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        let ack = try #require(harness.transport.take(for: harness.client).first)
        #expect(try PayloadCodec.decode(Delivery.self, from: ack.payload).delivered == 1)
    }

    @Test func aSilentBoardIsDroppedAndItsCallersFailFast() throws {
        let harness = try Harness(manifest: FleetManifest(boards: [.init(id: "demo.greeter", executable: "BoardBusDemoGreeter")]))
        harness.register("demo.greeter", peer: greeter)
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 5)
        harness.now = harness.now.advanced(by: .milliseconds(2000))
        harness.motherboard.tick(now: harness.now)
        #expect(try harness.list().boards.count == 1)
        harness.now = harness.now.advanced(by: .milliseconds(600))
        harness.motherboard.tick(now: harness.now)
        let failure = try #require(harness.transport.take(for: harness.client).first { $0.header.correlationID == 5 })
        #expect(failure.carriedError?.code == .outcomeUnknown)
        #expect(try harness.list().boards.isEmpty)
    }

    @Test func heartbeatsKeepABoardAlive() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        for _ in 0..<10 {
            harness.now = harness.now.advanced(by: .milliseconds(500))
            harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat)), from: greeter)
            harness.motherboard.tick(now: harness.now)
        }
        #expect(try harness.list().boards.count == 1)
        #expect(harness.transport.take(for: greeter).contains { $0.header.kind == .heartbeat })
    }

    @Test func requestsPastTheirDeadlineTimeOut() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.request(
            EnvelopeHeader(kind: .command, timeoutMilliseconds: 300, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 8)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat)), from: greeter)
        harness.now = harness.now.advanced(by: .milliseconds(301))
        harness.motherboard.tick(now: harness.now)
        let failure = try #require(harness.transport.take(for: harness.client).first)
        #expect(failure.carriedError?.code == .timeout)
        #expect(failure.header.correlationID == 8)
    }

    @Test func anUnknownHeartbeatIsToldToRegister() throws {
        let harness = try Harness()
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat)), from: greeter)
        #expect(harness.transport.take(for: greeter).first?.carriedError?.code == .notRegistered)
    }

    /// A board that unregistered is not told to register again by its own late heartbeat (a board
    /// following 5.1 would come back by itself); registering again is still its to do, and a
    /// board dropped after that (its heartbeats late) is told to register again as any other.
    @Test func aHeartbeatAfterUnregisterIsAnsweredEndedNotRegisterAgain() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.request(EnvelopeHeader(kind: .unregister, source: "demo.greeter"), from: greeter)
        _ = harness.transport.take(for: greeter)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "demo.greeter")), from: greeter)
        let ended = try #require(harness.transport.take(for: greeter).first?.carriedError)
        #expect(ended.code == .ended && ended.message.contains("unregistered"), "\(ended)")
        harness.register("demo.greeter", peer: greeter)
        #expect(try harness.list().boards.map(\.id) == ["demo.greeter"])
        harness.motherboard.drop(ScopedName(scope: .root, name: "demo.greeter"), reason: "test")
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "demo.greeter")), from: greeter)
        #expect(harness.transport.take(for: greeter).first?.carriedError?.code == .notRegistered)
    }

    @Test func anUnreachableBoardIsDropped() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.transport.unreachable.insert(greeter)
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .boardNotRunning)
        #expect(try harness.list().boards.isEmpty)
    }

    @Test func completionRemovesTheBoard() throws {
        let harness = try Harness()
        harness.register("demo.greeter", peer: greeter)
        harness.request(EnvelopeHeader(kind: .complete), payload: try PayloadCodec.encode(Completion(isDone: true)), from: greeter)
        #expect(harness.transport.take(for: greeter).first?.header.kind == .reply)
        #expect(try harness.list().boards.isEmpty)
        harness.request(EnvelopeHeader(kind: .complete), from: greeter)
        #expect(harness.transport.take(for: greeter).first?.carriedError?.code == .ended)
    }

    @Test func malformedFramesAreCountedAndAnsweredWhenPossible() throws {
        let harness = try Harness()
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let frames = (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                Data((0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            }
            harness.motherboard.receive(frames, from: harness.client, now: harness.now)
        }
        #expect(harness.motherboard.counters.malformedMessages > 0)
        let oversized = Envelope(header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 3), payload: Data(count: (4 << 20) + 1))
        for version in [EnvelopeHeader.currentVersion, EnvelopeHeader.previousVersion] {
            harness.transport.sent.removeAll()
            harness.motherboard.receive(try oversized.frames(version: version), from: harness.client, now: harness.now)
            let reply = try #require(harness.transport.take(for: harness.client).first)
            #expect(reply.carriedError?.code == .tooLarge)
            #expect(reply.header.correlationID == 3)
        }
        harness.register("demo.greeter", peer: greeter)
        #expect(try harness.list().boards.count == 1)
    }

    @Test func flowChainsParseIntoEdges() throws {
        let edges = try FlowEdge.parseChain("a ->> b.c ->> d")
        #expect(edges == [FlowEdge(source: "a", target: "b.c"), FlowEdge(source: "b.c", target: "d")])
        #expect(throws: BusError.self) { try FlowEdge.parseChain("a -> b") }
        #expect(throws: BusError.self) { try FlowEdge.parseChain("a ->> bad id") }
        #expect(throws: BusError.self) {
            try FleetManifest(boards: [.init(id: "a", executable: "A"), .init(id: "a", executable: "B")]).validate()
        }
    }
}
