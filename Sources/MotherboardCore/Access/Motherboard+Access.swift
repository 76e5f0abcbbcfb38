import BusCore
import Foundation

/// What the broker carries out when who may do what changes (``AccessControl`` decides): a new
/// policy, keys removed from the allow-list.
extension Motherboard {
    /// Puts `policy` in force: decisions are asked again from the next message on; boards
    /// registered by a principal that may no longer register them are dropped, and monitors
    /// that may no longer watch are detached.
    package func install(policy: AccessPolicy, source: String?, text: String? = nil) {
        access.install(policy, source: source, text: text)
        for board in registry.boards.values {
            guard let principal = board.principal else { continue }
            let decision = access.registrationDecision(principal, name: board.name, isManifestBoard: isManifestBoard(board.name)).decision
            if !decision.allowed {
                drop(board.name, reason: "the access policy no longer lets '\(principal)' register it (\(decision.rule))")
            } else if let refusal = storesForbidden(principal, board.registration, name: board.name) {
                drop(board.name, reason: "the access policy no longer lets '\(principal)' take its stores: \(refusal.message)")
            }
        }
        for flow in flows.flows {
            guard let owner = flow.owner, let board = registry[ScopedName(scope: flow.scope, name: owner.rawValue)], let principal = board.principal,
                flowForbidden(flow.spec, scope: flow.scope, owner: owner, principal: principal) != nil
            else { continue }
            try? flows.remove(id: flow.id, requester: owner, isAdministrator: false)
            logger.notice("flow removed: the access policy no longer lets its board's principal do what it does", metadata: ["flow": "\(flow.id)"])
        }
        for (peer, monitor) in monitors.monitors {
            guard let principal = monitor.principal, !access.mayMonitor(principal) else { continue }
            monitors.remove(peer)
            logger.notice("monitor detached: the access policy no longer lets its principal watch", metadata: ["principal": "\(principal)"])
        }
        endWatchesNoLongerAllowed()
    }

    /// The store watches of remote principals the policy (or the allow-list) no longer allows end
    /// now: no more changes reach them, and the subscriber is told with `watch.ended` (its
    /// renewal would be refused `forbidden`).
    func endWatchesNoLongerAllowed() {
        for (peer, store) in subscriptions.rejudge({ access.judge($0, delivery: .storeWatch, target: $1.description).decision.allowed }) {
            let ended = EnvelopeHeader(kind: .store, target: store.name, scope: store.scope, typeName: StoreOperation.watchEnded)
            send(Envelope(header: ended), to: peer)
            logger.notice("store watch ended: the access policy no longer lets its principal watch it", metadata: ["store": "\(store)"])
        }
    }

    /// The allow-list changed: `removed` names are refused from now on, and every board registered
    /// over a connection that authenticated with one of them is dropped (not kept as unreachable:
    /// its key may not come back), and so is what is kept of such boards whose link was down;
    /// `listed` (the whole list now) are no longer refused.
    package func allowListChanged(removed: Set<String>, listed: Set<String>) {
        access.allowListChanged(removed: removed, listed: listed)
        guard !removed.isEmpty else { return }
        endWatchesNoLongerAllowed()
        for board in registry.boards.values where board.remote.map({ removed.contains($0.keyName) }) == true {
            drop(board.name, reason: "its key '\(board.remote?.keyName ?? "")' was removed from the allow-list")
        }
        links.forgetUnreachable(ofKeys: removed)
    }

    /// Whether the manifest names `name` (the broker starts it, or says it is not running).
    func isManifestBoard(_ name: ScopedName) -> Bool {
        manifest.board(named: name.name, scope: name.scope) != nil
    }

    /// The policy's refusal of a registration of `name` by remote `principal`, if it refuses it.
    func registrationForbidden(_ principal: String?, name: ScopedName) -> BusError? {
        guard let principal else { return nil }
        return access.registrationForbidden(principal, name: name, isManifestBoard: isManifestBoard(name))
    }

    /// The policy's refusal of a flow a remote principal's board registers: a flow does on its
    /// behalf what it could not do itself otherwise, so it needs what the flow will do, besides
    /// `control flow.register`: `activate` its target (each run activates it), and
    /// `monitor.payloads` on each source but its own board (each run hands it the source's
    /// output, payload and all).
    func flowForbidden(_ spec: FlowSpec, scope: Scope, owner: BoardID, principal: String) -> BusError? {
        var asked: [(DeliveryKind, String)] = spec.sources.filter { $0 != owner }.map {
            (.flowSource, ScopedName(scope: scope, name: $0.rawValue).description)
        }
        if let target = spec.target { asked.append((.flowTarget, ScopedName(scope: scope, name: target.rawValue).description)) }
        for (kind, target) in asked {
            if let refusal = access.refusal(principal, access.judge(principal, delivery: kind, target: target)) {
                return BusError(refusal.code, "\(refusal.message) (a flow registered by its board would)")
            }
        }
        return nil
    }

    /// The policy's refusal of the stores a registration of `name` by remote `principal` lists:
    /// a store name is taken as a board id is (`register` or `serve` on `scope/store`), and a
    /// store a manifest board declared belongs to it (only `serve` takes it, even while that
    /// board is down).
    func storesForbidden(_ principal: String?, _ registration: Registration, name: ScopedName) -> BusError? {
        guard let principal else { return nil }
        for store in registration.stores {
            let storeName = ScopedName(scope: name.scope, name: store)
            let belongs = registry.storesOfManifestBoards[storeName].map { $0 != name } ?? false
            if let refusal = access.registrationForbidden(
                principal, name: storeName, kind: .storeName, isManifestBoard: belongs || isManifestBoard(name))
            {
                return BusError(
                    refusal.code,
                    "\(refusal.message) (store '\(store.escapedForDisplay())', which this registration lists\(belongs ? ", belongs to manifest board \(registry.storesOfManifestBoards[storeName]!)" : ""))"
                )
            }
        }
        return nil
    }

    /// `policy.check`: the policy's answer for a principal, an operation and a target.
    func answerPolicyCheck(_ envelope: Envelope, from peer: PeerID) throws {
        reply(
            to: envelope, from: peer,
            with: try access.check(try PayloadCodec.decode(PolicyCheck.self, from: envelope.payload), isManifestBoard: isManifestBoard))
    }

    /// `policy.show`: the policy in force, as its file says it, and where it was read.
    func answerPolicyShow(_ envelope: Envelope, from peer: PeerID) {
        reply(to: envelope, from: peer, with: access.shown)
    }
}
