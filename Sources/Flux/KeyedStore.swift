import Foundation

/// One key's change: its new record, or nil when it was removed.
public struct RecordChange<Record: Sendable>: Sendable {
    public var key: String
    public var record: Record?

    public init(key: String, record: Record?) {
        self.key = key
        self.record = record
    }
}

extension RecordChange: Equatable where Record: Equatable {}

/// What one change of a ``KeyedStore`` did: the keys it changed, in the order they were first
/// touched, each with its final record or removal, and the store's sequence number after it.
public struct RecordChanges<Record: Sendable>: Sendable {
    public var sequence: UInt64
    public var changes: [RecordChange<Record>]

    public init(sequence: UInt64, changes: [RecordChange<Record>]) {
        self.sequence = sequence
        self.changes = changes
    }
}

/// The action that led to a change, for a table that journals it (a durable store's dispatch id).
public struct JournalEntry: Sendable, Hashable {
    public var id: String
    public var action: String
    public var payload: Data

    public init(id: String, action: String, payload: Data) {
        self.id = id
        self.action = action
        self.payload = payload
    }
}

/// Where a ``KeyedStore`` keeps its records: in memory (``InMemoryRecords``), or in a database
/// (FluxBus's SQLite table), so that a change writes only the keys it changed.
public protocol RecordTable<Record>: AnyObject, Sendable {
    associatedtype Record: Sendable
    /// The sequence number of the last change applied.
    func sequence() throws -> UInt64
    func record(_ key: String) throws -> Record?
    /// Up to `limit` records whose keys start with `prefix` and sort after `after`, in key order
    /// (bytewise on UTF-8).
    func page(prefix: String, after: String?, limit: Int) throws -> [(key: String, record: Record)]
    func count() throws -> Int
    /// Applies a change all or nothing, with the action that led to it when there is one.
    func apply(_ changes: RecordChanges<Record>, journal: JournalEntry?) throws
}

/// A store whose state is a set of records by key — orders by id, sessions by token — where a
/// change is the keys it put or removed, not a new whole state: what a change costs (its write,
/// what watchers are sent) depends on the keys it touches, not on how many records the store holds.
///
/// Subclasses override `onDispatch(_:)` and, in it, read with ``record(_:)`` and change with
/// ``put(_:at:)`` and ``remove(_:)``; throwing (a ``Refusal``) leaves every record as it was. The
/// owner's own changes go in ``update(_:)``. Observers (``onRecordsChange(_:)``) hear each change
/// once it is applied. Like every store, it is used from one thread or executor at a time.
open class KeyedStore<Record: Codable & Sendable>: Store, @unchecked Sendable {
    public let table: any RecordTable<Record>
    /// The number of the last change; 0 before the first.
    public private(set) var sequence: UInt64
    private var pending: [String: Record?] = [:]
    private var pendingOrder: [String] = []
    private var depth = 0
    private let recordObservers = ObserverList<RecordChanges<Record>>()

    /// `table`: where the records live; in memory when not given.
    public init(table: (any RecordTable<Record>)? = nil, dispatcher: Dispatcher = .global) throws {
        let table = table ?? InMemoryRecords<Record>()
        self.table = table
        sequence = try table.sequence()
        super.init(dispatcher: dispatcher)
    }

    /// The record at `key`, with this change's puts and removals already in it.
    public func record(_ key: String) throws -> Record? {
        let key = Self.storedKey(key)
        if let staged = pending[key] { return staged }
        return try table.record(key)
    }

    /// The key as the store keeps it: in Unicode's composed form (NFC). Swift's `String` compares
    /// and hashes by canonical equivalence, a database by bytes; one form for both means that
    /// "café" written composed or decomposed is one record for every read and write (`get`,
    /// `list`, queries, snapshots, watchers). Limits apply to the composed form; a prefix matches
    /// the composed keys' bytes.
    public static func storedKey(_ key: String) -> String {
        // ASCII, the usual key, is composed already.
        key.utf8.allSatisfy { $0 < 0x80 } ? key : key.precomposedStringWithCanonicalMapping
    }

