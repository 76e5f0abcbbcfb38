import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// A gateway serves many boards over one connection (`sharesConnection`): each message names its
/// board, the broker's name theirs, and one board leaving, completing or going silent leaves the
/// others served.
@Suite("Gateway connections")
struct GatewayConnectionTests {
    let gateway = PeerID(Data([0x6A]))
    let single = PeerID(Data([0x51]))

    func harness() throws -> Harness {
        try Harness(manifest: FleetManifest(scopes: [.init(name: "shop")]))
    }

    @discardableResult
    func registerShared(_ harness: Harness, _ id: BoardID, scope: Scope = .root, from peer: PeerID? = nil, correlation: UInt64 = 7) -> [Envelope] {
        let peer = peer ?? gateway
        let registration = Registration(id: id, pid: 0, scope: scope, secret: Registration.makeSecret(), sharesConnection: true)
        harness.request(
            EnvelopeHeader(kind: .register, source: id.rawValue, scope: scope), payload: try! PayloadCodec.encode(registration), from: peer,
            correlation: correlation)
        return harness.transport.take(for: peer)
    }

    func command(_ harness: Harness, _ target: String, scope: Scope = .root, correlation: UInt64) -> Envelope? {
        harness.request(
            EnvelopeHeader(kind: .command, target: target, scope: scope, typeName: "work"), from: harness.client, correlation: correlation)
        return harness.transport.take(for: gateway).first
    }

