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

/// The state machine of one keyed store's watcher. Until it has a base — the changes its owner
/// kept since the last one it saw, or the records read again in pages — the changes that arrive
/// wait; then those already in the base are dropped and the rest must follow one another with
/// no gap, or it syncs again from the last one it delivered.
final class KeyedStoreWatch<Record: Codable & Sendable>: BusSubscription {
    private enum Phase {
        case syncing(buffer: [StoreChanges<Record>])
        case live(last: UInt64)
    }

    let store: String
    let scope: Scope
    let prefix: String
    private let phase = Mutex<Phase>(.syncing(buffer: []))
    private let continuation: AsyncThrowingStream<RecordUpdate<Record>, any Error>.Continuation
    /// Starts a sync from the last sequence delivered.
    private let resync: @Sendable (KeyedStoreWatch, UInt64) -> Void

    init(
        store: String, scope: Scope, prefix: String, continuation: AsyncThrowingStream<RecordUpdate<Record>, any Error>.Continuation,
        resync: @escaping @Sendable (KeyedStoreWatch, UInt64) -> Void
    ) {
        self.store = store
        self.scope = scope
        self.prefix = prefix
        self.continuation = continuation
        self.resync = resync
    }

    func matches(_ header: EnvelopeHeader) -> Bool {
        header.kind == .store && header.typeName == StoreOperation.change && header.target == store && header.scope == scope
    }

    var renewal: Envelope {
        Envelope(header: EnvelopeHeader(kind: .store, target: store, scope: scope, typeName: StoreOperation.renew))
    }

    func receive(_ envelope: Envelope) {
        guard let changes = try? PayloadCodec.decode(StoreChanges<Record>.self, from: envelope.payload) else { return }
        let gapAfter = phase.withLock { phase -> UInt64? in
            switch phase {
            case .syncing(var buffer):
                buffer.append(changes)
                phase = .syncing(buffer: buffer)
                return nil
            case .live(let last):
                if changes.sequence <= last { return nil }
                if changes.sequence == last + 1 {
                    phase = .live(last: changes.sequence)
                    deliver(changes)
                    return nil
                }
                phase = .syncing(buffer: [changes])
                return last
            }
        }
        if let gapAfter { resync(self, gapAfter) }
    }

    /// Delivers a change, the part of it under the prefix (nothing when none of it is).
    func deliver(_ changes: StoreChanges<Record>) {
        let kept = changes.changes.filter { $0.key.utf8.starts(with: prefix.utf8) }
        guard !kept.isEmpty else { return }
        continuation.yield(
            RecordUpdate(sequence: changes.sequence, changes: kept.map { RecordChange(key: $0.key, record: $0.record) }, isSnapshot: false))
    }

    /// Delivers the records read again, as a snapshot.
    func deliverSnapshot(_ records: [(key: String, record: Record)], sequence: UInt64) {
        let changes = records.filter { $0.key.utf8.starts(with: prefix.utf8) }.map { RecordChange(key: $0.key, record: Optional($0.record)) }
        continuation.yield(RecordUpdate(sequence: sequence, changes: changes, isSnapshot: true))
    }

    /// The base is in place at `sequence`: the waiting changes after it are delivered in order and
    /// the watch goes live, or, at a gap among them, syncs again.
    func established(at sequence: UInt64) {
        let gapAfter = phase.withLock { phase -> UInt64? in
            guard case .syncing(let buffer) = phase else { return nil }
            var last = sequence
            let waiting = buffer.filter { $0.sequence > sequence }.sorted { $0.sequence < $1.sequence }
            for (index, changes) in waiting.enumerated() where changes.sequence > last {
                guard changes.sequence == last + 1 else {
                    phase = .syncing(buffer: Array(waiting[index...]))
                    return last
                }
                deliver(changes)
                last = changes.sequence
            }
            phase = .live(last: last)
            return nil
        }
        if let gapAfter { resync(self, gapAfter) }
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
    public func watchRecords<Record: Codable & Sendable>(
        _: Record.Type, store: String, prefix: String = "", scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout
    ) -> AsyncThrowingStream<RecordUpdate<Record>, any Error> {
        let (stream, continuation) = AsyncThrowingStream<RecordUpdate<Record>, any Error>.makeStream(bufferingPolicy: .unbounded)
        let watch = KeyedStoreWatch<Record>(store: store, scope: scope, prefix: prefix, continuation: continuation) { [weak self] watch, last in
            guard let self else { return }
            Task { await self.sync(watch, after: last, timeout: timeout) }
        }
        let id = addSubscription(watch)
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.removeSubscription(id)
            let header = EnvelopeHeader(kind: .store, target: store, scope: scope, typeName: StoreOperation.unsubscribe)
            try? self.send(Envelope(header: header))
        }
        // Registered before subscribing, so no change after the base is missed.
        Task { await sync(watch, after: nil, timeout: timeout) }
        return stream
    }

    /// Gives a watch its base: the changes after `last` the owner kept (or, for a new watch, every
    /// change since the store began, when all are kept), else the records read again in pages.
    private func sync<Record: Codable & Sendable>(_ watch: KeyedStoreWatch<Record>, after last: UInt64?, timeout: Duration) async {
        do {
            let since = try PayloadCodec.encode(ChangesSince(since: last ?? 0))
            // A new watch subscribes (the broker adds it to the store's watchers, then asks the owner).
            let operation = last == nil ? StoreOperation.subscribe : StoreOperation.state
            let reply = try await storeRequest(watch.store, operation, payload: since, scope: watch.scope, timeout: timeout)
            let log = try PayloadCodec.decode(StoreChangeLog<Record>.self, from: reply)
            if !log.reset {
                if last == nil {
                    var records: [String: Record] = [:]
                    for entry in log.entries { for change in entry.changes { records[change.key] = change.record } }
                    watch.deliverSnapshot(
                        records.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }.map { ($0.key, $0.value) }, sequence: log.sequence)
                } else {
                    for entry in log.entries { watch.deliver(entry) }
                }
                return watch.established(at: log.sequence)
            }
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
            watch.deliverSnapshot(records, sequence: base ?? log.sequence)
            watch.established(at: base ?? log.sequence)
        } catch {
            watch.fail(error)
        }
    }
}

extension BoardContext {
    /// Watches a keyed store another board owns, in this board's scope (``BusClient/watchRecords(_:store:prefix:scope:timeout:)``).
    public func watchRecords<Record: Codable & Sendable>(_ type: Record.Type, store: String, prefix: String = "") -> AsyncThrowingStream<
        RecordUpdate<Record>, any Error
    > {
        client.watchRecords(type, store: store, prefix: prefix, scope: scope)
    }
}
