import BusCore
import Foundation

/// Flux stores: they live in the board that owns them; the broker finds the owner by the store's
/// name (in the sender's scope), forwards dispatches and queries to it, and fans its changes out
/// to subscribers.
extension Motherboard {
    /// The live board that owns a store.
    func owner(of store: ScopedName) -> LiveBoard? {
        registry.owner(of: store)
    }

    /// `dispatch` and the `store` operations that go to the owner.
    func routeStore(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, now) = (inbound.peer, inbound.now)
        let sender = inbound.sender
        let store = ScopedName(scope: scope(of: envelope, sender: sender), name: envelope.header.target)
        if envelope.header.kind == .store {
            switch envelope.header.typeName {
            case StoreOperation.change:
                return fanOut(envelope, from: peer, store: store)
            case StoreOperation.renew:
                // Made again (after this broker started, or forgot it): the subscriber may have
                // missed changes meanwhile, and is told so.
                switch subscriptions.add(peer, to: store, principal: inbound.principal) {
                case .held: return
                case .refused(let why): return refuseSubscription(envelope, from: peer, store: store, why, now: now)
                case .added: break
                }
                let restored = EnvelopeHeader(kind: .store, target: store.name, scope: store.scope, typeName: StoreOperation.restored)
                send(Envelope(header: restored), to: peer)
                return
            case StoreOperation.unsubscribe:
                subscriptions.remove(peer, from: store)
                return reply(to: envelope, from: peer, with: Delivery(delivered: 0))
            case StoreOperation.holderGone:
                return reply(to: envelope, from: peer, error: BusError(.malformed, "holder.gone is sent by the broker only"))
            default:
                break
            }
        }
        guard let owner = owner(of: store) else {
            if forwardUp(envelope, name: store, from: peer, sender: sender, now: now) { return }
            return reply(
                to: envelope, from: peer, error: noScopeError(store.scope) ?? BusError(.noSuchStore, "no live board owns a store '\(store)'"))
        }
        // The owner takes `source` as the board that asked (its owner-only actions, who holds a
        // query).
        var request = Self.withoutForgedSource(envelope, sender: sender)
        if envelope.header.kind == .store && envelope.header.typeName == StoreOperation.subscribe {
            // Subscribe first, then ask for the snapshot: every change the owner publishes after
            // the snapshot reaches the subscriber after it, in order.
            if case .refused(let why) = subscriptions.add(peer, to: store, principal: inbound.principal) {
                return refuseSubscription(envelope, from: peer, store: store, why, now: now)
            }
            request.header.typeName = StoreOperation.state
        }
        deliver(request, to: owner, from: peer, sender: sender, now: now)
    }

    /// A subscription past the peer's share or the broker's bound: counted
    /// (`boardbus_refused_subscriptions_total`), logged (once a second at most), and answered
    /// `busy` when its sender waits (a renewal waits for nothing).
    private func refuseSubscription(_ envelope: Envelope, from peer: PeerID, store: ScopedName, _ why: String, now: ContinuousClock.Instant) {
        counters.refusedSubscriptions += 1
        if let refused = subscriptions.refusedLog.note(now: now) {
            logger.warning("store subscription refused", metadata: ["store": "\(store)", "why": "\(why)", "refused": "\(refused)"])
        }
        reply(to: envelope, from: peer, error: BusError(.busy, "cannot watch store '\(store)': \(why)"))
    }

    /// A change published by the store's owner goes to every subscriber. A subscriber whose queue
    /// is full misses it and sees a gap in the sequence numbers (the SDK then takes a new
    /// snapshot); a subscriber that is gone is forgotten. Neither slows the owner or the broker.
    private func fanOut(_ envelope: Envelope, from peer: PeerID, store: ScopedName) {
        guard let owner = sender(of: peer, envelope), owner.registration.stores.contains(store.name) else {
            return reply(to: envelope, from: peer, error: BusError(.unauthorized, "only the owner of store '\(store)' publishes its changes"))
        }
        var header = envelope.header
        header.source = owner.id.rawValue
        header.flags.remove(.replyExpected)
        header.correlationID = 0
        let change = Envelope(header: header, payload: envelope.payload)
        for subscriber in subscriptions.watchers(of: store) {
            if !monitors.isEmpty { observeSent(change, to: subscriber, forwardedFrom: peer, roundTrip: nil) }
            guard !transportSend(change, to: subscriber) else { continue }
            counters.undeliverable += 1
            if registry.board(for: subscriber) == nil && !isConnected(subscriber) {
                subscriptions.remove(subscriber, from: store)
            }
        }
    }

    /// A board left: its subscriptions go, and every store owner hears that it no longer holds
    /// queries (the lease of a query is its holder's liveness).
    func storesForget(_ board: LiveBoard) {
        subscriptions.removeAll(of: board.peer)
        let owners = registry.boards.values.filter { !$0.registration.stores.isEmpty }
        for owner in owners {
            for store in owner.registration.stores {
                let header = EnvelopeHeader(
                    kind: .store, source: board.id.rawValue, target: store, scope: board.scope, typeName: StoreOperation.holderGone)
                send(Envelope(header: header), to: owner.peer)
            }
        }
    }
}
