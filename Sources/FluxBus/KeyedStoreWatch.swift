import BoardKit
import BusCore
import Flux
import Foundation
import Synchronization

/// One update of a watched keyed store: the keys that changed (a record, or nil for a removal).
/// The first update, and one after the watcher fell further behind than its owner keeps changes,
/// is a snapshot: every record (under the watch's prefix), to replace what the watcher had.
public struct RecordUpdate<Record: Codable & Sendable>: Sendable {
    public var sequence: UInt64
    public var changes: [RecordChange<Record>]
    public var isSnapshot: Bool
}

/// The state machine of one keyed store's watcher. While it syncs — reads the changes its owner
/// kept since the last one it delivered, or the records again in pages — the changes that arrive
/// wait; then those already delivered are dropped and the rest must follow one another with no
/// gap, or it syncs again from the last one it delivered. The broker's word that it made the
/// subscription again (after it restarted) starts a sync too: changes may have been missed.
final class KeyedStoreWatch<Record: Codable & Sendable>: StoreSubscription {
    private struct State {
        /// The last sequence delivered; nil before the first snapshot.
        var last: UInt64?
        var syncing = true
        /// A sync was asked for while one ran: another follows it.
        var again = false
        var buffer: [StoreChanges<Record>] = []
    }

    let store: String
    let scope: Scope
    let prefix: String
    private let state = Mutex(State())
    private let ended = Atomic<Bool>(false)
    private let continuation: AsyncThrowingStream<RecordUpdate<Record>, any Error>.Continuation
    /// Starts a sync from the last sequence delivered.
    private let resync: @Sendable (KeyedStoreWatch, UInt64) -> Void

    /// `after`: the last sequence the watcher already has, if any: it starts with the
    ///   changes after it instead of a snapshot (while the owner still keeps them).
    init(
        store: String, scope: Scope, prefix: String, after: UInt64? = nil,
        continuation: AsyncThrowingStream<RecordUpdate<Record>, any Error>.Continuation, resync: @escaping @Sendable (KeyedStoreWatch, UInt64) -> Void
    ) {
        state.withLock { $0.last = after }
        self.store = store
        self.scope = scope
        self.prefix = prefix
        self.continuation = continuation
        self.resync = resync
    }

    /// Whether the stream's consumer stopped (no sync is worth trying then).
    var isEnded: Bool { ended.load(ordering: .acquiring) }

    func end() { ended.store(true, ordering: .releasing) }

    func receive(_ envelope: Envelope) {
        if envelope.header.typeName == StoreOperation.watchEnded { return fail(StoreOperation.watchEndedError(store: store)) }
        // The broker remade the subscription, or the owner could not send a change: sync again.
        if envelope.header.typeName == StoreOperation.restored || StoreChangeTooLarge.marker(in: envelope.payload) != nil { return syncAgain() }
        guard let changes = try? PayloadCodec.decode(StoreChanges<Record>.self, from: envelope.payload) else { return }
        let gapAfter = state.withLock { state -> UInt64? in
            if state.syncing {
                state.buffer.append(changes)
                return nil
            }
            let last = state.last ?? 0
            if changes.sequence <= last { return nil }
            if changes.sequence == last + 1 {
                state.last = changes.sequence
                deliver(changes)
                return nil
            }
            state.syncing = true
            state.buffer = [changes]
            return last
        }
        if let gapAfter { resync(self, gapAfter) }
    }

    /// Syncs from the last change delivered, or after the sync under way.
    private func syncAgain() {
        let after = state.withLock { state -> UInt64? in
            if state.syncing {
                state.again = true
                return nil
            }
            state.syncing = true
            return state.last ?? 0
        }
        if let after { resync(self, after) }
    }

    /// The part of a change under the prefix (nothing when none of it is).
    private func deliver(_ changes: StoreChanges<Record>) {
        let kept = changes.changes.filter { $0.key.utf8.starts(with: prefix.utf8) }
        guard !kept.isEmpty else { return }
        continuation.yield(
            RecordUpdate(sequence: changes.sequence, changes: kept.map { RecordChange(key: $0.key, record: $0.record) }, isSnapshot: false))
    }

