import BusCore
import BoardBusDemoAnnotationFilterIO
import BoardKit
import FluxBus
import BoardKitTesting
import BoardBusDemoCommentsIO
import Foundation
import GRDB
import Synchronization
import Testing

let fluxManifest = """
    {
      "boards": [
        { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "on-demand" },
        { "id": "demo.annotations", "executable": "BoardBusDemoAnnotationFilter", "start": "always" }
      ]
    }
    """

/// Collects a watch until it reaches `sequence`.
func collect(_ updates: AsyncThrowingStream<StoreUpdate, any Error>, until sequence: UInt64) async throws -> [StoreUpdate] {
    var seen: [StoreUpdate] = []
    for try await update in updates {
        seen.append(update)
        if update.sequence >= sequence { break }
    }
    return seen
}

/// Flux stores in their owning services, reached over the bus.
@Suite("Flux stores over the bus", .serialized, .timeLimit(.minutes(3)))
struct FluxIntegrationTests {
    typealias Snapshot = StoreSnapshot<AnnotationFilterIO.State>

    @Test func dispatchOverTheBusChangesState() async throws {
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let dispatched = try await fleet.busctl("dispatch", "annotationFilter", "toggle", #"{"filter":"photos"}"#, "--json")
            #expect(dispatched.exitCode == 0, "\(dispatched.standardError)")
            #expect(try dispatched.decodedOutput(as: DispatchAck.self) == DispatchAck(store: "annotationFilter", sequence: 1))
            let state = try await fleet.busctl("state", "annotationFilter", "--json")
            let snapshot = try state.decodedOutput(as: Snapshot.self)
            #expect(snapshot.sequence == 1)
            #expect(snapshot.state.filters == ["photos"] && snapshot.state.isFiltering)

            let unknownStore = try await fleet.busctl("dispatch", "nope", "toggle")
            #expect(unknownStore.standardError.hasPrefix("busctl: noSuchStore:"))
            let unknownAction = try await fleet.busctl("dispatch", "annotationFilter", "explode")
            #expect(unknownAction.standardError.hasPrefix("busctl: unknownAction:"))
            let wrongPayload = try await fleet.busctl("dispatch", "annotationFilter", "toggle", #"{"filtre":1}"#)
            #expect(wrongPayload.standardError.hasPrefix("busctl: typeMismatch:"))
        }
    }

    @Test func watchersSeeTheSameOrderedChangesEvenWhenJoiningMidStream() async throws {
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let perClient = 100
            let total = UInt64(2 * perClient)
            let first = try BusClient(address: fleet.address)
            let late = try BusClient(address: fleet.address)
            defer {
                first.close()
                late.close()
            }
            // The first watcher has its snapshot before any change.
            var earlyIterator = first.watch(AnnotationFilterIO.store).makeAsyncIterator()
            let snapshot = try #require(try await earlyIterator.next())
            let progress = Mutex<UInt64>(0)
            let early = Task {
                var updates = [snapshot]
                while let update = try await earlyIterator.next() {
                    updates.append(update)
                    progress.withLock { $0 = update.sequence }
                    if update.sequence >= total { break }
                }
                return updates
            }
            let writers = (0..<2).map { writer in
                Task {
                    try await fleet.withClient { client in
                        for index in 0..<perClient {
                            _ = try await client.dispatch(
                                store: AnnotationFilterIO.store, action: "toggle",
                                payload: Data(#"{"filter":"w\#(writer)-\#(index % 3)"}"#.utf8))
                        }
                    }
                }
            }
            // The second watcher joins while the changes flow.
            _ = await eventually { progress.withLock { $0 } >= 30 }
            let joined = Task { try await collect(late.watch(AnnotationFilterIO.store), until: total) }
            for writer in writers { try await writer.value }
            let earlyUpdates = try await early.value
            let lateUpdates = try await joined.value
            #expect(
                (lateUpdates.first?.sequence ?? 0) > 0 && (lateUpdates.first?.sequence ?? total) < total,
                "joined at \(lateUpdates.first?.sequence ?? 0)")

            for updates in [earlyUpdates, lateUpdates] {
                #expect(updates.first?.isSnapshot == true)
                #expect(updates.dropFirst().allSatisfy { !$0.isSnapshot })
                let sequences = updates.map(\.sequence)
                // No gap, no duplicate: consecutive from the snapshot to the last change.
                #expect(sequences == Array((sequences.first ?? 0)...total), "\(sequences)")
            }
            #expect(earlyUpdates.first?.sequence == 0)
            // Where they overlap, both saw identical states.
            let earlyBySequence = Dictionary(uniqueKeysWithValues: earlyUpdates.map { ($0.sequence, $0.snapshot) })
            for update in lateUpdates {
                let mine = try PayloadCodec.decode(Snapshot.self, from: update.snapshot)
                let theirs = try PayloadCodec.decode(Snapshot.self, from: try #require(earlyBySequence[update.sequence]))
                #expect(mine.state == theirs.state)
            }
            let watch = try await fleet.busctl("state", "annotationFilter", "--watch", "--count", "1", "--timeout", "10")
            #expect(try JSONDecoder().decode(Snapshot.self, from: Data(watch.standardOutput.utf8)).sequence == total)
        }
    }

    @Test func aQueryIsReleasedWhenItsHolderIsKilled() async throws {
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let started = try await fleet.busctl("activate", "demo.comments")
            #expect(started.exitCode == 0, "\(started.standardError)")
            let holder = try await fleet.startBoard(
                path: "\(fleet.binaryDirectory)/BoardBusDemoRecorder", arguments: ["--hold-query", "comments", #"{"postID":7}"#], id: "demo.querier")
            try await fleet.withClient { client in
                func state() async throws -> CommentsIO.State {
                    try PayloadCodec.decode(StoreSnapshot<CommentsIO.State>.self, from: try await client.storeState(CommentsIO.store)).state
                }
                let held = try await eventually { try await state().queriedPosts == [7] }
                #expect(held)
                // The query made the store fetch the post's comments.
                #expect(try await state().comments["7"]?.count == 1)
                #expect(try await state().fetching["7"] == false)
                // A client that writes a board's id as its source is still no board: it can neither
                // release that board's query (lease 1, the first) nor hold one in its name.
                func forged(_ operation: String, _ payload: Data) async -> BusError? {
                    let header = EnvelopeHeader(kind: .store, source: "demo.querier", target: CommentsIO.store, typeName: operation)
                    do {
                        _ = try await client.request(Envelope(header: header, payload: payload), timeout: .seconds(10))
                        return nil
                    } catch {
                        return error as? BusError
                    }
                }
                let release = await forged(StoreOperation.releaseQuery, try PayloadCodec.encode(QueryLease(store: CommentsIO.store, lease: 1)))
                #expect(release?.code == .badArgument, "\(String(describing: release))")
                let hold = await forged(StoreOperation.activateQuery, Data(#"{"postID":8}"#.utf8))
                #expect(hold?.code == .notRegistered, "\(String(describing: hold))")
                #expect(try await state().queriedPosts == [7])
                #expect(kill(holder.pid, SIGKILL) == 0)
                let released = try await eventually { try await state().queriedPosts.isEmpty }
                #expect(released)
                // Clients that are not boards cannot hold queries (no liveness to lease on).
                await #expect(throws: BusError.self) {
                    try await client.activateQuery(store: CommentsIO.store, query: Data(#"{"postID":1}"#.utf8))
                }
            }
        }
    }

    @Test func aPersistentStoreKeepsEveryAcknowledgedActionAcrossKill9() async throws {
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let count = 25
            try await fleet.withClient { client in
                try await client.activate(CommentsIO.id, payload: Data("{}".utf8))
                let pid = try #require(fleet.pid(of: CommentsIO.id))
                var last: UInt64 = 0
                for index in 0..<count {
                    let reply = CommentsIO.Reply(postID: 1, parent: 0, content: "comment \(index)")
                    last = try await client.dispatch(
                        store: CommentsIO.store, action: "reply", payload: PayloadCodec.encode(reply), dispatchID: "reply-\(index)"
                    ).sequence
                }
                // Killed right after the last acknowledgement.
                #expect(kill(pid, SIGKILL) == 0)
                let gone = await eventually { kill(pid, 0) != 0 }
                #expect(gone)
                _ = try await eventually { try await client.list().boards.allSatisfy { $0.id != CommentsIO.id } }

                // Started again (on demand), it comes back with every acknowledged action, once.
                try await client.activate(CommentsIO.id, payload: Data("{}".utf8))
                #expect(fleet.pid(of: CommentsIO.id) != pid)
                let snapshot = try PayloadCodec.decode(StoreSnapshot<CommentsIO.State>.self, from: try await client.storeState(CommentsIO.store))
                #expect(snapshot.sequence == last)
                #expect(snapshot.state.comments["1"]?.map(\.content) == (0..<count).map { "comment \($0)" })

                // A retry of an acknowledged dispatch is not applied twice.
                let retry = try await client.dispatch(
                    store: CommentsIO.store, action: "reply",
                    payload: PayloadCodec.encode(CommentsIO.Reply(postID: 1, parent: 0, content: "comment 3")), dispatchID: "reply-3")
                #expect(!retry.applied)
                let after = try PayloadCodec.decode(StoreSnapshot<CommentsIO.State>.self, from: try await client.storeState(CommentsIO.store))
                #expect(after.state.comments["1"]?.count == count)
            }
        }
    }

    /// A failed durable write is not applied anywhere, and its retry is applied once (issue: a
    /// dispatch refused with "database is locked" was applied in memory, seen by `busctl state`,
    /// saved by the next write and applied again by every retry).
    @Test func aDispatchTheDatabaseRefusesIsNotAppliedAndItsRetryIsAppliedOnceAcrossKill9() async throws {
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let reply = #"{"postID":56,"parent":0,"content":"imm"}"#
            func imm() async throws -> Int {
                let state = try await fleet.busctl("state", "comments", "--json")
                let snapshot = try state.decodedOutput(as: StoreSnapshot<CommentsIO.State>.self)
                return snapshot.state.comments["56"]?.filter { $0.content == "imm" }.count ?? 0
            }
            #expect(try await fleet.busctl("activate", "demo.comments").exitCode == 0)
            // A second connection holds the write lock, as `sqlite3` with BEGIN IMMEDIATE does.
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            let database = try StorePersistence.databasePath(
                for: StoreIdentity(board: CommentsIO.id, scope: .root, store: CommentsIO.store), environment: fleet.environment)
            let other = try DatabaseQueue(path: database, configuration: configuration)
            try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
            for _ in 0..<2 {
                let refused = try await fleet.busctl("dispatch", "comments", "reply", reply, "--id", "imm1", "--timeout", "1")
                #expect(refused.exitCode == 1)
                #expect(refused.standardError.contains("storageFailed"), "\(refused.standardError)")
                #expect(try await imm() == 0)
            }
            try await other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }

            let applied = try await fleet.busctl("dispatch", "comments", "reply", reply, "--id", "imm1")
            #expect(applied.standardOutput.contains("reply applied"), "\(applied.standardError)")
            let again = try await fleet.busctl("dispatch", "comments", "reply", reply, "--id", "imm1")
            #expect(again.standardOutput.contains("already applied"), "\(again.standardError)")
            #expect(try await imm() == 1)

            let pid = try #require(fleet.pid(of: CommentsIO.id))
            #expect(kill(pid, SIGKILL) == 0)
            _ = await eventually { kill(pid, 0) != 0 }
            _ = try await eventually { try await fleet.busctl("list", "--json").standardOutput.contains("demo.comments") == false }
            #expect(try await fleet.busctl("activate", "demo.comments").exitCode == 0)
            #expect(try await imm() == 1)
        }
    }
}
