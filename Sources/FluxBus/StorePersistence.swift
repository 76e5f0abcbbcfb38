import BoardKit
import BusCore
import Flux
import Foundation
import GRDB

/// Which store a database belongs to: the board that owns it, the scope that board runs in, and
/// the store's name. Two stores differ when any of the three does, and so do their databases.
public struct StoreIdentity: Sendable, Hashable, CustomStringConvertible {
    public var board: BoardID
    public var scope: Scope
    public var store: String

    public init(board: BoardID, scope: Scope, store: String) {
        self.board = board
        self.scope = scope
        self.store = store
    }

    /// `store 'comments' of board 'demo.comments' in scope eu`.
    public var description: String {
        "store '\(store.escapedForDisplay())' of board '\(board)' in scope \(scope)"
    }
}

/// Where a persistent store keeps its state and the actions it acknowledged: one SQLite database
/// (through GRDB) per store identity (board, scope, store). The state, its sequence number and
/// the journal row of the action that produced it are written in one transaction before the
/// change is visible or acknowledged, so an acknowledged action survives `kill -9`, a failed write
/// changes nothing, and a retried dispatch id is recognised and not applied again.
///
/// The database records its format (`PRAGMA user_version`, ``formatVersion``) and the identity
/// of its store: a database of another store, or of a newer format, is refused when opened.
///
/// Every failure of the database (locked by another connection past the caller's deadline, disk
/// or size limit full, read-only file) is a `BusError` with the code `BusError/Code/storageFailed`.
public final class StorePersistence: @unchecked Sendable {
    let queue: DatabaseQueue
    let store: String

    /// The format this version writes (SQLite's `user_version`). 0 is a database from before
    /// formats were recorded (one file for a board's store in every scope); 1 adds the store's
    /// identity; 2 the refusals in the journal; 3 the records of a keyed store, one row each
    /// (a database of format 1 or 2 is moved to 3 when opened).
    public static let formatVersion = 3

    /// How long a write waits for a lock held by another connection when the request carries no
    /// deadline.
    public static let defaultLockWait: Duration = .seconds(5)

