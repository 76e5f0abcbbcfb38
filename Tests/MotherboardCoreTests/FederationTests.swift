import BusCore
import Foundation
import Logging
import MotherboardDaemon
import MotherboardTesting
import Testing

@testable import MotherboardCore

@Suite("Boards on other hosts, and the uplink")
struct FederationTests {
    let far = PeerID(Data([0xFA]))

    /// Registers `id` as a board whose connection came over tcp (the access policy lets any key
    /// register an id the manifest does not declare).
    func registerRemote(
        _ harness: Harness, _ id: BoardID, peer: PeerID, secret: String = "s3cret", scope: Scope = .root,
        remote: RemotePeer = RemotePeer(address: "10.0.0.2", keyName: "edge-b")
    ) -> [Envelope] {
        if harness.motherboard.access.policy.rules.isEmpty {
            harness.motherboard.install(
                policy: AccessPolicy(rules: [.init(name: "remote boards", allows: true, operations: [.register], principals: ["*"])]), source: nil)
        }
        let registration = Registration(id: id, pid: 42, scope: scope, commands: ["greet"], secret: secret)
        var header = EnvelopeHeader(kind: .register, correlationID: 5, source: id.rawValue)
        header.flags.insert(.replyExpected)
        harness.motherboard.receive(
            .success(Envelope(header: header, payload: try! PayloadCodec.encode(registration))), from: peer, now: harness.now,
            remote: remote)
        return harness.transport.take(for: peer)
    }

    @Test func aRemoteBoardWhoseLinkFailsIsKeptAsUnreachableUntilItRegistersAgain() throws {
        let harness = try Harness(metrics: BrokerMetrics(series: PrometheusSeries()))
        #expect(registerRemote(harness, "sensor", peer: far).first?.header.kind == .reply)
        #expect(try harness.list().boards.first?.host == "10.0.0.2 (edge-b)")
        // A request is in flight when the link goes quiet.
        harness.request(EnvelopeHeader(kind: .command, target: "sensor", typeName: "greet"), from: harness.client, correlation: 11)
        #expect(harness.transport.take(for: far).count == 1)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        let failed = harness.transport.take(for: harness.client)
        #expect(failed.map(\.header.typeName) == ["unreachable"])
        #expect(failed.first?.header.correlationID == 11)
        let shown = try #require(try harness.list().boards.first)
        #expect(shown.state == .unreachable && shown.host == "10.0.0.2 (edge-b)")
        harness.motherboard.refreshMetrics()
        #expect(harness.motherboard.metrics.exposition().contains("boardbus_unreachable_boards 1"))
        // New calls are answered at once.
        harness.request(EnvelopeHeader(kind: .command, target: "sensor", typeName: "greet"), from: harness.client, correlation: 12)
        #expect(harness.transport.take(for: harness.client).map(\.header.typeName) == ["unreachable"])
        // Nobody else takes its id meanwhile: not another key, not a local peer, not the same key
        // from a new connection without the secret... unless it is that key (its motherboard restarted).
        let impostor = PeerID(Data([0xBA, 0xD0]))
        let stolen = registerRemote(
            harness, "sensor", peer: impostor, secret: "guess", remote: RemotePeer(address: "10.0.0.9", keyName: "mallory"))
        #expect(stolen.map(\.header.typeName) == ["idInUse"])
        harness.register("sensor", peer: impostor, secret: "guess")
        #expect(try harness.list().boards.map(\.state) == [.unreachable])
        // The link returns: the board registers again on a new connection (with its secret).
        let again = PeerID(Data([0xFB]))
        #expect(registerRemote(harness, "sensor", peer: again).first?.header.kind == .reply)
        #expect(try harness.list().boards.map(\.state) == [.running])
        harness.request(EnvelopeHeader(kind: .command, target: "sensor", typeName: "greet"), from: harness.client, correlation: 13)
        #expect(harness.transport.take(for: again).count == 1)
    }

    @Test func theSameKeyMayTakeItsUnreachableIDBackWithoutTheOldSecret() throws {
        let harness = try Harness()
        _ = registerRemote(harness, "sensor", peer: far)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        let restarted = registerRemote(harness, "sensor", peer: PeerID(Data([0xFC])), secret: "a new process's secret")
        #expect(restarted.first?.header.kind == .reply)
        #expect(try harness.list().boards.map(\.state) == [.running])
    }

    @Test func anUnreachableBoardIsForgottenAfterTheRetention() throws {
        let harness = try Harness()
        _ = registerRemote(harness, "sensor", peer: far)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        #expect(try harness.list().boards.count == 1)
        harness.now = harness.now.advanced(by: .seconds(601))
        harness.motherboard.tick(now: harness.now)
        #expect(try harness.list().boards.isEmpty)
    }

