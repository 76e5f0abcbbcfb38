import BusCore
import Foundation
import GRDB

/// Where a persistent store keeps its state and the actions it acknowledged: one SQLite database
/// (through GRDB). The state, its sequence number and the journal row of the action that produced
/// it are written in one transaction before the action is acknowledged, so an acknowledged action
/// survives `kill -9`, and a retried dispatch id is recognised and not applied again.
public final class StorePersistence: @unchecked Sendable {
    let queue: DatabaseQueue
    let store: String

    /// Opens (or creates) the database at `path`.
    public init(path: String, store: String) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            queue = try DatabaseQueue(path: path)
            self.store = store
            try queue.write { db in
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS store_state (
                        store TEXT PRIMARY KEY, sequence INTEGER NOT NULL, snapshot BLOB NOT NULL);
                    CREATE TABLE IF NOT EXISTS dispatch_journal (
                        store TEXT NOT NULL, dispatch_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                        action TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (store, dispatch_id));
                    """)
            }
        } catch {
            throw BusError(.transport, "cannot open store database \(path): \(error)")
        }
    }

    /// The database for a store of a board: `$BOARDBUS_DATA_DIR`, else `<runtime dir>/data`.
    public static func forStore(_ store: String, board: BoardID, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> StorePersistence {
        let directory = environment["BOARDBUS_DATA_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "\(BusAddress.runtimeDirectory(environment: environment, userID: getuid()))/data"
        return try StorePersistence(path: "\(directory)/\(board).\(store).sqlite", store: store)
    }

    /// The saved ``StoreSnapshot`` payload (the same bytes watchers were sent), if any.
    func load() throws -> Data? {
        try queue.read { db in
            try Data.fetchOne(db, sql: "SELECT snapshot FROM store_state WHERE store = ?", arguments: [store])
        }
    }

    /// The sequence number at which a dispatch id was applied, if it was.
    func sequence(ofDispatch id: String) throws -> UInt64? {
        try queue.read { db in
            try Int64.fetchOne(db, sql: "SELECT sequence FROM dispatch_journal WHERE store = ? AND dispatch_id = ?", arguments: [store, id])
                .map(UInt64.init)
        }
    }

    /// Saves a snapshot, and the action that led to it when there is one, atomically.
    func save(sequence: UInt64, snapshot: Data, dispatch: (id: String, action: String, payload: Data)?) throws {
        try queue.write { db in
            try db.execute(
                sql: "INSERT INTO store_state (store, sequence, snapshot) VALUES (?, ?, ?) ON CONFLICT(store) DO UPDATE SET sequence = excluded.sequence, snapshot = excluded.snapshot",
                arguments: [store, Int64(sequence), snapshot])
            if let dispatch {
                try db.execute(
                    sql: "INSERT INTO dispatch_journal (store, dispatch_id, sequence, action, payload) VALUES (?, ?, ?, ?, ?)",
                    arguments: [store, dispatch.id, Int64(sequence), dispatch.action, dispatch.payload])
            }
        }
    }

    /// How many actions the journal holds.
    public func journalCount() throws -> Int {
        try queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dispatch_journal WHERE store = ?", arguments: [store]) ?? 0 }
    }
}