    /// Puts a record at `key`. Inside a dispatch or ``update(_:)`` it is part of that change;
    /// outside, it is a change of its own (and throws when it cannot be applied).
    public func put(_ record: Record, at key: String) throws {
        try change(key, to: record)
    }

    /// Removes the record at `key` (nothing when there is none).
    public func remove(_ key: String) throws {
        try change(key, to: nil)
    }

    /// The longest key, in bytes of UTF-8.
    public static var maximumKeyBytes: Int { 1_024 }

    private func change(_ key: String, to record: Record?) throws {
        guard depth > 0 else { return try update { try change(key, to: record) } }
        let key = Self.storedKey(key)
        let bytes = key.utf8.count
        guard bytes > 0, bytes <= Self.maximumKeyBytes, !key.utf8.contains(0) else {
            throw Refusal("a key is 1 to \(Self.maximumKeyBytes) bytes of UTF-8 without NUL; this one has \(bytes) bytes")
        }
        if pending.updateValue(record, forKey: key) == nil { pendingOrder.append(key) }
    }

    /// Makes the owner's own change: everything `body` puts and removes is applied as one change,
    /// or, when `body` or the table throws, not at all.
    public func update(_ body: () throws -> Void) throws {
        try stage(body, journal: nil)
    }

    /// Runs `body` (a dispatch, an update) and applies what it put and removed as one change with
    /// the next sequence number, journaled with `journal`; returns it, or nil when `body` changed
    /// nothing. When `body` or the table throws, nothing is applied and no number is spent.
    @discardableResult
    public func stage(_ body: () throws -> Void, journal: JournalEntry?) throws -> RecordChanges<Record>? {
        depth += 1
        do {
            try body()
        } catch {
            depth -= 1
            if depth == 0 { discardPending() }
            throw error
        }
        depth -= 1
        guard depth == 0, !pendingOrder.isEmpty else { return nil }
        let changes = RecordChanges(
            sequence: sequence + 1, changes: pendingOrder.map { RecordChange(key: $0, record: pending[$0] ?? nil) })
        discardPending()
        try table.apply(changes, journal: journal)
        sequence = changes.sequence
        recordObservers.notify(changes)
        emitChange()
        return changes
    }

    private func discardPending() {
        pending.removeAll(keepingCapacity: true)
        pendingOrder.removeAll(keepingCapacity: true)
    }

    /// Up to `limit` records whose keys start with `prefix`, after the key `after`, in key order.
    public func records(prefix: String = "", after: String? = nil, limit: Int) throws -> [(key: String, record: Record)] {
        try table.page(prefix: Self.storedKey(prefix), after: after.map(Self.storedKey), limit: max(0, limit))
    }

    /// How many records the store holds.
    public func count() throws -> Int { try table.count() }

    /// Observes each applied change; goes when the receipt is released.
    public func onRecordsChange(_ handler: @escaping (RecordChanges<Record>) -> Void) -> Receipt {
        recordObservers.add(handler)
    }
}

/// Records kept in a dictionary. A page sorts the matching keys, so its cost grows with the
/// store (a database table pages by its index instead).
public final class InMemoryRecords<Record: Sendable>: RecordTable, @unchecked Sendable {
    private var records: [String: Record] = [:]
    private var applied: UInt64 = 0

    public init() {}

    public func sequence() -> UInt64 { applied }

    public func record(_ key: String) -> Record? { records[key] }

    public func page(prefix: String, after: String?, limit: Int) -> [(key: String, record: Record)] {
        let matching = records.filter { key, _ in key.utf8.starts(with: prefix.utf8) && after.map { Self.precedes($0, key) } ?? true }
        return matching.sorted { Self.precedes($0.key, $1.key) }.prefix(limit).map { ($0.key, $0.value) }
    }

    /// Bytewise order on UTF-8, as SQLite's `BINARY` collation.
    static func precedes(_ left: String, _ right: String) -> Bool {
        left.utf8.lexicographicallyPrecedes(right.utf8)
    }

    public func count() -> Int { records.count }

    public func apply(_ changes: RecordChanges<Record>, journal: JournalEntry?) {
        for change in changes.changes { records[change.key] = change.record }
        applied = changes.sequence
    }
}
