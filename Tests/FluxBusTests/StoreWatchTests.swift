import Foundation
import Synchronization
import Testing

import BoardKit
@testable import FluxBus

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
}
