import BoardKit
import BusCore
import Flux
import Foundation
import GRDB
import Testing

@testable import FluxBus

/// A store refuses an action by throwing a `Refusal`: nothing applied, no sequence spent, the
/// sender told `rejected` with the reason, and the dispatch id remembered as refused.
@Suite("Store refusals")
struct RefusalTests {
    func refuse(_ id: String, _ reason: String = "order A-1 is paid") -> StoreRequest {
        StoreRequest(
            kind: .dispatch, operation: "refuse", dispatchID: id, sender: "", payload: try! PayloadCodec.encode(NotesStore.Refuse(reason: reason)),
            timeout: .seconds(2))
    }

    func rejection(_ body: () throws -> Data) -> BusError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error as? BusError
        }
    }

    /// Durable: the refusal is journaled, so a retry with its id gets it again, after a restart
    /// of the owner too, even as an action the store would apply.
    @Test func aRefusedActionChangesNothingAndItsRetryIsRefusedAgainAfterARestart() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        var (store, remote, published) = try fixture.open()
        _ = try remote.handle(dispatchRequest("add", id: "a-1", text: "kept"))
        let refused = rejection { try remote.handle(refuse("r-1")) }
        #expect(refused == BusError(.rejected, "store 'notes' refused 'refuse': order A-1 is paid"))
        #expect(store.state == ["kept"])
        #expect(published.sequences == [1])
        #expect(rejection { try remote.handle(refuse("r-1", "another reason")) } == refused)

        (store, remote, published) = try fixture.open()
        #expect(store.state == ["kept"])
        #expect(rejection { try remote.handle(dispatchRequest("add", id: "r-1", text: "late")) } == refused)
        // No sequence was spent: the next change is 2.
        #expect(try acknowledgement(remote.handle(dispatchRequest("add", id: "a-2", text: "next"))).sequence == 2)
        #expect(store.state == ["kept", "next"])
        #expect(try StorePersistence(path: fixture.path, identity: DurableStoreFixture.identity).journalCount() == 3)
    }

    @Test func aStoreKeptInMemoryRemembersItsRefusalsToo() throws {
        let store = NotesStore(initialState: [], dispatcher: Dispatcher())
        let remote = try StoreHost(name: "notes", store: store)
        remote.action(NotesStore.Add.self, named: "add")
        remote.action(NotesStore.Refuse.self, named: "refuse")
        let refused = rejection { try remote.handle(refuse("r-1")) }
        #expect(refused?.code == .rejected)
        #expect(rejection { try remote.handle(dispatchRequest("add", id: "r-1", text: "x")) } == refused)
        #expect(store.state.isEmpty)
        #expect(try acknowledgement(remote.handle(dispatchRequest("add", id: "a-1", text: "x"))).sequence == 1)
    }

    /// A handler that fails with something else is a fault, not a decision: nothing applied,
    /// nothing remembered.
    @Test func aFaultIsHandlerFailedAndNotRemembered() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let (store, remote, published) = try fixture.open()
        let request = StoreRequest(kind: .dispatch, operation: "fault", dispatchID: "f-1", sender: "", payload: Data("{}".utf8), timeout: .seconds(2))
        #expect(rejection { try remote.handle(request) }?.code == .handlerFailed)
        #expect(store.state.isEmpty && published.sequences.isEmpty)
        #expect(try StorePersistence(path: fixture.path, identity: DurableStoreFixture.identity).journalCount() == 0)
        #expect(try acknowledgement(remote.handle(dispatchRequest("add", id: "f-1", text: "then"))).sequence == 1)
    }

    /// A reason is one line of at most 1 000 characters, cut between characters.
    @Test func aLongOrMultiLineReasonIsCutAndEscaped() throws {
        let store = NotesStore(initialState: [], dispatcher: Dispatcher())
        let remote = try StoreHost(name: "notes", store: store)
        remote.action(NotesStore.Refuse.self, named: "refuse")
        let long = String(repeating: "é", count: 1_500)
        let message = rejection { try remote.handle(refuse("r-1", long)) }?.message ?? ""
        #expect(message.hasSuffix(String(repeating: "é", count: 1_000) + "…(3000 bytes)"), "\(message.suffix(40))")
        let lines = rejection { try remote.handle(refuse("r-2", "first\nsecond")) }?.message ?? ""
        #expect(lines.hasSuffix(#"first\nsecond"#))
        let exactly = String(repeating: "é", count: 1_000)
        #expect(rejection { try remote.handle(refuse("r-3", exactly)) }?.message.hasSuffix(": " + exactly) == true)
    }

    /// A database of format 1 (before refusals) is moved to the current format when opened, its journal kept.
    @Test func aFormatOneDatabaseGainsTheRefusalColumn() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let database = try DatabaseQueue(path: fixture.path)
        try database.writeWithoutTransaction { db in
            try db.execute(
                sql: """
                    CREATE TABLE store_state (store TEXT PRIMARY KEY, sequence INTEGER NOT NULL, snapshot BLOB NOT NULL);
                    CREATE TABLE dispatch_journal (store TEXT NOT NULL, dispatch_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                        action TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (store, dispatch_id));
                    CREATE TABLE store_identity (board TEXT NOT NULL, scope TEXT NOT NULL, store TEXT NOT NULL);
                    INSERT INTO store_identity VALUES ('test.notes', '', 'notes');
                    INSERT INTO dispatch_journal VALUES ('notes', 'old-1', 0, 'ignored', x'7b7d');
                    PRAGMA user_version = 1;
                    """)
        }
        try database.close()
        let (_, remote, _) = try fixture.open()
        #expect(try acknowledgement(remote.handle(dispatchRequest("ignored", id: "old-1"))).applied == false)
        #expect(rejection { try remote.handle(refuse("r-1")) }?.code == .rejected)
        let reopened = try DatabaseQueue(path: fixture.path)
        #expect(try reopened.read { try Int.fetchOne($0, sql: "PRAGMA user_version") } == StorePersistence.formatVersion)
        #expect(try reopened.read { try $0.tableExists("store_records") })
    }
}
