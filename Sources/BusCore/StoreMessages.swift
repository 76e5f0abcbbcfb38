import FoundationEssentials

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
    /// broker → a subscriber whose `subscribe.renew` made its subscription again (the broker
    /// restarted, or forgot it): changes may have been missed; ask for them (or a new snapshot).
    public static let restored = "subscribe.restored"
    /// broker → a subscriber whose watch the broker ended (a change of the access policy or the
    /// allow-list no longer lets its principal watch the store): no more changes come, and a
    /// renewal is refused. The SDK ends the watch with `forbidden`.
    public static let watchEnded = "watch.ended"
    /// owner → broker → subscribers: the state after a change, with its sequence number.
    public static let change = "change"
    /// holder board → owner: hold a query (payload: the query); answered with a ``QueryLease``.
    public static let activateQuery = "query.activate"
    /// holder board → owner: release a query (payload: ``QueryLease``).
    public static let releaseQuery = "query.release"
    /// broker → owner: the board named in `source` is gone; release what it held.
    public static let holderGone = "holder.gone"
    /// → a keyed store's owner (payload ``RecordKey``): one record, as a ``StoreRecord``.
    public static let get = "get"
    /// → a keyed store's owner (payload ``RecordRange``): records in key order, as a ``RecordPage``.
    public static let list = "list"
    /// → the owner (payload ``StoreQuery``): a query the store declared, answered at the owner on
    /// its current state.
    public static let query = "query"
}

/// The `change` an owner sends in place of one it cannot send (past the bus's payload limit): its
/// sequence number, and how large it was. A watcher takes it as a gap and syncs again, and is
/// told `tooLarge` if what it asks for then is too large as well: never silence.
public struct StoreChangeTooLarge: BusPayload, Hashable {
    public struct Size: Codable, Sendable, Hashable {
        public var bytes: Int
        public var limit: Int
        public init(bytes: Int, limit: Int) {
            self.bytes = bytes
            self.limit = limit
        }
    }
    public var store: String
    public var sequence: UInt64
    public var tooLarge: Size

    public init(store: String, sequence: UInt64, tooLarge: Size) {
        self.store = store
        self.sequence = sequence
        self.tooLarge = tooLarge
    }

    private struct SequenceOnly: Decodable { var sequence: UInt64 }
    private static let field = Array(#""tooLarge""#.utf8)

    /// The sequence number of a change's payload (any store's: each has `sequence`).
    public static func sequence(of payload: Data) -> UInt64? {
        (try? JSONDecoder().decode(SequenceOnly.self, from: payload))?.sequence
    }

    /// The marker in `payload`, when it is one (a change whose JSON has `tooLarge`).
    public static func marker(in payload: Data) -> StoreChangeTooLarge? {
        // A marker is small; a real change can be megabytes, and is not parsed twice.
        guard payload.count < 4_096, payload.firstRange(of: Self.field) != nil else { return nil }
        return try? JSONDecoder().decode(StoreChangeTooLarge.self, from: payload)
    }
}

/// A keyed store's change: the keys one change put (with their records) or removed. The payload
/// of a keyed store's `change`, and an entry of a ``StoreChangeLog``.
public struct StoreChanges<Record: Codable & Sendable>: BusPayload {
    public static var busTypeName: String { "StoreChanges" }
    public var store: String
    public var sequence: UInt64
    public var changes: [KeyedChange<Record>]
    public init(store: String, sequence: UInt64, changes: [KeyedChange<Record>]) {
        self.store = store
        self.sequence = sequence
        self.changes = changes
    }
}

/// One key of a change: `record` when it was put, `removed: true` when it was removed.
public struct KeyedChange<Record: Codable & Sendable>: Codable, Sendable {
    public var key: String
    public var record: Record?
    public var removed: Bool?
    public init(key: String, record: Record?) {
        self.key = key
        self.record = record
        removed = record == nil ? true : nil
    }
}

/// The changes of a keyed store after a sequence number (the answer to `state` with a
/// ``ChangesSince`` payload): every one of them, oldest first; or, when the owner no longer keeps
/// them all, `reset` and none (the watcher reads the records again, in pages).
public struct StoreChangeLog<Record: Codable & Sendable>: BusPayload {
    public static var busTypeName: String { "StoreChangeLog" }
    public var store: String
    /// The store's sequence number now.
    public var sequence: UInt64
    public var entries: [StoreChanges<Record>]
    public var reset: Bool
    public init(store: String, sequence: UInt64, entries: [StoreChanges<Record>], reset: Bool) {
        self.store = store
        self.sequence = sequence
        self.entries = entries
        self.reset = reset
    }
}

/// The payload of `state` (or `subscribe`) for a keyed store's changes after `since`.
public struct ChangesSince: BusPayload, Hashable {
    public var since: UInt64
    public init(since: UInt64) { self.since = since }
}

/// The payload of `get`.
public struct RecordKey: BusPayload, Hashable {
    public var key: String
    public init(key: String) { self.key = key }
}

/// A keyed store's record at `key` (nil when there is none), at the store's sequence number.
public struct StoreRecord<Record: Codable & Sendable>: BusPayload {
    public var store: String
    public var sequence: UInt64
    public var key: String
    public var record: Record?
    public init(store: String, sequence: UInt64, key: String, record: Record?) {
        self.store = store
        self.sequence = sequence
        self.key = key
        self.record = record
    }
}

/// The payload of `list`: records whose keys start with `prefix`, after the key `after`, at most
/// `limit` (default and most: ``defaultLimit``, ``maximumLimit``).
public struct RecordRange: BusPayload, Hashable {
    public static let defaultLimit = 100
    public static let maximumLimit = 1_000
    public var prefix: String?
    public var after: String?
    public var limit: Int?
    public init(prefix: String? = nil, after: String? = nil, limit: Int? = nil) {
        self.prefix = prefix
        self.after = after
        self.limit = limit
    }
}

/// One page of a keyed store's records, in key order; `next` is the `after` of the next page,
/// absent on the last one.
public struct RecordPage<Record: Codable & Sendable>: BusPayload {
    public struct Entry: Codable, Sendable {
        public var key: String
        public var record: Record
        public init(key: String, record: Record) {
            self.key = key
            self.record = record
        }
    }
    public var store: String
    public var sequence: UInt64
    public var records: [Entry]
    public var next: String?
    public init(store: String, sequence: UInt64, records: [Entry], next: String?) {
        self.store = store
        self.sequence = sequence
        self.records = records
        self.next = next
    }
}

/// The payload of `query`: the name of a query the store declared, and its request.
public struct StoreQuery<Request: Codable & Sendable>: BusPayload {
    public var name: String
    public var request: Request
    public init(name: String, request: Request) {
        self.name = name
        self.request = request
    }
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

extension StoreOperation {
    /// What the broker pushes to a store's watchers, never answers: changes, a subscription made
    /// again, a watch ended.
    public static let pushes: Set<String> = [change, restored, watchEnded]

    /// How a watch the broker ended (``watchEnded``) ends for its consumer.
    public static func watchEndedError(store: String) -> BusError {
        BusError(.forbidden, "the motherboard ended the watch of store '\(store)': the access policy no longer lets this principal watch it")
    }
}
