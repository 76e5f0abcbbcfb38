import Foundation
import Synchronization
import Testing

import BoardKit
import BusCore
@testable import FluxBus
import BoardKitTesting
import Flux
import MotherboardCore

/// The snapshot-plus-updates logic of a watcher, fed by hand.
@Suite("Store watch")
struct StoreWatchTests {
    func change(_ sequence: UInt64) -> Data {
        Data(#"{"store":"s","sequence":\#(sequence),"state":{}}"#.utf8)
    }

    @Test func changesBeforeTheSnapshotWaitAndOlderOnesAreDropped() async throws {
        let (stream, continuation) = AsyncThrowingStream<StoreUpdate, any Error>.makeStream()
        let resyncs = Mutex(0)
        let watch = StoreWatch(store: "s", scope: "", continuation: continuation) { _ in resyncs.withLock { $0 += 1 } }
        watch.change(change(4))
        watch.change(change(5))
        watch.change(change(6))
        watch.snapshot(change(5))
        watch.change(change(6))  // a duplicate of a buffered one
        watch.change(change(7))
        continuation.finish()
        var seen: [(UInt64, Bool)] = []
        for try await update in stream { seen.append((update.sequence, update.isSnapshot)) }
        #expect(seen.map(\.0) == [5, 6, 7])
        #expect(seen.map(\.1) == [true, false, false])
        #expect(resyncs.withLock { $0 } == 0)
    }

    /// The broker ends a watch the policy no longer allows: the consumer's stream ends with
    /// `forbidden` after what came before, and the watch is matched to its store's pushes only.
    @Test func aWatchTheBrokerEndedEndsItsStreamForbidden() async throws {
        let (stream, continuation) = AsyncThrowingStream<StoreUpdate, any Error>.makeStream()
        let watch = StoreWatch(store: "s", scope: "", continuation: continuation) { _ in }
        watch.snapshot(change(1))
        let ended = EnvelopeHeader(kind: .store, target: "s", typeName: StoreOperation.watchEnded)
        #expect(watch.matches(ended))
        #expect(!watch.matches(EnvelopeHeader(kind: .store, target: "t", typeName: StoreOperation.watchEnded)))
        watch.receive(Envelope(header: ended))
        var sequences: [UInt64] = []
        let error = await #expect(throws: BusError.self) { for try await update in stream { sequences.append(update.sequence) } }
        #expect(sequences == [1])
        #expect(error?.code == .forbidden)
    }

    @Test func aGapLeadsToANewSnapshot() async throws {
        let (stream, continuation) = AsyncThrowingStream<StoreUpdate, any Error>.makeStream()
        let resyncs = Mutex(0)
        let watch = StoreWatch(store: "s", scope: "", continuation: continuation) { _ in resyncs.withLock { $0 += 1 } }
        watch.snapshot(change(1))
        watch.change(change(2))
        watch.change(change(4))  // 3 was lost
        #expect(resyncs.withLock { $0 } == 1)
        watch.change(change(5))
        watch.snapshot(change(4))
        continuation.finish()
        var seen: [(UInt64, Bool)] = []
        for try await update in stream { seen.append((update.sequence, update.isSnapshot)) }
        #expect(seen.map(\.0) == [1, 2, 4, 5])
        #expect(seen.map(\.1) == [true, false, true, false])
    }

    /// The broker made the subscription again (it restarted): a new snapshot is asked for, and
    /// delivered only when it is newer than what the watcher has.
    @Test func aRestoredSubscriptionAsksForASnapshotAndDeliversItOnlyWhenNewer() async throws {
        let (stream, continuation) = AsyncThrowingStream<StoreUpdate, any Error>.makeStream()
        let resyncs = Mutex(0)
        let watch = StoreWatch(store: "s", scope: "", continuation: continuation) { _ in resyncs.withLock { $0 += 1 } }
        let restored = Envelope(header: EnvelopeHeader(kind: .store, target: "s", typeName: StoreOperation.restored))
        #expect(watch.matches(restored.header))
        watch.snapshot(change(1))
        watch.change(change(2))
        watch.receive(restored)
        #expect(resyncs.withLock { $0 } == 1)
        watch.snapshot(change(2))  // nothing was missed
        watch.change(change(3))
        watch.receive(restored)
        #expect(resyncs.withLock { $0 } == 2)
        watch.snapshot(change(5))  // 4 and 5 were
        watch.change(change(6))
        continuation.finish()
        var seen: [(UInt64, Bool)] = []
        for try await update in stream { seen.append((update.sequence, update.isSnapshot)) }
        #expect(seen.map(\.0) == [1, 2, 3, 5, 6])
        #expect(seen.map(\.1) == [true, false, false, true, false])
    }

    /// A keyed watch: a gap syncs from the last change delivered; the owner's kept changes fill
    /// it without a snapshot; a restored subscription during a sync makes another follow it.
    @Test func aKeyedWatchFillsAGapFromKeptChangesAndSyncsAgainWhenRestored() async throws {
        typealias Changes = StoreChanges<Int>
        func changes(_ sequence: UInt64, _ key: String) -> Changes {
            Changes(store: "s", sequence: sequence, changes: [.init(key: key, record: Int(sequence))])
        }
        func envelope(_ changes: Changes) throws -> Envelope {
            Envelope(header: EnvelopeHeader(kind: .store, target: "s", typeName: StoreOperation.change), payload: try PayloadCodec.encode(changes))
        }
        let (stream, continuation) = AsyncThrowingStream<RecordUpdate<Int>, any Error>.makeStream()
        let syncs = Mutex<[UInt64]>([])
        let watch = KeyedStoreWatch<Int>(store: "s", scope: "", prefix: "a", continuation: continuation) { _, after in
            syncs.withLock { $0.append(after) }
        }
        // The first base: every change since the store began (a snapshot), then a buffered change.
        watch.receive(try envelope(changes(3, "a3")))
        #expect(watch.caughtUp([changes(1, "a1"), changes(2, "b2")], at: 2) == nil)
        watch.receive(try envelope(changes(5, "a5")))  // 4 was lost
        #expect(syncs.withLock { $0 } == [3])
        watch.receive(Envelope(header: EnvelopeHeader(kind: .store, target: "s", typeName: StoreOperation.restored)))
        #expect(watch.caughtUp([changes(4, "a4")], at: 4) == 5, "a sync was asked for while this one ran")
        #expect(watch.caughtUp([], at: 5) == nil)
        watch.receive(try envelope(changes(6, "a6")))
        continuation.finish()
        var seen: [(UInt64, Bool, [String])] = []
        for try await update in stream { seen.append((update.sequence, update.isSnapshot, update.changes.map(\.key))) }
        #expect(seen.map(\.0) == [2, 3, 4, 5, 6])
        #expect(seen.map(\.1) == [true, false, false, false, false])
        #expect(seen.map(\.2) == [["a1"], ["a3"], ["a4"], ["a5"], ["a6"]])

        // Restored before its first base: the base is followed by a sync from it.
        let (_, fresh) = AsyncThrowingStream<RecordUpdate<Int>, any Error>.makeStream()
        let early = KeyedStoreWatch<Int>(store: "s", scope: "", prefix: "", continuation: fresh) { _, _ in }
        early.receive(Envelope(header: EnvelopeHeader(kind: .store, target: "s", typeName: StoreOperation.restored)))
        #expect(early.caughtUp([changes(1, "a1")], at: 1) == 1)
    }
}

/// A store whose state grows past the bus's payload limit: its watcher is told, never left in
/// silence (dispatches were acknowledged up to sequence 7 while the watcher stopped at 4).
@Suite("A store past the payload limit", .timeLimit(.minutes(2)))
struct StoreTooLargeTests {
    struct Grow: Flux.Action, Codable { var kilobytes: Int }

