import BusCore
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardGateways

/// The Majordomo endpoint's state machine without a socket: MDP frames and the motherboard's
/// envelopes in, what it sends out recorded.
@Suite("Majordomo session")
struct MajordomoSessionTests {
    let links = RecordingMajordomoLinks()
    let session: MajordomoSession
    var now = ContinuousClock.now
    let alice = Data("alice".utf8)
    let bob = Data("bob".utf8)
    let client = Data("client".utf8)

    init() {
        session = MajordomoSession(settings: .init(endpoint: "ipc:///nonexistent"), links: links, logger: Logger(label: "test"))
    }

    func worker(_ peer: Data, _ command: Majordomo.WorkerCommand, _ body: [Data] = []) {
        session.fromPeer([peer, Majordomo.workerHeader, Data([command.rawValue])] + body, principal: nil, now: now)
    }

    /// A worker says READY for `service` and the motherboard accepts the service's registration.
    func ready(_ peer: Data, _ service: String) throws {
        worker(peer, .ready, [Data(service.utf8)])
        if let registration = links.asServices.last(where: { $0.header.kind == .register }) {
            session.toServices(registration.reply(payload: Data("{}".utf8)), now: now)
        }
    }

    func command(_ target: ScopedName, correlation: UInt64, timeout: UInt32 = 5_000) {
        var header = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: correlation, timeoutMilliseconds: timeout, target: target.name,
            scope: target.scope, typeName: "work")
        header.source = ""
        session.toServices(Envelope(header: header, payload: Data("{}".utf8)), now: now)
    }

    /// The token frame of the last REQUEST to `peer`.
    func token(of peer: Data) throws -> Data {
        let request = try #require(links.toPeers.last { $0[0] == peer && $0[2] == Data([Majordomo.WorkerCommand.request.rawValue]) })
        return request[3]
    }

    /// A service is served by the principal the broker judged it for: a worker of another key
    /// cannot join it, and a first comer the broker refuses holds the name for no one.
    @Test func aServiceIsServedOnlyByThePrincipalItWasGrantedToAndARefusedFirstComerLocksNoOneOut() throws {
        let (granted, stranger) = (Data("granted".utf8), Data("stranger".utf8))
        func ready(_ peer: Data, principal: String) {
            session.fromPeer(
                [peer, Majordomo.workerHeader, Data([Majordomo.WorkerCommand.ready.rawValue]), Data("cards".utf8)], principal: principal, now: now)
        }
        // The stranger says READY first: its registration goes for its key, and the broker refuses it.
        ready(stranger, principal: "stranger")
        let first = try #require(links.asServices.last { $0.header.kind == .register })
        #expect(first.header.onBehalfOf == "stranger")
        // The granted key's worker meanwhile: not put with the stranger's.
        ready(granted, principal: "card-worker")
        #expect(links.commands(to: granted) == [.disconnect])
        session.toServices(
            Envelope.error(BusError(.forbidden, "'stranger' may not register cards"), correlationID: first.header.correlationID), now: now)
        #expect(links.commands(to: stranger).last == .disconnect)
        #expect(session.serviceNames.isEmpty)
        // Told to reconnect, the granted worker says READY again and serves the name.
        ready(granted, principal: "card-worker")
        let second = try #require(links.asServices.last { $0.header.kind == .register })
        #expect(second.header.onBehalfOf == "card-worker")
        session.toServices(second.reply(payload: Data("{}".utf8)), now: now)
        #expect(session.serviceNames == [ScopedName(scope: .root, name: "cards")])
        // Now the stranger cannot join it, and is handed none of its calls.
        ready(stranger, principal: "stranger")
        command(ScopedName(scope: .root, name: "cards"), correlation: 5)
        command(ScopedName(scope: .root, name: "cards"), correlation: 6)
        #expect(!links.commands(to: stranger).contains(.request))
        #expect(links.commands(to: granted).contains(.request))
    }

    @Test func servicesAreBoardsOnOneConnectionAndWorkGoesToTheirWorkers() throws {
        try ready(alice, "orders")
        try ready(bob, "shop/payment")
        let registrations = links.asServices.filter { $0.header.kind == .register }
        #expect(registrations.count == 2)
        for registration in registrations {
            let payload = try PayloadCodec.decode(Registration.self, from: registration.payload)
            #expect(payload.sharesConnection == true)
            #expect(registration.header.source == payload.id.rawValue && registration.header.scope == payload.scope)
        }
        #expect(session.serviceNames == [ScopedName(scope: .root, name: "orders"), ScopedName(scope: "shop", name: "payment")])

        // A command for shop/payment goes to bob, whose FINAL answers it as that board.
        command(ScopedName(scope: "shop", name: "payment"), correlation: 41)
        let request = try #require(links.toPeers.last)
        #expect(request[0] == bob && Array(request[5...]) == [Data("work".utf8), Data("{}".utf8)])
        worker(bob, .final, [try token(of: bob), Data(), Data("paid".utf8)])
        let reply = try #require(links.asServices.last)
        #expect(reply.header.kind == .reply && reply.header.correlationID == 41)
        #expect(reply.header.source == "payment" && reply.header.scope == "shop")
        #expect(reply.payload == Data("paid".utf8))
        // A FINAL with a token it was not handed answers nothing.
        let sent = links.asServices.count
        worker(bob, .final, [Data(count: 8), Data(), Data("forged".utf8)])
        #expect(links.asServices.count == sent)
    }

    @Test mutating func aBusyServiceQueuesAndDropsWhatNobodyWaitsForAnyMore() throws {
        try ready(alice, "orders")
        let orders = ScopedName(scope: .root, name: "orders")
        command(orders, correlation: 1)
        command(orders, correlation: 2, timeout: 100)
        command(orders, correlation: 3)
        #expect(links.commands(to: alice).filter { $0 == .request }.count == 1)
        // Request 2's caller stopped waiting: after 1 is answered, 3 is handed, never 2.
        now = now.advanced(by: .milliseconds(200))
        worker(alice, .final, [try token(of: alice), Data(), Data("one".utf8)])
        let handed = try #require(links.toPeers.last)
        #expect(handed[0] == alice && handed[2] == Data([Majordomo.WorkerCommand.request.rawValue]))
        worker(alice, .final, [try token(of: alice), Data(), Data("three".utf8)])
        #expect(links.asServices.filter { $0.header.kind == .reply }.map(\.header.correlationID) == [1, 3])
    }

    @Test mutating func aSilentWorkerIsDroppedItsWorkFailsAndItsServiceGoesWithTheLastOne() throws {
        try ready(alice, "orders")
        let orders = ScopedName(scope: .root, name: "orders")
        command(orders, correlation: 7)
        command(orders, correlation: 8)
        now = now.advanced(by: .seconds(11))
        session.tick(now: now)
        #expect(links.commands(to: alice).last == .disconnect)
        let errors = links.asServices.filter { $0.header.kind == .error }
        #expect(errors.map(\.header.correlationID) == [7, 8])
        #expect(errors.map { $0.carriedError?.code } == [.outcomeUnknown, .boardNotRunning])
        #expect(errors.allSatisfy { $0.header.source == "orders" })
        #expect(links.asServices.last?.header.kind == .unregister && links.asServices.last?.header.source == "orders")
        #expect(session.serviceNames.isEmpty)
    }

    @Test func aWorkerThatCannotBeReachedLeavesItsJobToTheNext() throws {
        try ready(alice, "orders")
        try ready(bob, "orders")
        links.gone.insert(alice)
        command(ScopedName(scope: .root, name: "orders"), correlation: 5)
        #expect(links.commands(to: bob) == [.request])
        #expect(links.asServices.filter { $0.header.kind == .error }.isEmpty)
    }

    @Test func clientsCallBoardsForTheirPrincipalAndAStalledClientIsTurnedAway() throws {
        let frames = [client, Majordomo.clientHeader, Data([0x01]), Data("shop/payment".utf8), Data("pay".utf8), Data(#"{"cents":5}"#.utf8)]
        session.fromPeer(frames, principal: "edge-b", now: now)
        let request = try #require(links.requests.last)
        #expect(request.header.target == "payment" && request.header.scope == "shop" && request.header.typeName == "pay")
        #expect(request.header.onBehalfOf == "edge-b")
        session.fromMotherboard(request.reply(payload: Data("ok".utf8)))
        #expect(links.toPeers.last == Majordomo.finalToClient(client, dialect: .rfc, service: Data("shop/payment".utf8), body: [Data("ok".utf8)]))

        links.stalled.insert(client)
        session.fromPeer(frames, principal: nil, now: now)
        #expect(links.requests.count == 1)
        let refusal = try #require(links.toPeers.last)
        #expect(refusal.suffix(2).first == Data("error".utf8))
        // An answer that may not wait toward it is replaced by a small `busy`, sent as it is.
        session.fromMotherboard(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: 999)))
        links.requests.removeAll()
        links.stalled.remove(client)
        session.fromPeer(frames, principal: nil, now: now)
        links.stalled.insert(client)
        session.fromMotherboard(try #require(links.requests.last).reply(payload: Data(count: 1 << 20)))
        let replaced = try #require(links.toPeers.last)
        #expect(replaced.suffix(2).first == Data("error".utf8) && replaced.last!.count < 1_000)
    }

    /// While the motherboard does not answer, the service registers again and again; a late
    /// answer to an earlier registration is not taken for the last one.
    @Test mutating func aServiceRegistersAgainUntilAnsweredAndOnlyTheLastAnswerCounts() throws {
        worker(alice, .ready, [Data("orders".utf8)])
        func later() {
            now = now.advanced(by: .milliseconds(1_100))
            worker(alice, .heartbeat)
            session.tick(now: now)
        }
        for _ in 0..<3 { later() }
        let registrations = links.asServices.filter { $0.header.kind == .register }
        #expect(registrations.count == 4)
        #expect(session.pendingRegistrations == 1)
        session.toServices(try #require(registrations.first).reply(payload: Data("{}".utf8)), now: now)
        // Not registered by a stale answer: it still asks.
        later()
        #expect(links.asServices.last?.header.kind == .register)
        session.toServices(try #require(links.asServices.last).reply(payload: Data("{}".utf8)), now: now)
        later()
        #expect(links.asServices.last?.header.kind == .heartbeat)
    }

    @Test func noWorkerServesAnMMIName() throws {
        worker(alice, .ready, [Data("mmi.service".utf8)])
        #expect(links.commands(to: alice) == [.disconnect])
        #expect(links.asServices.isEmpty)
    }
}
