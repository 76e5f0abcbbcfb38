import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// The policy judges what a remote principal's message causes, not only what it asks at the gate:
/// each scope an action bubbles into, each store name a registration takes.
@Suite("Access policy per delivery")
struct PerDeliveryPolicyTests {
    let remote = PeerID(Data([0xEB]))

    func install(_ text: String, on harness: Harness) throws {
        harness.motherboard.install(policy: try AccessPolicy.parse(Data(text.utf8), source: "test"), source: "test")
    }

    func send(_ harness: Harness, _ header: EnvelopeHeader, payload: Data = Data("{}".utf8), from peer: PeerID, principal: String?) -> [Envelope] {
        var header = header
        header.flags.insert(.replyExpected)
        header.correlationID = 31
        harness.motherboard.receive(
            .success(Envelope(header: header, payload: payload)), from: peer, now: harness.now,
            remote: principal.map { RemotePeer(address: "10.0.0.7", keyName: $0) }, principal: principal)
        return harness.transport.take(for: peer)
    }

    func register(_ harness: Harness, _ id: BoardID, stores: [String], from peer: PeerID, principal: String?) throws -> [Envelope] {
        let registration = Registration(id: id, pid: 42, commands: ["do"], stores: stores, secret: "s-\(id)")
        return send(
            harness, EnvelopeHeader(kind: .register, source: id.rawValue), payload: try PayloadCodec.encode(registration), from: peer,
            principal: principal)
    }

