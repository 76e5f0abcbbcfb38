import Foundation

/// Operations of `store` messages (the header's type name).
public enum StoreOperation {
    /// → owner: answer with the store's ``StoreSnapshot``.
    public static let state = "state"
    /// → broker: add the sender to the store's subscribers, then answer with a snapshot; every
    /// later `change` is forwarded to it.
    public static let subscribe = "subscribe"
    /// → broker, every second from each watcher, no answer: keep (or, after a broker restart,
    /// make again) the sender's subscription.
    public static let renew = "subscribe.renew"
    /// → broker: stop forwarding changes to the sender.
    public static let unsubscribe = "unsubscribe"
    /// owner → broker → subscribers: the state after a change, with its sequence number.
    public static let change = "change"
    /// holder board → owner: hold a query (payload: the query); answered with a ``QueryLease``.
    public static let activateQuery = "query.activate"
    /// holder board → owner: release a query (payload: ``QueryLease``).
    public static let releaseQuery = "query.release"
    /// broker → owner: the board named in `source` is gone; release what it held.
    public static let holderGone = "holder.gone"
}

/// The owner's answer to a dispatch: the action was applied (and, for a persistent store,
/// stored) as change number `sequence`.
public struct DispatchAck: BusPayload, Hashable {
    public var store: String
    /// The store's sequence number after the action.
    public var sequence: UInt64
    /// False when the action was a retry of one already applied (same dispatch id).
    public var applied: Bool
    public init(store: String, sequence: UInt64, applied: Bool = true) {
        self.store = store
        self.sequence = sequence
        self.applied = applied
    }
}

/// A store's state at a sequence number: the answer to `state` and `subscribe`, and the payload of
/// `change`. Sequence numbers start at 0 (the initial state) and grow by one per change.
public struct StoreSnapshot<State: Codable & Sendable>: BusPayload {
    public static var busTypeName: String { "StoreSnapshot" }
    public var store: String
    public var sequence: UInt64
    public var state: State
    public init(store: String, sequence: UInt64, state: State) {
        self.store = store
        self.sequence = sequence
        self.state = state
    }
}

/// A held query, named by the owner.
public struct QueryLease: BusPayload, Hashable {
    public var store: String
    public var lease: Int
    public init(store: String, lease: Int) {
        self.store = store
        self.lease = lease
    }
}
