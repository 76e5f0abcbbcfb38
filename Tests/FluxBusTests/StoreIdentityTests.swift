import BoardKit
import BusCore
import Flux
import Foundation
import GRDB
import Testing

@testable import FluxBus

/// Each store's database is its own: the same board's store in two scopes never shares a file or
/// a row, a database of another store is refused, and the format is recorded for later changes.
@Suite("Store databases: one per board, scope and store")
struct StoreIdentityTests {
    let environment: [String: String]
    let directory: String

    init() throws {
        let fixture = try DurableStoreFixture()
        directory = fixture.directory
        environment = ["BOARDBUS_STATE_DIR": "\(directory)/state", "BOARDBUS_RUNTIME_DIR": "\(directory)/run"]
    }

    func open(_ identity: StoreIdentity) throws -> (store: NotesStore, host: StoreHost<[String]>) {
        let store = NotesStore(initialState: [], dispatcher: Dispatcher())
        let persistence = try StorePersistence.forStore(identity.store, board: identity.board, scope: identity.scope, environment: environment)
        let host = try StoreHost(name: identity.store, store: store, persistence: persistence)
        host.action(NotesStore.Add.self, named: "add")
        return (store, host)
    }

    @Test func theSameBoardsStoreInTwoScopesKeepsTwoDatabases() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let root = StoreIdentity(board: "demo.comments", scope: .root, store: "comments")
        let eu = StoreIdentity(board: "demo.comments", scope: "eu", store: "comments")
        let rootPath = try StorePersistence.databasePath(for: root, environment: environment)
        let euPath = try StorePersistence.databasePath(for: eu, environment: environment)
        #expect(rootPath == "\(directory)/state/stores/root/demo.comments.comments.sqlite")
        #expect(euPath == "\(directory)/state/stores/scope-eu/demo.comments.comments.sqlite")

        let (rootStore, rootHost) = try open(root)
        let (euStore, euHost) = try open(eu)
        #expect(try acknowledgement(rootHost.handle(dispatchRequest("add", id: "r1", text: "ROOT-1"))).applied)
        #expect(try acknowledgement(euHost.handle(dispatchRequest("add", id: "e1", text: "EU-1"))).applied)
        // The root's id is new to eu: applied there, not answered "already applied".
        let euR1 = try acknowledgement(euHost.handle(dispatchRequest("add", id: "r1", text: "EU-2")))
        #expect(euR1.applied && euR1.sequence == 2)
        #expect(rootStore.state == ["ROOT-1"])
        #expect(euStore.state == ["EU-1", "EU-2"])