    /// Under `deny * vault/*`, an action sent in `inbox` (a child of `vault`) reaches `inbox`'s
    /// subscribers and not `vault`'s: each scope it bubbles into is judged.
    @Test func anActionBubblesOnlyIntoTheScopesThePolicyLetsItReach() throws {
        let manifest = FleetManifest(scopes: [.init(name: "vault"), .init(name: "inbox", parent: "vault")])
        let harness = try Harness(manifest: manifest)
        let (vaultGreeter, inboxReader, rootBoard) = (PeerID(Data([1])), PeerID(Data([2])), PeerID(Data([4])))
        harness.register("vault.greeter", scope: "vault", peer: vaultGreeter, actions: ["app.announce"])
        harness.register("inbox.reader", scope: "inbox", peer: inboxReader, actions: ["app.announce"])
        harness.register("root.listener", peer: rootBoard, actions: ["app.announce"])
        _ = harness.transport.sent.removeAll()
        try install(
            #"""
            {"rules": [{"name": "announce", "allow": ["action"], "principals": ["far"], "targets": ["*/app.announce", "app.announce"]},
                       {"name": "vault is closed", "deny": ["*"], "principals": ["*"], "targets": ["vault/*"]}]}
            """#, on: harness)
        let fromInbox = send(harness, EnvelopeHeader(kind: .action, scope: "inbox", typeName: "app.announce"), from: remote, principal: "far")
        #expect(fromInbox.isEmpty)  // acknowledged when the subscribers are
        #expect(harness.transport.take(for: inboxReader).map(\.header.typeName) == ["app.announce"])
        #expect(harness.transport.take(for: vaultGreeter).isEmpty)
        #expect(harness.transport.take(for: rootBoard).map(\.header.typeName) == ["app.announce"])
        // Sent in vault itself: refused at the gate, as before.
        let inVault = send(harness, EnvelopeHeader(kind: .action, scope: "vault", typeName: "app.announce"), from: remote, principal: "far")
        #expect(inVault.first?.carriedError?.code == .forbidden)
        // The broker's own user is not asked: its action reaches every scope.
        _ = send(harness, EnvelopeHeader(kind: .action, scope: "inbox", typeName: "app.announce"), from: harness.client, principal: nil)
        #expect(harness.transport.take(for: vaultGreeter).count == 1)
    }

    /// A key granted `register far.*` cannot register a board that lists another's store: a store
    /// name is taken as an id is, and a manifest board's store belongs to it while it is down.
    @Test func aStoreNameIsTakenOnlyWithAGrantOnItAndAManifestBoardsOnlyWithServe() throws {
        let manifest = FleetManifest(boards: [.init(id: "shop.orders", executable: "Orders")])
        let harness = try Harness(manifest: manifest)
        let owner = PeerID(Data([9]))
        #expect(try register(harness, "shop.orders", stores: ["orders"], from: owner, principal: nil).first?.header.kind == .reply)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .unregister, source: "shop.orders")), from: owner)
        try install(#"{"rules": [{"name": "far boards", "allow": ["register"], "principals": ["far"], "targets": ["far.*"]}]}"#, on: harness)
        let spy = try register(harness, "far.spy", stores: ["orders"], from: remote, principal: "far")
        #expect(spy.first?.carriedError?.code == .forbidden)
        #expect(spy.first?.carriedError?.message.contains("store 'orders'") == true)
        #expect(try harness.list().boards.map(\.id).contains("far.spy") == false)
        // A store of its own name space is its to take.
        #expect(try register(harness, "far.cache", stores: ["far.cache"], from: PeerID(Data([0xEC])), principal: "far").first?.header.kind == .reply)
        // `register *` covers any name but a manifest board's store, which wants `serve`.
        try install(#"{"rules": [{"name": "all", "allow": ["register"], "principals": ["far"], "targets": ["*"]}]}"#, on: harness)
        let again = try register(harness, "far.spy", stores: ["orders"], from: PeerID(Data([0xED])), principal: "far")
        #expect(again.first?.carriedError?.message.contains("belongs to manifest board shop.orders") == true)
        try install(#"{"rules": [{"name": "all", "allow": ["register", "serve"], "principals": ["far"], "targets": ["*"]}]}"#, on: harness)
        #expect(try register(harness, "far.spy", stores: ["orders"], from: PeerID(Data([0xEE])), principal: "far").first?.header.kind == .reply)
        // A policy that takes the grant back drops the board that holds the store.
        try install(#"{"rules": [{"name": "all", "allow": ["register"], "principals": ["far"], "targets": ["*"]}]}"#, on: harness)
        #expect(try harness.list().boards.map(\.id).contains("far.spy") == false)
    }

    /// Removing `watch` from the policy (or the key from the allow-list) ends the watches already
    /// open: the subscriber is told, and no later change reaches it.
    @Test func aPolicyChangeEndsTheWatchesItNoLongerAllows() throws {
        let harness = try Harness()
        let owner = PeerID(Data([9]))
        #expect(try register(harness, "shop.orders", stores: ["orders"], from: owner, principal: nil).first?.header.kind == .reply)
        let watching = #"{"rules": [{"name": "watch", "allow": ["watch"], "principals": ["far", "near"], "targets": ["orders"]}]}"#
        try install(watching, on: harness)
        let (far, near) = (remote, PeerID(Data([0xEF])))
        for (peer, principal) in [(far, "far"), (near, "near")] {
            _ = send(
                harness, EnvelopeHeader(kind: .store, target: "orders", typeName: StoreOperation.subscribe), payload: Data(), from: peer,
                principal: principal)
        }
        _ = harness.transport.take(for: owner)
        func change() {
            harness.deliver(
                Envelope(
                    header: EnvelopeHeader(kind: .store, source: "shop.orders", target: "orders", typeName: StoreOperation.change),
                    payload: Data("{}".utf8)), from: owner)
        }
        change()
        #expect(harness.transport.take(for: far).map(\.header.typeName) == [StoreOperation.change])
        #expect(harness.transport.take(for: near).map(\.header.typeName) == [StoreOperation.change])
        // `far` no longer may watch: its watch ends, `near`'s goes on.
        try install(#"{"rules": [{"name": "watch", "allow": ["watch"], "principals": ["near"], "targets": ["orders"]}]}"#, on: harness)
        #expect(harness.transport.take(for: far).map(\.header.typeName) == [StoreOperation.watchEnded])
        change()
        #expect(harness.transport.take(for: far).isEmpty)
        #expect(harness.transport.take(for: near).map(\.header.typeName) == [StoreOperation.change])
        // Its renewal is refused now (a renewal waits for no answer: nothing comes back, nothing is kept).
        _ = send(
            harness, EnvelopeHeader(kind: .store, target: "orders", typeName: StoreOperation.renew), payload: Data(), from: far, principal: "far")
        change()
        #expect(harness.transport.take(for: far).allSatisfy { $0.header.typeName != StoreOperation.change })
        #expect(harness.transport.take(for: near).map(\.header.typeName) == [StoreOperation.change])
        // `near`'s key removed from the allow-list: its watch ends too.
        harness.motherboard.allowListChanged(removed: ["near"], listed: ["far"])
        #expect(harness.transport.take(for: near).map(\.header.typeName) == [StoreOperation.watchEnded])
        change()
        #expect(harness.transport.take(for: near).isEmpty)
    }

    /// A flow does on its registrant's behalf what it could not do itself: a remote board may
    /// register one only with `monitor.payloads` on its sources and `activate` on its target;
    /// the manifest's flows are the broker's own user's to remove.
    @Test func aFlowNeedsWhatItWillDoAndTheManifestsFlowsAreNotARemotePrincipalsToRemove() throws {
        let manifest = FleetManifest(
            boards: [.init(id: "auth.login", executable: "Login"), .init(id: "app.dashboard", executable: "Dashboard")],
            flows: ["auth.login ->> app.dashboard"])
        let harness = try Harness(manifest: manifest)
        let grants = #"""
            {"rules": [{"name": "far boards", "allow": ["register"], "principals": ["far"], "targets": ["far.*"]},
                       {"name": "far flows", "allow": ["control"], "principals": ["far"], "targets": ["flow.register", "flow.remove", "flows"]}
            """#
        try install(grants + "]}", on: harness)
        let tap = PeerID(Data([0xE1]))
        #expect(try register(harness, "far.tap", stores: [], from: tap, principal: "far").first?.header.kind == .reply)
        func registerFlow(_ spec: FlowSpec) throws -> Envelope? {
            send(
                harness, EnvelopeHeader(kind: .control, typeName: ControlOperation.registerFlow), payload: try PayloadCodec.encode(spec), from: tap,
                principal: "far"
            ).first
        }
        // Tapping the login's outputs, the token included: refused.
        let tapping = try registerFlow(FlowSpec(sources: ["auth.login"], target: "far.tap"))
        #expect(tapping?.carriedError?.code == .forbidden)
        #expect(tapping?.carriedError?.message.contains("may not monitor.payloads auth.login") == true)
        // Activating what it may not activate itself: refused.
        let activating = try registerFlow(FlowSpec(sources: ["far.tap"], target: "app.dashboard"))
        #expect(activating?.carriedError?.message.contains("may not activate app.dashboard") == true)
        #expect(try harness.list().boards.isEmpty == false)
        let manifestFlow = try #require(harness.motherboard.flows.flows.first { $0.owner == nil })
        // The manifest's flow, from a remote principal's client: not its to remove.
        let removal = send(
            harness, EnvelopeHeader(kind: .control, typeName: ControlOperation.removeFlow),
            payload: try PayloadCodec.encode(FlowRemoval(id: manifestFlow.id)), from: remote, principal: "far")
        #expect(removal.first?.carriedError?.code == .unauthorized)
        #expect(harness.motherboard.flows.flows.contains { $0.id == manifestFlow.id })
        // Granted what the flow does, it is registered; the grant taken back, the flow goes.
        try install(
            grants
                + #", {"name": "far taps", "allow": ["monitor.payloads", "activate"], "principals": ["far"], "targets": ["auth.login", "far.tap"]}]}"#,
            on: harness)
        #expect(try registerFlow(FlowSpec(sources: ["auth.login"], target: "far.tap"))?.header.kind == .reply)
        #expect(harness.motherboard.flows.flows.contains { $0.owner == "far.tap" })
        try install(grants + "]}", on: harness)
        #expect(!harness.motherboard.flows.flows.contains { $0.owner == "far.tap" })
        #expect(harness.motherboard.flows.flows.contains { $0.id == manifestFlow.id })
    }
}
