import BoardKit
import BusCore
import Flux
import Foundation
import GRDB
import Testing

@testable import FluxBus

/// A store of notes: `add` appends one, `clear` empties the list.
final class NotesStore: StatefulStore<[String]>, @unchecked Sendable {
    struct Add: Action, Codable { var text: String }
    struct Clear: Action, Codable {}
    /// An action the store ignores.
    struct Ignored: Action, Codable {}
    /// An action the store refuses, with `reason`, after changing its state (the change must not stay).
    struct Refuse: Action, Codable { var reason: String }
    /// An action whose handler fails with something that is not a refusal.
    struct Fault: Action, Codable {}
    struct Broken: Error {}
    override func onDispatch(_ action: any Action) throws {
        if let add = action as? Add { state.append(add.text) }
        if action is Clear { state = [] }
        if let refuse = action as? Refuse {
            state.append("half done")
            throw Refusal(refuse.reason)
        }
        if action is Fault { throw Broken() }
    }
}

/// A persistent store in a temporary directory, opened again as a restarted owner would.
struct DurableStoreFixture {
    let directory: String
    var path: String { "\(directory)/notes.sqlite" }
    static let identity = StoreIdentity(board: "test.notes", scope: .root, store: "notes")

    init() throws {
        var template = Array("\(NSTemporaryDirectory())/fluxbus-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw BusError(.transport, "mkdtemp failed") }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The store as its owner opens it at start: loaded from the database.
    func open(maximumBytes: Int? = nil) throws -> (store: NotesStore, remote: StoreHost<[String]>, published: PublishedChanges) {
        let store = NotesStore(initialState: [], dispatcher: Dispatcher())
        let remote = try StoreHost(
            name: "notes", store: store, persistence: StorePersistence(path: path, identity: Self.identity, maximumBytes: maximumBytes))
        remote.action(NotesStore.Add.self, named: "add")
        remote.action(NotesStore.Clear.self, named: "clear")
        remote.action(NotesStore.Ignored.self, named: "ignored")
        remote.action(NotesStore.Refuse.self, named: "refuse")
        remote.action(NotesStore.Fault.self, named: "fault")
        let published = PublishedChanges()
        remote.attach(StorePublisher { published.append($0) })
        return (store, remote, published)
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// What a store sent its watchers.
final class PublishedChanges: @unchecked Sendable {
    private let lock = NSLock()
    private var payloads: [Data] = []
    func append(_ payload: Data) { lock.withLock { payloads.append(payload) } }
    var sequences: [UInt64] {
        lock.withLock { payloads.compactMap { try? PayloadCodec.decode(StoreSnapshot<[String]>.self, from: $0).sequence } }
    }
}

func dispatchRequest(_ action: String, id: String?, text: String = "", timeout: Duration? = .seconds(2)) -> StoreRequest {
    let payload = action == "add" ? Data(#"{"text":"\#(text)"}"#.utf8) : Data("{}".utf8)
    return StoreRequest(kind: .dispatch, operation: action, dispatchID: id, sender: "", payload: payload, timeout: timeout)
}

/// A second connection to a store's database that may leave a transaction open between calls,
/// as `sqlite3` with `BEGIN IMMEDIATE` does.
func lockingConnection(_ path: String) throws -> DatabaseQueue {
    var configuration = Configuration()
    configuration.allowsUnsafeTransactions = true
    return try DatabaseQueue(path: path, configuration: configuration)
}

func acknowledgement(_ data: Data) throws -> DispatchAck {
    try PayloadCodec.decode(DispatchAck.self, from: data)
}

@Suite("Durable dispatch: all or nothing")
struct DurableDispatchTests {
    @Test func aDispatchRefusedByALockedDatabaseChangesNothingAndItsRetryIsAppliedOnce() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let (store, remote, published) = try fixture.open()
        _ = try remote.handle(dispatchRequest("add", id: "a", text: "first"))

        // Another connection holds the write lock.
        let other = try lockingConnection(fixture.path)
        try other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        for _ in 0..<2 {
            let error = #expect(throws: BusError.self) {
                try remote.handle(dispatchRequest("add", id: "imm1", text: "imm", timeout: .milliseconds(300)))
            }
            #expect(error?.code == .storageFailed)
            #expect(store.state == ["first"])
            #expect(published.sequences == [1])
        }
        try other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }

        let ack = try acknowledgement(remote.handle(dispatchRequest("add", id: "imm1", text: "imm")))
        #expect(ack.applied && ack.sequence == 2)
        let retry = try acknowledgement(remote.handle(dispatchRequest("add", id: "imm1", text: "imm")))
        #expect(!retry.applied && retry.sequence == 2)
        #expect(store.state == ["first", "imm"])
        #expect(published.sequences == [1, 2])

        // What a restarted owner reads is exactly what was acknowledged.
        let (reopened, _, _) = try fixture.open()
        #expect(reopened.state == ["first", "imm"])
    }

    @Test func aLockIsWaitedForNoLongerThanTheCallerWaits() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let (_, remote, _) = try fixture.open()
        let other = try lockingConnection(fixture.path)
        try other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        defer { try? other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") } }
        // A caller that waits 100 ms leaves no time to wait for the lock at all.
        #expect(StoreActions.lockWait(for: .milliseconds(100)) == .zero)
        #expect(StoreActions.lockWait(for: .seconds(25)) < .seconds(25))
        #expect(StoreActions.lockWait(for: nil) == StorePersistence.defaultLockWait)
        // The dispatch itself gives up without waiting out the 5 s of a request with no timeout:
        // the bound is loose (two orders of magnitude), so that only waiting for the lock fails it.
        let started = ContinuousClock.now
        let error = #expect(throws: BusError.self) {
            try remote.handle(dispatchRequest("add", id: "x", text: "x", timeout: .milliseconds(100)))
        }
        let waited = started.duration(to: .now)
        #expect(error?.code == .storageFailed)
        #expect(error?.message.contains("locked") == true)
        #expect(waited < StorePersistence.defaultLockWait / 2, "a caller waiting 100 ms was held \(waited)")
    }

    @Test func aFullDatabaseRefusesTheDispatchWhichIsAppliedOnceWhenSpaceIsFreed() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        var (store, remote, _) = try fixture.open(maximumBytes: 48 * 1024)
        let text = String(repeating: "x", count: 2_000)
        var acknowledged = 0
        var refusal: BusError?
        for index in 0..<200 {
            do {
                _ = try remote.handle(dispatchRequest("add", id: "n\(index)", text: text))
                acknowledged += 1
            } catch let error as BusError {
                refusal = error
                break
            }
        }
        #expect(refusal?.code == .storageFailed)
        #expect(acknowledged > 0)
        #expect(store.state.count == acknowledged)
        // Retrying while full changes nothing either.
        #expect(throws: BusError.self) { try remote.handle(dispatchRequest("add", id: "n\(acknowledged)", text: text)) }
        #expect(store.state.count == acknowledged)

        // The owner restarts (as after kill -9): it holds exactly the acknowledged actions.
        (store, remote, _) = try fixture.open(maximumBytes: 48 * 1024)
        #expect(store.state.count == acknowledged)
        // With room again, the refused id is applied once.
        (store, remote, _) = try fixture.open(maximumBytes: 1 << 20)
        let ack = try acknowledgement(remote.handle(dispatchRequest("add", id: "n\(acknowledged)", text: text)))
        #expect(ack.applied)
        let again = try acknowledgement(remote.handle(dispatchRequest("add", id: "n\(acknowledged)", text: text)))
        #expect(!again.applied)
        #expect(store.state.count == acknowledged + 1)
    }

