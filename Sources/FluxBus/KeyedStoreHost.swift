import BoardKit
import BusCore
import DequeModule
import Flux
import Foundation

/// A keyed store's records in its SQLite database, one row each (``StorePersistence``): a change
/// writes the rows it put or removed, its sequence number and its action's journal row in one
/// transaction, so what a change costs does not grow with the store, an acknowledged change
/// survives `kill -9`, and recovery reads nothing back (the rows are the state).
public final class SQLiteRecords<Record: Codable & Sendable>: RecordTable, @unchecked Sendable {
    public let persistence: StorePersistence
    /// How long the next write waits for a lock (the host sets it from the dispatch's deadline).
    var lockWait = StorePersistence.defaultLockWait

    public init(_ persistence: StorePersistence) {
        self.persistence = persistence
    }

    public func sequence() throws -> UInt64 { try persistence.keyedSequence() }

    public func record(_ key: String) throws -> Record? {
        try persistence.record(key).map { try PayloadCodec.decode(Record.self, from: $0) }
    }

    public func page(prefix: String, after: String?, limit: Int) throws -> [(key: String, record: Record)] {
        try persistence.records(prefix: prefix, after: after, limit: limit).map { ($0.key, try PayloadCodec.decode(Record.self, from: $0.record)) }
    }

    public func count() throws -> Int { try persistence.recordCount() }

    public func apply(_ changes: RecordChanges<Record>, journal: JournalEntry?) throws {
        let rows = try changes.changes.map { change in (key: change.key, record: try change.record.map { try PayloadCodec.encode($0) }) }
        try persistence.saveRecords(rows, sequence: changes.sequence, dispatch: journal, lockWait: lockWait)
    }
}

/// Makes a `KeyedStore` reachable over the bus, as ``StoreHost`` does a `StatefulStore`, with
/// what a store of many records needs: `get` one record, `list` them in pages by key prefix,
/// watchers sent only the keys each change touched, and the last changes kept so that a watcher
/// that fell behind catches up without reading the records again.
///
/// Durable when its store's table is ``SQLiteRecords``; dispatch ids, refusals, `storageFailed`
/// and the order of changes are as for ``StoreHost``. Host it with `board.host(host)`; it runs on
/// the board's socket thread.
public final class KeyedStoreHost<Record: Codable & Sendable>: StoreEndpoint, @unchecked Sendable {
    public let storeName: String
    public let store: KeyedStore<Record>
    private let actions: StoreActions
    private let durable: SQLiteRecords<Record>?
    private var publisher: StorePublisher?
    private var receipt: Receipt?
    private var history = Deque<StoreChanges<Record>>()
    /// How many of the last changes are kept for watchers that fall behind.
    public let keptChanges: Int

    /// The most records `state` sends as one snapshot; a larger store is read with `list`.
    public static var snapshotLimit: Int { 10_000 }

    public init(name: String, store: KeyedStore<Record>, keepingChanges: Int = 1_000) {
        storeName = name
        self.store = store
        keptChanges = max(0, keepingChanges)
        durable = store.table as? SQLiteRecords<Record>
        actions = StoreActions(storeName: name, persistence: durable?.persistence)
        receipt = store.onRecordsChange { [weak self] in self?.changed($0) }
    }

    /// Lets remote clients dispatch `A` under `name` (its JSON payload is decoded as `A`).
    /// `ownerOnly`: only the owning board dispatches it (`context.dispatch(_:named:to:)` to its
    /// own store, with the journal and dispatch ids of any dispatch); anyone else is refused
    /// `forbidden`, operators and the broker's own user included.
    public func action<A: Action & Decodable>(_ type: A.Type, named name: String, ownerOnly: Bool = false) {
        actions.register(type, named: name, ownerOnly: ownerOnly)
    }

    /// Declares a query other processes call by name (`busctl query STORE NAME REQUEST`), answered
    /// at the owner from the store's current records.
    public func query<Request: Codable & Sendable, Answer: Codable>(
        _ name: String, _ request: Request.Type, answer: @escaping (Request, KeyedStore<Record>) throws -> Answer
    ) {
        actions.register(query: name, request, Answer.self) { [unowned self] in try answer($0, store) }
    }

    public var schema: StoreSchema? {
        StoreSchema(
            state: PayloadSchema.of([String: Record].self), actions: actions.schemas, record: PayloadSchema.of(Record.self),
            queries: actions.querySchemas.isEmpty ? nil : actions.querySchemas, ownerActions: actions.ownerActionList)
    }

