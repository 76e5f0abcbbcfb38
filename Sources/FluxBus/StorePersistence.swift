import BusCore
import Foundation
import GRDB

/// Where a persistent store keeps its state and the actions it acknowledged: one SQLite database
/// (through GRDB). The state, its sequence number and the journal row of the action that produced
/// it are written in one transaction before the change is visible or acknowledged, so an
/// acknowledged action survives `kill -9`, a failed write changes nothing, and a retried dispatch
/// id is recognised and not applied again.
///
/// Every failure of the database (locked by another connection past the caller's deadline, disk
/// or size limit full, read-only file) is a ``BusError`` with the code ``BusError/Code/storageFailed``.
public final class StorePersistence: @unchecked Sendable {
    let queue: DatabaseQueue
    let store: String

    /// How long a write waits for a lock held by another connection when the request carries no
    /// deadline.
    public static let defaultLockWait: Duration = .seconds(5)

    /// Opens (or creates) the database at `path`.
    /// - Parameter maximumBytes: the largest the database may grow (SQLite's `max_page_count`);
    ///   a write past it fails with `storageFailed` and changes nothing. Nil: no limit.
    public init(path: String, store: String, maximumBytes: Int? = nil) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            var configuration = Configuration()
            if let maximumBytes {
                configuration.prepareDatabase { db in
                    let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                    try db.execute(sql: "PRAGMA max_page_count = \(max(1, maximumBytes / pageSize))")
                }
            }
            queue = try DatabaseQueue(path: path, configuration: configuration)
            self.store = store
            try queue.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE IF NOT EXISTS store_state (
                            store TEXT PRIMARY KEY, sequence INTEGER NOT NULL, snapshot BLOB NOT NULL);
                        CREATE TABLE IF NOT EXISTS dispatch_journal (
                            store TEXT NOT NULL, dispatch_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                            action TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (store, dispatch_id));
                        """)
            }
        } catch {
            throw BusError(.storageFailed, "cannot open store database \(path): \(Self.describe(error))")
        }
    }

    /// The database for a store of a board: `$BOARDBUS_DATA_DIR`, else `<runtime dir>/data`;
    /// `$BOARDBUS_STORE_MAX_BYTES`, when set, limits its size.
    public static func forStore(_ store: String, board: BoardID, environment: [String: String] = ProcessInfo.processInfo.environment) throws
        -> StorePersistence
    {
        let directory =
            environment["BOARDBUS_DATA_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "\(BusAddress.runtimeDirectory(environment: environment, userID: getuid()))/data"
        var maximumBytes: Int?
        if let text = environment["BOARDBUS_STORE_MAX_BYTES"], !text.isEmpty {
            guard let value = Int(text), value > 0 else {
                throw BusError(.badArgument, "BOARDBUS_STORE_MAX_BYTES must be a positive whole number of bytes, not '\(text)'")
            }
            maximumBytes = value
        }
        return try StorePersistence(path: "\(directory)/\(board).\(store).sqlite", store: store, maximumBytes: maximumBytes)
    }

    /// The saved ``StoreSnapshot`` payload (the same bytes watchers were sent), if any.
    func load() throws -> Data? {
        try storage("read the state") { db in
            try Data.fetchOne(db, sql: "SELECT snapshot FROM store_state WHERE store = ?", arguments: [store])
        }
    }

    /// The sequence number at which a dispatch id was applied, if it was.
    func sequence(ofDispatch id: String, lockWait: Duration = defaultLockWait) throws -> UInt64? {
        try storage("read the journal", lockWait: lockWait) { db in
            try Int64.fetchOne(db, sql: "SELECT sequence FROM dispatch_journal WHERE store = ? AND dispatch_id = ?", arguments: [store, id])
                .map(UInt64.init)
        }
    }

    /// Saves a snapshot (when there is one), and the action that led to it (when there is one),
    /// in one transaction: either both are stored or, when this throws, neither.
    /// - Parameter lockWait: how long to wait for another connection's lock.
    func save(sequence: UInt64, snapshot: Data?, dispatch: (id: String, action: String, payload: Data)?, lockWait: Duration = defaultLockWait) throws
    {
        try storage("save", lockWait: lockWait, write: true) { db in
            if let snapshot {
                try db.execute(
                    sql:
                        "INSERT INTO store_state (store, sequence, snapshot) VALUES (?, ?, ?) ON CONFLICT(store) DO UPDATE SET sequence = excluded.sequence, snapshot = excluded.snapshot",
                    arguments: [store, Int64(sequence), snapshot])
            }
            if let dispatch {
                try db.execute(
                    sql: "INSERT INTO dispatch_journal (store, dispatch_id, sequence, action, payload) VALUES (?, ?, ?, ?, ?)",
                    arguments: [store, dispatch.id, Int64(sequence), dispatch.action, dispatch.payload])
            }
        }
    }

    /// How many actions the journal holds.
    public func journalCount() throws -> Int {
        try storage("count the journal") { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dispatch_journal WHERE store = ?", arguments: [store]) ?? 0
        }
    }

    /// Runs `body` on the database with SQLite's busy timeout set to `lockWait` (so a lock held by
    /// another connection is waited for no longer than the caller waits), in an immediate
    /// transaction when it writes; any failure becomes `storageFailed`.
    private func storage<T>(_ what: String, lockWait: Duration = defaultLockWait, write: Bool = false, _ body: (Database) throws -> T) throws -> T {
        let milliseconds = max(0, min(Int64(Int32.max), lockWait.components.seconds * 1000 + lockWait.components.attoseconds / 1_000_000_000_000_000))
        do {
            return try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA busy_timeout = \(milliseconds)")
                guard write else { return try body(db) }
                var result: Result<T, any Error> = .failure(BusError(.storageFailed, "the transaction did not run"))
                try db.inTransaction(.immediate) {
                    result = .success(try body(db))
                    return .commit
                }
                return try result.get()
            }
        } catch {
            throw BusError(.storageFailed, "store '\(store)' could not \(what): \(Self.describe(error))")
        }
    }

    /// SQLite's own message (e.g. "database is locked", "database or disk is full").
    private static func describe(_ error: any Error) -> String {
        if let error = error as? DatabaseError { return error.message ?? "\(error.resultCode)" }
        if let error = error as? BusError { return error.message }
        return "\(error)"
    }
}