    @Test func boardsOnOneConnectionAreEachCalledAndAnswerAsThemselves() throws {
        let harness = try harness()
        #expect(registerShared(harness, "orders", correlation: 1).map(\.header.kind) == [.reply])
        #expect(registerShared(harness, "orders", scope: "shop", correlation: 2).map(\.header.kind) == [.reply])
        #expect(registerShared(harness, "payment", scope: "shop", correlation: 3).map(\.header.kind) == [.reply])
        #expect(try harness.list().boards.count == 3)

        // The same id in two scopes: the broker's message names which.
        let toShop = try #require(command(harness, "orders", scope: "shop", correlation: 11))
        #expect(toShop.header.target == "orders" && toShop.header.scope == "shop")
        let toRoot = try #require(command(harness, "orders", correlation: 12))
        #expect(toRoot.header.target == "orders" && toRoot.header.scope == .root)

        // Each answers as itself; a reply naming another of the gateway's boards is not taken
        // for the one the request went to.
        harness.deliver(
            Envelope(header: EnvelopeHeader(kind: .reply, correlationID: toShop.header.correlationID, source: "payment", scope: "shop")),
            from: gateway)
        #expect(harness.transport.take(for: harness.client).isEmpty)
        harness.deliver(
            Envelope(header: EnvelopeHeader(kind: .reply, correlationID: toShop.header.correlationID, source: "orders", scope: "shop")), from: gateway
        )
        #expect(harness.transport.take(for: harness.client).map(\.header.correlationID) == [11])
        let shopOrders = try #require(harness.motherboard.registry[ScopedName(scope: "shop", name: "orders")])
        #expect(shopOrders.commandsHandled == 1)

        // A command routed in place to a gateway's board carries its name too.
        var frame = try HeaderCodec.encode(
            EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 13, target: "payment", scope: "shop", typeName: "work"))
        let route = frame.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: harness.client, now: harness.now) }
        #expect(route?.peer == gateway)
        let routed = try HeaderCodec.decode(Data(frame))
        #expect(routed.target == "payment" && routed.scope == "shop")
        // Its answer takes the parsed path, where the board is found by name.
        var answer = try HeaderCodec.encode(EnvelopeHeader(kind: .reply, correlationID: routed.correlationID, source: "payment", scope: "shop"))
        #expect(answer.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: gateway, now: harness.now) } == nil)
    }

    @Test func oneBoardLeavingOrCompletingLeavesTheOthersServed() throws {
        let harness = try harness()
        registerShared(harness, "orders", correlation: 1)
        registerShared(harness, "payment", correlation: 2)
        registerShared(harness, "notify", correlation: 3)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .unregister, source: "payment")), from: gateway)
        harness.transport.sent.removeAll()
        #expect(try harness.list().boards.map(\.id) == ["notify", "orders"])
        harness.request(EnvelopeHeader(kind: .complete, source: "notify"), payload: try PayloadCodec.encode(Completion(isDone: true)), from: gateway)
        harness.transport.sent.removeAll()
        #expect(try harness.list().boards.map(\.id) == ["orders"])
        // The connection is not retired: its remaining board still answers and heartbeats.
        #expect(command(harness, "orders", correlation: 21) != nil)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "orders")), from: gateway)
        #expect(harness.transport.take(for: gateway).isEmpty)
    }

    @Test func aHeartbeatForABoardTheBrokerDoesNotKnowIsAnsweredForThatBoard() throws {
        let harness = try harness()
        registerShared(harness, "orders", correlation: 1)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "payment", scope: "shop")), from: gateway)
        let answer = try #require(harness.transport.take(for: gateway).first)
        #expect(answer.carriedError?.code == .notRegistered)
        #expect(answer.header.target == "payment" && answer.header.scope == "shop")
    }

    @Test func eachBoardOfAGatewayGoesWhenItAloneFallsSilent() throws {
        let harness = try harness()
        registerShared(harness, "orders", correlation: 1)
        registerShared(harness, "payment", correlation: 2)
        for _ in 0..<4 {
            harness.now = harness.now.advanced(by: .seconds(1))
            harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "orders")), from: gateway)
            harness.motherboard.tick(now: harness.now)
        }
        #expect(try harness.list().boards.map(\.id) == ["orders"])
        // The broker heartbeats each by name.
        let heartbeats = harness.transport.take(for: gateway).filter { $0.header.kind == .heartbeat }
        #expect(Set(heartbeats.map(\.header.target)) == ["orders", "payment"])
    }

    @Test func aConnectionServesOneBoardOrOnlyBoardsThatShareIt() throws {
        let harness = try harness()
        harness.register("greeter", peer: single)
        #expect(registerShared(harness, "orders", from: single).first?.carriedError?.code == .badArgument)
        registerShared(harness, "orders", correlation: 1)
        #expect(harness.register("payment", peer: gateway).first?.carriedError?.code == .badArgument)
        #expect(try harness.list().boards.map(\.id) == ["greeter", "orders"])
        #expect(harness.motherboard.registry.isGateway(gateway))
        // Actions are not for such boards: an action from a child scope would not name its
        // subscriber's scope.
        let audit = Registration(id: "audit", pid: 0, actions: ["logout"], sharesConnection: true)
        harness.request(EnvelopeHeader(kind: .register, source: "audit"), payload: try PayloadCodec.encode(audit), from: gateway)
        #expect(harness.transport.take(for: gateway).first?.carriedError?.code == .badArgument)
    }

    /// A shared board may own a store: what the broker sends for it names the store and its scope.
    @Test func aStoreOfASharedBoardIsReachedByItsNameAndScope() throws {
        let harness = try harness()
        let ledger = Registration(id: "books", pid: 0, scope: "shop", stores: ["ledger"], sharesConnection: true)
        harness.request(
            EnvelopeHeader(kind: .register, source: "books", scope: "shop"), payload: try PayloadCodec.encode(ledger), from: gateway, correlation: 3)
        #expect(harness.transport.take(for: gateway).map(\.header.kind) == [.reply])
        harness.request(
            EnvelopeHeader(kind: .dispatch, target: "ledger", scope: "shop", typeName: "add"), payload: Data("{}".utf8), from: harness.client,
            correlation: 9)
        let dispatch = try #require(harness.transport.take(for: gateway).first)
        #expect(dispatch.header.kind == .dispatch && dispatch.header.target == "ledger" && dispatch.header.scope == "shop")
        harness.deliver(
            Envelope(header: EnvelopeHeader(kind: .reply, correlationID: dispatch.header.correlationID, source: "books", scope: "shop")),
            from: gateway)
        #expect(harness.transport.take(for: harness.client).map(\.header.correlationID) == [9])
    }
}