    public func attach(_ publisher: StorePublisher) {
        self.publisher = publisher
    }

    public func handle(_ request: StoreRequest) throws -> Data {
        switch (request.kind, request.operation) {
        case (.dispatch, _):
            return try PayloadCodec.encode(dispatch(request))
        case (_, StoreOperation.state):
            if request.payload.isEmpty { return try snapshot() }
            return try PayloadCodec.encode(changes(since: PayloadCodec.decode(ChangesSince.self, from: request.payload).since))
        case (_, StoreOperation.get):
            let key = KeyedStore<Record>.storedKey(try PayloadCodec.decode(RecordKey.self, from: request.payload).key)
            return try PayloadCodec.encode(StoreRecord(store: storeName, sequence: store.sequence, key: key, record: store.record(key)))
        case (_, StoreOperation.list):
            return try PayloadCodec.encode(page(PayloadCodec.decode(RecordRange.self, from: request.payload)))
        case (_, StoreOperation.query):
            return try actions.query(request.payload)
        case (_, StoreOperation.holderGone):
            return Data()
        case (_, StoreOperation.activateQuery), (_, StoreOperation.releaseQuery):
            throw BusError(.unknownAction, "store '\(storeName)' holds no query leases")
        default:
            throw BusError(.malformed, "unknown store operation '\(request.operation.escapedForDisplay())'")
        }
    }

    private func dispatch(_ request: StoreRequest) throws -> DispatchAck {
        try actions.dispatch(request, sequence: { store.sequence }) { action, journal, lockWait in
            durable?.lockWait = lockWait
            return try store.stage({ try store.dispatcher.dispatch(action) }, journal: journal) != nil
        }
    }

    /// Every record as one `StoreSnapshot` (a map by key), up to ``snapshotLimit`` records.
    private func snapshot() throws -> Data {
        let records = try store.records(limit: Self.snapshotLimit + 1)
        guard records.count <= Self.snapshotLimit else {
            throw BusError(
                .tooLarge,
                "store '\(storeName)' holds more than \(Self.snapshotLimit) records: read them by key ('get') or in pages ('list')")
        }
        let state = Dictionary(records.map { ($0.key, $0.record) }, uniquingKeysWith: { _, last in last })
        return try PayloadCodec.encode(StoreSnapshot(store: storeName, sequence: store.sequence, state: state))
    }

    private func page(_ range: RecordRange) throws -> RecordPage<Record> {
        let limit = range.limit ?? RecordRange.defaultLimit
        guard (1...RecordRange.maximumLimit).contains(limit) else {
            throw BusError(.badArgument, "a page holds 1 to \(RecordRange.maximumLimit) records, not \(limit)")
        }
        var records = try store.records(prefix: range.prefix ?? "", after: range.after, limit: limit + 1)
        let more = records.count > limit
        if more { records.removeLast() }
        return RecordPage(
            store: storeName, sequence: store.sequence, records: records.map { .init(key: $0.key, record: $0.record) },
            next: more ? records.last?.key : nil)
    }

    /// The changes after `since` when they are all still kept; else `reset` (the watcher reads the
    /// records again).
    func changes(since: UInt64) -> StoreChangeLog<Record> {
        let current = store.sequence
        if since == current { return StoreChangeLog(store: storeName, sequence: current, entries: [], reset: false) }
        guard since < current, let first = history.first?.sequence, first <= since + 1 else {
            return StoreChangeLog(store: storeName, sequence: current, entries: [], reset: true)
        }
        let entries = Array(history.dropFirst(Int(since + 1 - first)))
        return StoreChangeLog(store: storeName, sequence: current, entries: entries, reset: false)
    }

    /// An applied change: kept for watchers that fall behind, and published.
    private func changed(_ applied: RecordChanges<Record>) {
        let changes = StoreChanges(store: storeName, applied)
        if keptChanges > 0 {
            history.append(changes)
            if history.count > keptChanges { history.removeFirst() }
        }
        guard let publisher else { return }
        do {
            publisher.send(try PayloadCodec.encode(changes))
        } catch {
            // The table encoded these records a moment ago; a watcher that misses it sees a gap.
            FileHandle.standardError.write(Data("store \(storeName): cannot publish change \(applied.sequence): \(error)\n".utf8))
        }
    }
}

extension StoreChanges {
    /// A keyed store's applied change, as its watchers are sent it.
    public init(store: String, _ applied: RecordChanges<Record>) {
        self.init(store: store, sequence: applied.sequence, changes: applied.changes.map { KeyedChange(key: $0.key, record: $0.record) })
    }
}