    /// The owner's kept changes after the last delivered, up to `sequence` (for the first sync:
    /// every change since the store began, delivered as one snapshot).
    func caughtUp(_ entries: [StoreChanges<Record>], at sequence: UInt64) -> UInt64? {
        state.withLock { state in
            if let last = state.last {
                var delivered = last
                for entry in entries where entry.sequence == delivered + 1 {
                    deliver(entry)
                    delivered = entry.sequence
                }
                state.last = delivered
            } else {
                var records: [String: Record] = [:]
                for entry in entries { for change in entry.changes { records[change.key] = change.record } }
                snapshot(records.map { ($0.key, $0.value) }, sequence: sequence, state: &state)
            }
            return drain(&state)
        }
    }

    /// The records read again in pages, the first page at `sequence`: delivered as a snapshot.
    func rebased(_ records: [(key: String, record: Record)], at sequence: UInt64) -> UInt64? {
        state.withLock { state in
            snapshot(records, sequence: sequence, state: &state)
            return drain(&state)
        }
    }

    private func snapshot(_ records: [(key: String, record: Record)], sequence: UInt64, state: inout State) {
        let changes = records.filter { $0.key.utf8.starts(with: prefix.utf8) }.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            .map { RecordChange(key: $0.key, record: Optional($0.record)) }
        continuation.yield(RecordUpdate(sequence: sequence, changes: changes, isSnapshot: true))
        state.last = sequence
    }

    /// Delivers the waiting changes after the last delivered, in order, and goes live; returns
    /// where to sync from again at a gap among them (or when a sync was asked for meanwhile).
    private func drain(_ state: inout State) -> UInt64? {
        var last = state.last ?? 0
        let waiting = state.buffer.filter { $0.sequence > last }.sorted { $0.sequence < $1.sequence }
        state.buffer = []
        for (index, changes) in waiting.enumerated() where changes.sequence > last {
            guard changes.sequence == last + 1 else {
                state.buffer = Array(waiting[index...])
                state.last = last
                return last
            }
            deliver(changes)
            last = changes.sequence
        }
        state.last = last
        if state.again {
            state.again = false
            return last
        }
        state.syncing = false
        return nil
    }

    func fail(_ error: any Error) {
        continuation.finish(throwing: error)
    }
}

extension BusClient {
    /// One record of a keyed store (nil when there is none), with the store's sequence number.
    public func storeRecord<Record: Codable & Sendable>(
        _: Record.Type, store: String, key: String, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout
    ) async throws -> StoreRecord<Record> {
        let reply = try await storeRequest(
            store, StoreOperation.get, payload: PayloadCodec.encode(RecordKey(key: key)), scope: scope, timeout: timeout)
        return try PayloadCodec.decode(StoreRecord<Record>.self, from: reply)
    }

    /// A page of a keyed store's records in key order: those whose keys start with `prefix`, after
    /// the key `after` (the previous page's `next`), at most `limit` (1 to 1 000).
    public func storeRecords<Record: Codable & Sendable>(
        _: Record.Type, store: String, prefix: String? = nil, after: String? = nil, limit: Int? = nil, scope: Scope = .root,
        timeout: Duration = BusClient.defaultTimeout
    ) async throws -> RecordPage<Record> {
        let range = try PayloadCodec.encode(RecordRange(prefix: prefix, after: after, limit: limit))
        let reply = try await storeRequest(store, StoreOperation.list, payload: range, scope: scope, timeout: timeout)
        return try PayloadCodec.decode(RecordPage<Record>.self, from: reply)
    }

    /// Calls a query a store declared; the answer is computed at the owner on its current state.
    public func query<Request: Codable & Sendable, Answer: Decodable>(
        store: String, _ name: String, _ request: Request, answer: Answer.Type, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout
    ) async throws -> Answer {
        let payload = try PayloadCodec.encode(StoreQuery(name: name, request: request))
        let reply = try await storeRequest(store, StoreOperation.query, payload: payload, scope: scope, timeout: timeout)
        return try PayloadCodec.decode(Answer.self, from: reply)
    }