    @Test func anActionThatChangesNothingIsJournaledSoItsRetryIsRecognised() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let (_, remote, published) = try fixture.open()
        let first = try acknowledgement(remote.handle(dispatchRequest("ignored", id: "c1")))
        #expect(first.applied && first.sequence == 0)
        #expect(try !acknowledgement(remote.handle(dispatchRequest("ignored", id: "c1"))).applied)
        #expect(published.sequences.isEmpty)
    }

    @Test func anEmptyDispatchIDIsRefused() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        let (store, remote, _) = try fixture.open()
        let error = #expect(throws: BusError.self) { try remote.handle(dispatchRequest("add", id: "", text: "x")) }
        #expect(error?.code == .badArgument)
        #expect(store.state.isEmpty)
    }

    /// A refusal is journaled like a change: when the database cannot take it, the sender gets
    /// `storageFailed` (not `rejected`), nothing is remembered, and a retry decides again; once
    /// journaled, the refusal is the id's answer, across a restart of the owner too.
    @Test func aRefusalTheDatabaseCannotJournalIsNotRememberedAndItsRetryDecidesAgain() throws {
        let fixture = try DurableStoreFixture()
        defer { fixture.remove() }
        var (store, remote, published) = try fixture.open()
        _ = try remote.handle(dispatchRequest("add", id: "a", text: "first"))
        func refuse() throws -> Data {
            try remote.handle(
                StoreRequest(
                    kind: .dispatch, operation: "refuse", dispatchID: "r1", sender: "", payload: Data(#"{"reason":"closed"}"#.utf8),
                    timeout: .milliseconds(300)))
        }

        let other = try lockingConnection(fixture.path)
        try other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        for _ in 0..<2 {
            let error = #expect(throws: BusError.self) { try refuse() }
            #expect(error?.code == .storageFailed)
            #expect(store.state == ["first"])
        }
        try other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
        let journaled = #expect(throws: BusError.self) { try refuse() }
        #expect(journaled?.code == .rejected && journaled?.message.contains("closed") == true)
        #expect(store.state == ["first"])
        #expect(published.sequences == [1])

        // The owner restarts: the id is still answered with its refusal, and nothing runs again.
        (store, remote, published) = try fixture.open()
        let again = #expect(throws: BusError.self) { try refuse() }
        #expect(again?.code == .rejected && again?.message.contains("closed") == true)
        #expect(store.state == ["first"])
    }
}