    /// Opens (or creates) the database at `path` for the store `identity`.
    /// `maximumBytes`: the largest the database may grow (SQLite's `max_page_count`);
    ///   a write past it fails with `storageFailed` and changes nothing. Nil: no limit.
    public init(path: String, identity: StoreIdentity, maximumBytes: Int? = nil) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            var configuration = Configuration()
            if let maximumBytes {
                configuration.prepareDatabase { db in
                    let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                    try db.execute(sql: "PRAGMA max_page_count = \(max(1, maximumBytes / pageSize))")
                }
            }
            queue = try DatabaseQueue(path: path, configuration: configuration)
            self.store = identity.store
            try queue.write { db in try Self.prepare(db, path: path, identity: identity) }
        } catch let error as BusError {
            throw error
        } catch {
            throw BusError(.storageFailed, "cannot open store database \(path): \(Self.describe(error))")
        }
    }

    /// Creates the tables of a new database, or checks an existing one's format and identity,
    /// and records both (one transaction: a database is adopted whole or not at all).
    private static func prepare(_ db: Database, path: String, identity: StoreIdentity) throws {
        let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        guard version <= formatVersion else {
            throw BusError(
                .storageFailed,
                "store database \(path) has format \(version), written by a newer BoardBus; this one reads formats up to \(formatVersion)")
        }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS store_state (
                    store TEXT PRIMARY KEY, sequence INTEGER NOT NULL, snapshot BLOB NOT NULL);
                CREATE TABLE IF NOT EXISTS dispatch_journal (
                    store TEXT NOT NULL, dispatch_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                    action TEXT NOT NULL, payload BLOB NOT NULL, refusal TEXT, PRIMARY KEY (store, dispatch_id));
                CREATE TABLE IF NOT EXISTS store_identity (
                    board TEXT NOT NULL, scope TEXT NOT NULL, store TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS store_records (
                    store TEXT NOT NULL, key TEXT NOT NULL, record BLOB NOT NULL, PRIMARY KEY (store, key)) WITHOUT ROWID;
                """)
        // Format 2: a refused dispatch is journaled with its reason (NULL: applied).
        let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(dispatch_journal)").map { $0["name"] as String }
        if !columns.contains("refusal") { try db.execute(sql: "ALTER TABLE dispatch_journal ADD COLUMN refusal TEXT") }
        let recorded = try Row.fetchOne(db, sql: "SELECT board, scope, store FROM store_identity")
        if let recorded {
            let owner = (board: recorded["board"] as String, scope: recorded["scope"] as String, store: recorded["store"] as String)
            guard owner.board == identity.board.rawValue, owner.scope == identity.scope.name, owner.store == identity.store else {
                let theirs = "store '\(owner.store.escapedForDisplay())' of board '\(owner.board.escapedForDisplay())' in scope \(Scope(owner.scope))"
                throw BusError(.storageFailed, "store database \(path) belongs to \(theirs), not to the \(identity)")
            }
        } else {
            // A new database, or one an operator moved here from the layout before format 1.
            try db.execute(
                sql: "INSERT INTO store_identity (board, scope, store) VALUES (?, ?, ?)",
                arguments: [identity.board.rawValue, identity.scope.name, identity.store])
        }
        if version < formatVersion { try db.execute(sql: "PRAGMA user_version = \(formatVersion)") }
    }

    /// The database of a store of a board in a scope:
    /// `<stores>/root/<board>.<store>.sqlite` for the root scope and
    /// `<stores>/scope-<scope>/<board>.<store>.sqlite` for another, where `<stores>` is
    /// `$BOARDBUS_DATA_DIR`, else `<state dir>/stores` (`BusAddress/stateDirectory(environment:userID:)`).
    /// A store name that cannot be part of a file name (not letters, digits, `.`, `_`, `-`) is a
    /// `badArgument`.
    public static func databasePath(
        for identity: StoreIdentity, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> String {
        guard BoardID.isValid(identity.store) else {
            throw BusError(
                .badArgument,
                "store name '\(identity.store.escapedForDisplay())' cannot name its database file: use dot-separated letters, digits, '_' and '-'")
        }
        let scopeDirectory = identity.scope.isRoot ? "root" : "scope-\(identity.scope.name)"
        return "\(storesDirectory(environment: environment))/\(scopeDirectory)/\(identity.board).\(identity.store).sqlite"
    }

    /// `$BOARDBUS_DATA_DIR`, else `<state dir>/stores`.
    static func storesDirectory(environment: [String: String]) -> String {
        environment["BOARDBUS_DATA_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "\(BusAddress.stateDirectory(environment: environment, userID: getuid()))/stores"
    }

    /// Where the layout before format 1 kept a board's store, for every scope in one file:
    /// `$BOARDBUS_DATA_DIR/<board>.<store>.sqlite`, else `<runtime dir>/data/<board>.<store>.sqlite`.
    static func legacyPaths(for identity: StoreIdentity, environment: [String: String]) -> [String] {
        let file = "\(identity.board).\(identity.store).sqlite"
        var paths = ["\(BusAddress.runtimeDirectory(environment: environment, userID: getuid()))/data/\(file)"]
        if let data = environment["BOARDBUS_DATA_DIR"], !data.isEmpty { paths.insert("\(data)/\(file)", at: 0) }
        return paths
    }

    /// The database for a store of a board (``databasePath(for:environment:)``), in the board's
    /// scope (`$BOARDBUS_SCOPE` unless `scope` is given); `$BOARDBUS_STORE_MAX_BYTES`, when set,
    /// limits its size.
    ///
    /// A database left in the layout before format 1 (one file for every scope of the board) is
    /// not guessed into a scope: while this scope has no database of its own, opening it fails
    /// with `storageFailed`, saying where the old file is and how to move it into the scope it
    /// belongs to (or remove it).
    public static func forStore(
        _ store: String, board: BoardID, scope: Scope? = nil, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> StorePersistence {
        let identity = StoreIdentity(board: board, scope: scope ?? Scope(environment["BOARDBUS_SCOPE"] ?? ""), store: store)
        var maximumBytes: Int?
        if let text = environment["BOARDBUS_STORE_MAX_BYTES"], !text.isEmpty {
            guard let value = Int(text), value > 0 else {
                throw BusError(.badArgument, "BOARDBUS_STORE_MAX_BYTES must be a positive whole number of bytes, not '\(text)'")
            }
            maximumBytes = value
        }
        let path = try databasePath(for: identity, environment: environment)
        if !FileManager.default.fileExists(atPath: path),
            let legacy = legacyPaths(for: identity, environment: environment).first(where: FileManager.default.fileExists(atPath:))
        {
            throw BusError(
                .storageFailed,
                """
                \(legacy) is a store database of the layout before format 1, which every scope of board '\(board)' shared; \
                each scope's store now has its own, and the \(identity) is \(path). If the old file holds this scope's data, \
                move it there (mv '\(legacy)' '\(path)', with any -journal, -wal or -shm file beside it); if not, remove it; \
                then start the board again
                """)
        }
        return try StorePersistence(path: path, identity: identity, maximumBytes: maximumBytes)
    }

    /// The database for a store of `board`, in its scope (``forStore(_:board:scope:environment:)``).
    public static func forStore(_ store: String, of board: Board, environment: [String: String] = ProcessInfo.processInfo.environment) throws
        -> StorePersistence
    {
        try forStore(store, board: board.id, scope: board.scope, environment: environment)
    }

    /// The saved `StoreSnapshot` payload (the same bytes watchers were sent), if any.
    func load() throws -> Data? {
        try storage("read the state") { db in
            try Data.fetchOne(db, sql: "SELECT snapshot FROM store_state WHERE store = ?", arguments: [store])
        }
    }

    /// What became of a dispatch id: applied at a sequence number, or its action refused with a reason.
    enum Outcome: Equatable {
        case applied(UInt64)
        case refused(action: String, reason: String)
    }

    /// What became of a dispatch id, if it was dispatched before.
    func outcome(ofDispatch id: String, lockWait: Duration = defaultLockWait) throws -> Outcome? {
        try storage("read the journal", lockWait: lockWait) { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT sequence, action, refusal FROM dispatch_journal WHERE store = ? AND dispatch_id = ?", arguments: [store, id])
            else { return nil }
            if let reason = row["refusal"] as String? { return .refused(action: row["action"], reason: reason) }
            return .applied(UInt64(row["sequence"] as Int64))
        }
    }

    /// Journals a refused dispatch (nothing else changes), so that a retry gets the same refusal.
    func saveRefusal(sequence: UInt64, dispatch: JournalEntry, reason: String, lockWait: Duration = defaultLockWait) throws {
        try storage("save a refusal", lockWait: lockWait, write: true) { db in
            try db.execute(
                sql: "INSERT INTO dispatch_journal (store, dispatch_id, sequence, action, payload, refusal) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [store, dispatch.id, Int64(sequence), dispatch.action, dispatch.payload, reason])
        }
    }

    /// Saves a snapshot (when there is one), and the action that led to it (when there is one),
    /// in one transaction: either both are stored or, when this throws, neither.
    /// - Parameter lockWait: how long to wait for another connection's lock.
    func save(sequence: UInt64, snapshot: Data?, dispatch: JournalEntry?, lockWait: Duration = defaultLockWait) throws {
        try storage("save", lockWait: lockWait, write: true) { db in
            if let snapshot { try saveState(db, sequence: sequence, snapshot: snapshot) }
            if let dispatch { try journal(db, dispatch, sequence: sequence) }
        }
    }

    private func saveState(_ db: Database, sequence: UInt64, snapshot: Data) throws {
        try db.execute(
            sql:
                "INSERT INTO store_state (store, sequence, snapshot) VALUES (?, ?, ?) ON CONFLICT(store) DO UPDATE SET sequence = excluded.sequence, snapshot = excluded.snapshot",
            arguments: [store, Int64(sequence), snapshot])
    }

    private func journal(_ db: Database, _ dispatch: JournalEntry, sequence: UInt64) throws {
        try db.execute(
            sql: "INSERT INTO dispatch_journal (store, dispatch_id, sequence, action, payload) VALUES (?, ?, ?, ?, ?)",
            arguments: [store, dispatch.id, Int64(sequence), dispatch.action, dispatch.payload])
    }

    // MARK: - A keyed store's records, one row each

    /// The sequence number of a keyed store's last change (0 before the first).
    func keyedSequence() throws -> UInt64 {
        try storage("read the sequence") { db in
            try Int64.fetchOne(db, sql: "SELECT sequence FROM store_state WHERE store = ?", arguments: [store]).map(UInt64.init) ?? 0
        }
    }

    /// One record's bytes.
    func record(_ key: String) throws -> Data? {
        try storage("read a record") { db in
            try Data.fetchOne(db, sql: "SELECT record FROM store_records WHERE store = ? AND key = ?", arguments: [store, key])
        }
    }

    /// Records in key order (SQLite's `BINARY` collation: bytewise on UTF-8), by the primary key's
    /// index: a page costs the same in a store of ten records and of a million.
    func records(prefix: String, after: String?, limit: Int) throws -> [(key: String, record: Data)] {
        // Keys that start with the prefix sort from it up to the prefix with its last byte one
        // higher (UTF-8 never ends in 0xFF, so that byte exists).
        var upper = Array(prefix.utf8)
        if !upper.isEmpty { upper[upper.count - 1] += 1 }
        var sql = "SELECT key, record FROM store_records WHERE store = ? AND key >= ?"
        var arguments: StatementArguments = [store, prefix]
        if let after {
            sql += " AND key > ?"
            arguments += [after]
        }
        if !upper.isEmpty {
            sql += " AND key < CAST(? AS TEXT)"
            arguments += [Data(upper)]
        }
        sql += " ORDER BY key LIMIT ?"
        arguments += [limit]
        return try storage("read records") { db in
            try Row.fetchAll(db, sql: sql, arguments: arguments).map { ($0["key"], $0["record"]) }
        }
    }

    /// How many records a keyed store holds (SQLite counts them: its cost grows with the store).
    func recordCount() throws -> Int {
        try storage("count records") { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM store_records WHERE store = ?", arguments: [store]) ?? 0
        }
    }

    /// Writes one change of a keyed store — the rows it put or removed, its sequence number and the
    /// action that led to it — in one transaction: all of it is stored or, when this throws, none.
    func saveRecords(_ changes: [(key: String, record: Data?)], sequence: UInt64, dispatch: JournalEntry?, lockWait: Duration) throws {
        try storage("save", lockWait: lockWait, write: true) { db in
            for change in changes {
                if let record = change.record {
                    try db.execute(
                        sql:
                            "INSERT INTO store_records (store, key, record) VALUES (?, ?, ?) ON CONFLICT(store, key) DO UPDATE SET record = excluded.record",
                        arguments: [store, change.key, record])
                } else {
                    try db.execute(sql: "DELETE FROM store_records WHERE store = ? AND key = ?", arguments: [store, change.key])
                }
            }
            try saveState(db, sequence: sequence, snapshot: Data())
            if let dispatch { try journal(db, dispatch, sequence: sequence) }
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
