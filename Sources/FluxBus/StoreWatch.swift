import BoardKit
import BusCore
import Foundation
import Synchronization

/// One update of a watched store: its whole state at `sequence`, as JSON.
public struct StoreUpdate: Sendable, Hashable {
    public var sequence: UInt64
    /// A ``StoreSnapshot`` payload: `{"store", "sequence", "state"}`.
    public var snapshot: Data
    /// True for the first update, and for a new snapshot taken after this watcher missed changes
    /// (its queue was full); false for a change that follows the previous update directly.
    public var isSnapshot: Bool
}

/// The snapshot-plus-updates state machine of one watcher. Changes that arrive before the
/// snapshot wait; afterwards those already in the snapshot are dropped and the rest must follow
/// one another with no gap, or the watcher takes a new snapshot.
final class StoreWatch: BusSubscription {
    private enum Phase {
        case awaitingSnapshot(buffer: [(UInt64, Data)])
        case live(last: UInt64)
    }

    let store: String
    let scope: Scope
    private let phase = Mutex<Phase>(.awaitingSnapshot(buffer: []))
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

    func matches(_ header: EnvelopeHeader) -> Bool {
        header.kind == .store && header.typeName == StoreOperation.change && header.target == store && header.scope == scope
    }

    func receive(_ envelope: Envelope) { change(envelope.payload) }

    var renewal: Envelope {
        Envelope(header: EnvelopeHeader(kind: .store, target: store, scope: scope, typeName: StoreOperation.renew))
    }

    /// A snapshot arrived (first one, or after a gap).
    func snapshot(_ data: Data) {
        guard let sequence = Self.sequence(of: data) else { return }
        let ready = phase.withLock { phase -> [(UInt64, Data)] in
            guard case .awaitingSnapshot(let buffer) = phase else { return [] }
            phase = .live(last: sequence)
            return buffer
        }
        continuation.yield(StoreUpdate(sequence: sequence, snapshot: data, isSnapshot: true))
        for (changeSequence, change) in ready { self.change(change, sequence: changeSequence) }
    }

    /// A change arrived from the broker.
    func change(_ data: Data, sequence: UInt64? = nil) {
        guard let sequence = sequence ?? Self.sequence(of: data) else { return }
        enum Step { case deliver, skip, gap }
        let step = phase.withLock { phase -> Step in
            switch phase {
            case .awaitingSnapshot(var buffer):
                buffer.append((sequence, data))
                phase = .awaitingSnapshot(buffer: buffer)
                return .skip
            case .live(let last):
                if sequence <= last { return .skip }
                if sequence == last + 1 {
                    phase = .live(last: sequence)
                    return .deliver
                }
                phase = .awaitingSnapshot(buffer: [(sequence, data)])
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

    private struct SequenceOnly: Decodable { var sequence: UInt64 }

    static func sequence(of data: Data) -> UInt64? {
        (try? PayloadCodec.decode(SequenceOnly.self, from: data))?.sequence
    }
}
