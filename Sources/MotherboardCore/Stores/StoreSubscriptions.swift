import BusCore

/// Who watches which store: the peers a store's changes fan out to. Bounded per peer and in all,
/// so that a peer subscribing to (or renewing) many names nobody owns cannot grow the broker;
/// a peer's subscriptions go when it leaves.
struct StoreSubscriptions {
    /// Refused subscriptions, logged once a second at most.
    var refusedLog = LogThrottle(every: .seconds(1))
    /// The stores one peer may watch at once.
    static let maximumPerPeer = 1_024
    /// The subscriptions of all peers together.
    static let maximum = 65_536

    private var watchers: [ScopedName: Set<PeerID>] = [:]
    private var perPeer: [PeerID: Int] = [:]
    /// The remote principal of each watching peer that has one: its watches are judged again
    /// when the policy or the allow-list changes.
    private var principals: [PeerID: String] = [:]
    /// Subscriptions held now, all peers together.
    private(set) var count = 0

    enum Added: Equatable {
        case added
        /// It held it already.
        case held
        /// Past the peer's share or the bound in all: why.
        case refused(String)
    }

    /// `peer` watches `store` from now.
    mutating func add(_ peer: PeerID, to store: ScopedName, principal: String? = nil) -> Added {
        if watchers[store]?.contains(peer) == true { return .held }
        if perPeer[peer, default: 0] >= Self.maximumPerPeer {
            return .refused("this connection watches \(Self.maximumPerPeer) stores, as many as it may")
        }
        if count >= Self.maximum { return .refused("the broker holds \(Self.maximum) store subscriptions, as many as it may") }
        watchers[store, default: []].insert(peer)
        perPeer[peer, default: 0] += 1
        if let principal { principals[peer] = principal }
        count += 1
        return .added
    }

    /// Ends every watch of a remote principal that `mayWatch` no longer allows: a change of the
    /// policy or the allow-list applies to the streams already open, not only to new ones. Returns
    /// the watches ended.
    mutating func rejudge(_ mayWatch: (_ principal: String, _ store: ScopedName) -> Bool) -> [(peer: PeerID, store: ScopedName)] {
        guard !principals.isEmpty else { return [] }
        var ended: [(peer: PeerID, store: ScopedName)] = []
        for (store, peers) in watchers {
            for peer in peers {
                guard let principal = principals[peer], !mayWatch(principal, store) else { continue }
                ended.append((peer, store))
            }
        }
        for (peer, store) in ended { remove(peer, from: store) }
        return ended
    }

    mutating func remove(_ peer: PeerID, from store: ScopedName) {
        guard watchers[store]?.remove(peer) != nil else { return }
        if watchers[store]?.isEmpty == true { watchers[store] = nil }
        let left = perPeer[peer, default: 1] - 1
        perPeer[peer] = left > 0 ? left : nil
        if left <= 0 { principals[peer] = nil }
        count -= 1
    }

    /// Every subscription of `peer` goes (it left, or its board did).
    mutating func removeAll(of peer: PeerID) {
        guard perPeer[peer] != nil else { return }
        for store in Array(watchers.keys) where watchers[store]?.contains(peer) == true { remove(peer, from: store) }
    }

    /// Who watches `store`.
    func watchers(of store: ScopedName) -> Set<PeerID> { watchers[store] ?? [] }

    /// How many stores `peer` watches.
    func count(of peer: PeerID) -> Int { perPeer[peer] ?? 0 }

    /// How many stores have a watcher.
    var stores: Int { watchers.count }
}