        // Reopened (a restarted owner), each has its own state and sequence.
        let (rootAgain, _) = try open(root)
        let (euAgain, _) = try open(eu)
        #expect(rootAgain.state == ["ROOT-1"])
        #expect(euAgain.state == ["EU-1", "EU-2"])
    }

    @Test func aDatabaseOfAnotherStoreIsRefused() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/shared.sqlite"
        let mine = StoreIdentity(board: "demo.comments", scope: .root, store: "comments")
        _ = try StorePersistence(path: path, identity: mine)
        for other in [
            StoreIdentity(board: "demo.comments", scope: "eu", store: "comments"),
            StoreIdentity(board: "demo.other", scope: .root, store: "comments"),
            StoreIdentity(board: "demo.comments", scope: .root, store: "notes"),
        ] {
            let error = #expect(throws: BusError.self) { try StorePersistence(path: path, identity: other) }
            #expect(error?.code == .storageFailed)
            #expect(
                error?.message.contains("belongs to store 'comments' of board 'demo.comments' in scope (root)") == true,
                "\(String(describing: error))")
        }
        _ = try StorePersistence(path: path, identity: mine)
    }

    @Test func theFormatIsRecordedAndANewerOneIsRefused() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/notes.sqlite"
        let identity = StoreIdentity(board: "demo.notes", scope: .root, store: "notes")
        _ = try StorePersistence(path: path, identity: identity)
        let database = try DatabaseQueue(path: path)
        #expect(try database.read { try Int.fetchOne($0, sql: "PRAGMA user_version") } == StorePersistence.formatVersion)
        try database.writeWithoutTransaction { try $0.execute(sql: "PRAGMA user_version = \(StorePersistence.formatVersion + 1)") }
        let error = #expect(throws: BusError.self) { try StorePersistence(path: path, identity: identity) }
        #expect(error?.code == .storageFailed)
        #expect(error?.message.contains("newer BoardBus") == true)
    }

    /// A database of the layout before format 1 is never guessed into a scope: the board refuses
    /// to start, saying where the file is and where it goes; moved there, it is adopted whole.
    @Test func aDatabaseOfTheOldLayoutIsRefusedUntilMovedAndThenAdoptedWithItsData() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = StoreIdentity(board: "demo.comments", scope: "eu", store: "comments")
        // A format-0 database where the old layout kept it (no identity, no user_version).
        let legacy = "\(directory)/run/data/demo.comments.comments.sqlite"
        try FileManager.default.createDirectory(atPath: "\(directory)/run/data", withIntermediateDirectories: true)
        let old = try DatabaseQueue(path: legacy)
        let snapshot = try PayloadCodec.encode(StoreSnapshot(store: "comments", sequence: 7, state: ["OLD"]))
        try old.write { db in
            try db.execute(sql: "CREATE TABLE store_state (store TEXT PRIMARY KEY, sequence INTEGER NOT NULL, snapshot BLOB NOT NULL)")
            try db.execute(
                sql:
                    "CREATE TABLE dispatch_journal (store TEXT NOT NULL, dispatch_id TEXT NOT NULL, sequence INTEGER NOT NULL, action TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (store, dispatch_id))"
            )
            try db.execute(sql: "INSERT INTO store_state VALUES ('comments', 7, ?)", arguments: [snapshot])
            try db.execute(sql: "INSERT INTO dispatch_journal VALUES ('comments', 'old-1', 7, 'add', x'7B7D')")
        }
        try old.close()

        let error = #expect(throws: BusError.self) { try open(identity) }
        let path = try StorePersistence.databasePath(for: identity, environment: environment)
        #expect(error?.code == .storageFailed)
        #expect(error?.message.contains("mv '\(legacy)' '\(path)'") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: path))

        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: legacy, toPath: path)
        let (store, host) = try open(identity)
        #expect(store.state == ["OLD"])
        #expect(try !acknowledgement(host.handle(dispatchRequest("add", id: "old-1", text: "again"))).applied)
        let next = try acknowledgement(host.handle(dispatchRequest("add", id: "new-1", text: "NEW")))
        #expect(next.applied && next.sequence == 8)
        #expect(try DatabaseQueue(path: path).read { try Int.fetchOne($0, sql: "PRAGMA user_version") } == StorePersistence.formatVersion)
    }

    @Test func aStoreNameThatCannotNameAFileIsRefused() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for name in ["../escape", "a/b", "", "two..dots", "ünï"] {
            let error = #expect(throws: BusError.self) {
                try StorePersistence.databasePath(for: StoreIdentity(board: "demo.x", scope: .root, store: name), environment: environment)
            }
            #expect(error?.code == .badArgument)
        }
    }

    @Test func theStateDirectoryFollowsTheEnvironment() {
        #expect(BusAddress.stateDirectory(environment: ["BOARDBUS_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"], userID: 0) == "/s")
        #expect(BusAddress.stateDirectory(environment: ["XDG_STATE_HOME": "/x", "HOME": "/h"], userID: 0) == "/x/boardbus")
        #expect(BusAddress.stateDirectory(environment: ["HOME": "/h"], userID: 0) == "/h/.local/state/boardbus")
        #expect(BusAddress.stateDirectory(environment: ["BOARDBUS_STATE_DIR": "", "HOME": "/h"], userID: 0) == "/h/.local/state/boardbus")
        // Never inside the runtime directory.
        #expect(!BusAddress.stateDirectory(environment: ["XDG_RUNTIME_DIR": "/run/user/0"], userID: 0).hasPrefix("/run/user/0"))
    }
}