    /// Watches a keyed store's records under `prefix` (all when empty): first a snapshot of them,
    /// then each change that touches them, with only the keys it changed. A watcher that misses
    /// changes (its queue was full, its connection was down) gets them from the owner's last kept
    /// changes, without a gap; when it fell further behind, a new snapshot read in pages. The
    /// subscription ends when the stream's consumer stops.
    ///
    /// A snapshot read in pages while the store changes holds each page as it was when read; the
    /// changes that follow it bring every record to its latest value.
    ///
    /// `after`: the sequence of the last change the watcher already has (it kept the
    ///   records): the watch starts with the changes after it, without a snapshot, while the
    ///   owner still keeps them (else with a snapshot).
    public func watchRecords<Record: Codable & Sendable>(
        _: Record.Type, store: String, prefix: String = "", after: UInt64? = nil, scope: Scope = .root,
        timeout: Duration = BusClient.defaultTimeout
    ) -> AsyncThrowingStream<RecordUpdate<Record>, any Error> {
        let (stream, continuation) = AsyncThrowingStream<RecordUpdate<Record>, any Error>.makeStream(bufferingPolicy: .unbounded)
        let watch = KeyedStoreWatch<Record>(store: store, scope: scope, prefix: prefix, after: after, continuation: continuation) {
            [weak self] watch, last in
            guard let self else { return }
            Task { await self.sync(watch, after: last, subscribing: false, timeout: timeout) }
        }
        subscribe(watch, until: continuation)
        // Registered before subscribing, so no change after the base is missed.
        Task { await sync(watch, after: after, subscribing: true, timeout: timeout) }
        return stream
    }

    /// Gives a watch its base, and again after a gap: the changes after `last` the owner kept (for
    /// a new watch, every change since the store began, when all are kept), else the records read
    /// again in pages. A failure the owner's or the broker's restart explains is tried again.
    private func sync<Record: Codable & Sendable>(
        _ watch: KeyedStoreWatch<Record>, after last: UInt64?, subscribing: Bool, timeout: Duration
    ) async {
        var (after, subscribing) = (last, subscribing)
        do {
            // Again from where a base showed a gap, until one shows none (or the watch ends).
            while let again = try await whileWatched(watch, { try await syncOnce(watch, after: after, subscribing: subscribing, timeout: timeout) }),
                let next = again
            {
                (after, subscribing) = (next, false)
            }
        } catch {
            watch.fail(error)
        }
    }

    /// One sync; returns where to sync from again when the base showed a gap.
    private func syncOnce<Record: Codable & Sendable>(
        _ watch: KeyedStoreWatch<Record>, after last: UInt64?, subscribing: Bool, timeout: Duration
    ) async throws -> UInt64? {
        let since = try PayloadCodec.encode(ChangesSince(since: last ?? 0))
        // A new watch subscribes (the broker adds it to the store's watchers, then asks the owner).
        let operation = subscribing ? StoreOperation.subscribe : StoreOperation.state
        let reply = try await storeRequest(watch.store, operation, payload: since, scope: watch.scope, timeout: timeout)
        let log = try PayloadCodec.decode(StoreChangeLog<Record>.self, from: reply)
        if !log.reset { return watch.caughtUp(log.entries, at: log.sequence) }
        var records: [(key: String, record: Record)] = []
        var after: String?
        var base: UInt64?
        repeat {
            let page = try await storeRecords(
                Record.self, store: watch.store, prefix: watch.prefix, after: after, limit: RecordRange.maximumLimit, scope: watch.scope,
                timeout: timeout)
            base = base ?? page.sequence
            records += page.records.map { ($0.key, $0.record) }
            after = page.next
        } while after != nil
        return watch.rebased(records, at: base ?? log.sequence)
    }
}

extension BoardContext {
    /// Watches a keyed store another board owns, in this board's scope (`BusClient.watchRecords(_:store:prefix:after:scope:timeout:)`).
    public func watchRecords<Record: Codable & Sendable>(_ type: Record.Type, store: String, prefix: String = "") -> AsyncThrowingStream<
        RecordUpdate<Record>, any Error
    > {
        client.watchRecords(type, store: store, prefix: prefix, scope: scope)
    }
}
