import BoardKit
import BusCore
import Foundation
import Synchronization

/// One update of a watched store: its whole state at `sequence`, as JSON.
public struct StoreUpdate: Sendable, Hashable {
    public var sequence: UInt64
    /// A `StoreSnapshot` payload: `{"store", "sequence", "state"}`.
    public var snapshot: Data
    /// True for the first update, and for a new snapshot taken after this watcher missed changes
    /// (its queue was full); false for a change that follows the previous update directly.
    public var isSnapshot: Bool
}

/// The snapshot-plus-updates state machine of one watcher. Changes that arrive before the
/// snapshot wait; afterwards those already in the snapshot are dropped and the rest must follow
/// one another with no gap, or the watcher takes a new snapshot (as it does when the broker says
/// it made the subscription again).
final class StoreWatch: StoreSubscription {
    private enum Phase {
        /// `delivered`: the last sequence delivered before (nil for the first snapshot).
        case awaitingSnapshot(buffer: [(UInt64, Data)], delivered: UInt64? = nil)
        case live(last: UInt64)
    }

    let store: String
    let scope: Scope
    private let phase = Mutex<Phase>(.awaitingSnapshot(buffer: []))
    private let ended = Atomic<Bool>(false)
    private let continuation: AsyncThrowingStream<StoreUpdate, any Error>.Continuation
    private let resync: @Sendable (StoreWatch) -> Void

    init(
        store: String, scope: Scope, continuation: AsyncThrowingStream<StoreUpdate, any Error>.Continuation,
        resync: @escaping @Sendable (StoreWatch) -> Void
    ) {
        self.store = store
        self.scope = scope
        self.continuation = continuation
        self.resync = resync
    }

    func receive(_ envelope: Envelope) {
        if envelope.header.typeName == StoreOperation.watchEnded { return fail(StoreOperation.watchEndedError(store: store)) }
        guard envelope.header.typeName == StoreOperation.restored else { return change(envelope.payload) }
        // The broker made the subscription again: changes may have been missed; a new snapshot.
        snapshotAgain()
    }

    /// Changes may have been missed: a new snapshot, unless one is on its way.
    private func snapshotAgain() {
        let live = phase.withLock { phase -> Bool in
            guard case .live(let last) = phase else { return false }
            phase = .awaitingSnapshot(buffer: [], delivered: last)
            return true
        }
        if live { resync(self) }
    }

    /// A snapshot arrived (first one, or after a gap): delivered unless it is the state the
    /// watcher already had (asked for when the broker made the subscription again).
    func snapshot(_ data: Data) {
        guard let sequence = Self.sequence(of: data) else { return }
        let (ready, fresh) = phase.withLock { phase -> ([(UInt64, Data)], Bool) in
            guard case .awaitingSnapshot(let buffer, let delivered) = phase else { return ([], false) }
            phase = .live(last: max(sequence, delivered ?? 0))
            return (buffer, delivered.map { sequence > $0 } ?? true)
        }
        if fresh { continuation.yield(StoreUpdate(sequence: sequence, snapshot: data, isSnapshot: true)) }
        for (changeSequence, change) in ready { self.change(change, sequence: changeSequence) }
    }

    /// A change arrived from the broker.
    func change(_ data: Data, sequence: UInt64? = nil) {
        // Its owner could not send a change: a gap. The new snapshot is refused `tooLarge` while
        // the state stays past the limit, which ends the watch with that error.
        if sequence == nil, StoreChangeTooLarge.marker(in: data) != nil { return snapshotAgain() }
        guard let sequence = sequence ?? Self.sequence(of: data) else { return }
        enum Step { case deliver, skip, gap }
        let step = phase.withLock { phase -> Step in
            switch phase {
            case .awaitingSnapshot(var buffer, let delivered):
                buffer.append((sequence, data))
                phase = .awaitingSnapshot(buffer: buffer, delivered: delivered)
                return .skip
            case .live(let last):
                if sequence <= last { return .skip }
                if sequence == last + 1 {
                    phase = .live(last: sequence)
                    return .deliver
                }
                phase = .awaitingSnapshot(buffer: [(sequence, data)], delivered: last)
                return .gap
            }
        }
        switch step {
        case .deliver: continuation.yield(StoreUpdate(sequence: sequence, snapshot: data, isSnapshot: false))
        case .skip: break
        case .gap: resync(self)
        }
    }

    func fail(_ error: any Error) {
        continuation.finish(throwing: error)
    }

    /// Whether the stream's consumer stopped (no new snapshot is worth asking for then).
    var isEnded: Bool { ended.load(ordering: .acquiring) }

    func end() { ended.store(true, ordering: .releasing) }

    private struct SequenceOnly: Decodable { var sequence: UInt64 }

    static func sequence(of data: Data) -> UInt64? {
        (try? PayloadCodec.decode(SequenceOnly.self, from: data))?.sequence
    }
}

/// What the watches of a store share: the messages they take (its changes, and the broker's word
/// that it made the subscription again), their renewal, and their end.
protocol StoreSubscription: BusSubscription {
    var store: String { get }
    var scope: Scope { get }
    /// The stream's consumer stopped.
    func end()
    /// Whether its consumer stopped (no request for it is worth trying again then).
    var isEnded: Bool { get }
}

extension StoreSubscription {
    func matches(_ header: EnvelopeHeader) -> Bool {
        header.kind == .store && StoreOperation.pushes.contains(header.typeName)
            && header.target == store && header.scope == scope
    }

    var renewal: Envelope {
        Envelope(header: EnvelopeHeader(kind: .store, target: store, scope: scope, typeName: StoreOperation.renew))
    }
}

extension BusClient {
    /// What a watch waits out and tries again (its store's owner or the broker restarting), for
    /// as long as its consumer watches.
    static let watchRetryable: Set<BusError.Code> = BusClient.retryable.union([.timeout, .outcomeUnknown, .brokerNotRunning, .unreachable, .busy])

    /// Runs `attempt` until it succeeds, again after a failure the store's owner or the broker
    /// restarting explains, as long as `watch` is watched; its value, or nil once the watch ended.
    /// Any other failure is thrown.
    func whileWatched<T>(_ watch: some StoreSubscription, _ attempt: () async throws -> T) async throws -> T? {
        while !watch.isEnded {
            do {
                return try await attempt()
            } catch let error as BusError where Self.watchRetryable.contains(error.code) {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        return nil
    }

    /// Adds a store's watch to this client's subscriptions until its stream's consumer stops;
    /// then it ends, and the broker is told to stop sending it changes.
    func subscribe<Element>(_ watch: some StoreSubscription, until continuation: AsyncThrowingStream<Element, any Error>.Continuation) {
        let id = addSubscription(watch)
        continuation.onTermination = { [weak self] _ in
            watch.end()
            guard let self else { return }
            self.removeSubscription(id)
            let header = EnvelopeHeader(kind: .store, target: watch.store, scope: watch.scope, typeName: StoreOperation.unsubscribe)
            try? self.send(Envelope(header: header))
        }
    }
}