    final class Blob: StatefulStore<String>, @unchecked Sendable {
        override func onDispatch(_ action: any Flux.Action) {
            if let grow = action as? Grow { state += String(repeating: "x", count: grow.kilobytes << 10) }
        }
    }

    /// The bus's payload limit at 64 KiB (4 MiB by default), so that the store is past it after
    /// four dispatches of 16 KiB rather than four of 1 MiB (under load, encoding megabytes of
    /// state held the board past its liveness timeout).
    static let settings = MotherboardSettings(limits: BusLimits(maximumPayloadBytes: 64 << 10))

    @Test func aWatcherIsToldTooLargeWhenAChangeCannotBeSentToIt() async throws {
        try await InProcessFleet.with(settings: Self.settings) { fleet in
            let host = try StoreHost(name: "blob", store: Blob(initialState: "", dispatcher: Dispatcher()))
            host.action(Grow.self, named: "grow")
            var board = Board(id: "shop.blob", environment: [:])
            board.host(host)
            try await fleet.start(board)
            let updates = fleet.client.watch("blob")
            let watcher = Task { () -> ([UInt64], BusError?) in
                var seen: [UInt64] = []
                do {
                    for try await update in updates { seen.append(update.sequence) }
                } catch let error as BusError {
                    return (seen, error)
                }
                return (seen, nil)
            }
            var acknowledged: [UInt64] = []
            for _ in 0..<7 {
                let ack = try await fleet.client.dispatch(store: "blob", action: "grow", payload: PayloadCodec.encode(Grow(kilobytes: 16)))
                acknowledged.append(ack.sequence)
            }
            #expect(acknowledged == Array(1...7))
            let (seen, error) = try await watcher.value
            // Up to 48 KiB the changes are sent; the fourth (64 KiB and its JSON) is not, and the
            // snapshot after it is refused too: the watch ends with the typed error.
            #expect(seen.last.map { $0 >= 3 && $0 < 4 } == true, "\(seen)")
            #expect(error?.code == .tooLarge, "\(String(describing: error))")
        }
    }
}