    @Test func aLocalBoardThatGoesQuietIsGoneNotUnreachable() throws {
        let harness = try Harness()
        harness.register("local", peer: far)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        #expect(try harness.list().boards.isEmpty)
        harness.request(EnvelopeHeader(kind: .command, target: "local", typeName: "greet"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).map(\.header.typeName) == ["noSuchBoard"])
    }

    /// A motherboard serving scope `edge` for a parent, with its uplink attached.
    func edgeHarness() throws -> (Harness, PeerID) {
        let manifest = FleetManifest(
            scopes: [.init(name: "edge")], boards: [.init(id: "local.tool", executable: "Tool", start: .onDemand)])
        let harness = try Harness(manifest: manifest)
        harness.motherboard.links.uplinkSecret = "uplink-secret"
        let uplink = PeerID(Data([0x01, 0x11]))
        // An impostor without the secret is refused.
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkAttach),
            payload: try PayloadCodec.encode(UplinkAttach(secret: "guess")), from: harness.client)
        #expect(harness.transport.take(for: harness.client).map(\.header.typeName) == ["unauthorized"])
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkAttach),
            payload: try PayloadCodec.encode(UplinkAttach(secret: "uplink-secret")), from: uplink)
        #expect(harness.transport.take(for: uplink).map(\.header.kind) == [.reply])
        return (harness, uplink)
    }

    /// The edge harness with a board `listener` of scope `edge` subscribed to `app.announce`.
    func edgeHarnessWithListener() throws -> (Harness, PeerID, PeerID) {
        let (harness, uplink) = try edgeHarness()
        let listener = PeerID(Data([0x11]))
        let registration = Registration(id: "listener", pid: 8, scope: "edge", actions: ["app.announce"])
        harness.request(EnvelopeHeader(kind: .register, source: "listener"), payload: try PayloadCodec.encode(registration), from: listener)
        _ = harness.transport.take(for: listener)
        _ = harness.transport.take(for: uplink)
        return (harness, uplink, listener)
    }

    @Test func theBoardsOfServedScopesArePushedToTheUplinkWithoutTheirSecrets() throws {
        let (harness, uplink) = try edgeHarness()
        let registration = Registration(id: "sensor", pid: 7, scope: "edge", commands: ["read"], actions: ["app.announce"], secret: "mine")
        harness.request(EnvelopeHeader(kind: .register, source: "sensor"), payload: try PayloadCodec.encode(registration), from: far)
        let pushed = harness.transport.take(for: uplink)
        #expect(pushed.map(\.header.typeName) == [ControlOperation.uplinkBoard])
        let exported = try PayloadCodec.decode(Registration.self, from: try #require(pushed.first).payload)
        #expect(exported.id == "sensor" && exported.scope == "edge" && exported.secret == nil)
        harness.request(EnvelopeHeader(kind: .unregister), from: far)
        #expect(harness.transport.take(for: uplink).map(\.header.typeName) == [ControlOperation.uplinkGone])
    }

    @Test func aClientsRequestForTheParentsScopeGoesUpAndItsAnswerComesBack() throws {
        let (harness, uplink) = try edgeHarness()
        harness.request(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), from: harness.client, correlation: 21)
        let forwarded = try #require(harness.transport.take(for: uplink).first)
        #expect(forwarded.header.target == "demo.greeter" && forwarded.header.scope.isRoot)
        #expect(forwarded.header.correlationID != 21)
        // Only the uplink's answer counts.
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: forwarded.header.correlationID)), from: far)
        #expect(harness.transport.take(for: harness.client).isEmpty)
        harness.deliver(
            Envelope(header: EnvelopeHeader(kind: .reply, correlationID: forwarded.header.correlationID), payload: Data("{}".utf8)), from: uplink)
        let answer = try #require(harness.transport.take(for: harness.client).first)
        #expect(answer.header.kind == .reply && answer.header.correlationID == 21)
        // Nor is a board of its own manifest (here, in the root scope) that is not running.
        harness.request(EnvelopeHeader(kind: .command, target: "local.tool", typeName: "greet"), from: harness.client)
        #expect(harness.transport.take(for: uplink).isEmpty)
        #expect(harness.transport.take(for: harness.client).map(\.header.typeName) == ["boardNotRunning"])
        // A board of a served scope that is not running is not asked of the parent.
        harness.request(EnvelopeHeader(kind: .command, target: "nobody", scope: "edge", typeName: "greet"), from: harness.client)
        #expect(harness.transport.take(for: uplink).isEmpty)
        #expect(harness.transport.take(for: harness.client).map(\.header.typeName) == ["noSuchBoard"])
    }

    @Test func anActionBubblesOnIntoTheParentAndItsCountAddsUp() throws {
        let (harness, uplink, listener) = try edgeHarnessWithListener()
        harness.request(EnvelopeHeader(kind: .action, scope: "edge", typeName: "app.announce"), from: harness.client, correlation: 31)
        let local = try #require(harness.transport.take(for: listener).first)
        let up = try #require(harness.transport.take(for: uplink).first)
        #expect(up.header.kind == .action && up.header.scope == "edge" && up.header.flags.contains(.replyExpected))
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: local.header.correlationID)), from: listener)
        harness.deliver(
            Envelope(
                header: EnvelopeHeader(kind: .reply, correlationID: up.header.correlationID), payload: try PayloadCodec.encode(Delivery(delivered: 3))
            ),
            from: uplink)
        let done = try #require(harness.transport.take(for: harness.client).first)
        #expect(try PayloadCodec.decode(Delivery.self, from: done.payload).delivered == 4)
    }

    /// Issue: a motherboard attached to itself (or A ↔ B, or a longer cycle) delivered one
    /// `busctl action` about 10 000 times in 6 s. An action carries the trail of motherboards it
    /// went up through: one that comes back to a motherboard it left is dropped, so each
    /// subscriber hears it once; and it goes up through at most 16.
    @Test func anActionThatComesBackAroundACycleOfLinksIsDeliveredOnce() throws {
        let (harness, uplink, listener) = try edgeHarnessWithListener()
        harness.request(EnvelopeHeader(kind: .action, scope: "edge", typeName: "app.announce"), from: harness.client, correlation: 41)
        #expect(harness.transport.take(for: listener).count == 1)
        let up = try #require(harness.transport.take(for: uplink).first)
        #expect(up.header.linkTrail == [harness.motherboard.links.linkID])
        // The parent is this motherboard (attached to itself), or it sends the action on to a
        // motherboard that leads back here: it arrives again, over a link, with this one's mark.
        var again = up.header
        again.linkTrail = [7, harness.motherboard.links.linkID, 9]
        again.correlationID = 42
        harness.deliver(Envelope(header: again), from: far)
        #expect(harness.transport.take(for: listener).isEmpty)
        #expect(harness.transport.take(for: uplink).isEmpty)
        let dropped = try #require(harness.transport.take(for: far).first)
        #expect(try PayloadCodec.decode(Delivery.self, from: dropped.payload).delivered == 0)
        #expect(harness.motherboard.links.loopedActions.total == 1)

        // Through 16 motherboards already: delivered here, not sent further up.
        var far16 = up.header
        far16.linkTrail = Array(1...UInt64(HeaderCodec.maximumLinkHops))
        far16.correlationID = 43
        harness.deliver(Envelope(header: far16), from: far)
        #expect(harness.transport.take(for: listener).count == 1)
        #expect(harness.transport.take(for: uplink).isEmpty)
    }

    /// The attach that would close a cycle is refused: a motherboard asks, when its link comes
    /// up, with its own link id; its parent refuses when that id is its own or one above it, and
    /// otherwise answers the chain above, which the asker's uplink tells its motherboard.
    @Test func anAttachThatWouldMakeACycleIsRefused() throws {
        let (harness, uplink) = try edgeHarness()
        let above: [UInt64] = [71, 72]
        func ask(_ id: UInt64, correlation: UInt64) throws -> Envelope {
            harness.request(
                EnvelopeHeader(kind: .control, typeName: ControlOperation.linkChain), payload: try PayloadCodec.encode(LinkChain(ids: [id])),
                from: far, correlation: correlation)
            return try #require(harness.transport.take(for: far).first)
        }
        // Only its own uplink says what is above it.
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkChain), payload: try PayloadCodec.encode(LinkChain(ids: [9])),
            from: far, correlation: 50)
        #expect(harness.transport.take(for: far).first?.carriedError?.code == .unauthorized)
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkChain), payload: try PayloadCodec.encode(LinkChain(ids: above)),
            from: uplink, correlation: 51)
        #expect(harness.motherboard.links.ancestors == above)

        #expect(try ask(harness.motherboard.links.linkID, correlation: 52).carriedError?.code == .badArgument)
        #expect(try ask(72, correlation: 53).carriedError?.code == .badArgument)
        let fine = try ask(5, correlation: 54)
        #expect(try PayloadCodec.decode(LinkChain.self, from: fine.payload).ids == [harness.motherboard.links.linkID] + above)
    }
}
