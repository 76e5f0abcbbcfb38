import BoardKit
import BusCore
import DequeModule
import Flux
import Foundation

/// Makes a ``StatefulStore`` reachable over the bus: actions dispatched by other processes are
/// decoded by name and dispatched to it in arrival order, then acknowledged; every state change
/// is published with the next sequence number to the store's watchers. Optionally persistent
/// and, for a ``QueryStore``, queryable by other boards.
///
/// Host it in the owning board with `board.host(storeHost)`; like its store, it runs on that
/// board's socket thread.
///
/// A dispatch is all or nothing for the hosted store (see ``StatefulStore/stage(_:commit:)``):
/// give the store a dispatcher of its own, since other stores that listen on the same dispatcher
/// would apply a remote action that the hosted store then refuses.
public final class StoreHost<State: Codable & Sendable>: StoreEndpoint, @unchecked Sendable {
    public let storeName: String
    public let store: StatefulStore<State>
    private var decoders: [String: (Data) throws -> any Action] = [:]
    /// The payload schema of each action, and the state's (made once, when named).
    private var actionSchemas: [String: PayloadSchema] = [:]
    private lazy var stateSchema = PayloadSchema.of(State.self)
    private(set) var sequence: UInt64 = 0
    private var publisher: StorePublisher?
    private var receipt: Receipt?
    private let persistence: StorePersistence?
    /// A dispatched action's change, saved and numbered, until observers are told of it.
    private var committed: Data?
    /// Recent dispatch ids of a store that is not persistent (bounded), so retries are not applied
    /// twice (or refused once and then applied).
    private var recentDispatches: [String: StorePersistence.Outcome] = [:]
    private var recentOrder = Deque<String>()
    var queries: QueryLeases?

    /// How many dispatch ids a store kept in memory remembers.
    static var recentDispatchLimit: Int { 10_000 }

    /// - Parameter persistence: where to keep state and journal; nil for a store kept in memory.
    public init(name: String, store: StatefulStore<State>, persistence: StorePersistence? = nil) throws {
        storeName = name
        self.store = store
        self.persistence = persistence
        if let saved = try persistence?.load() {
            let snapshot = try PayloadCodec.decode(StoreSnapshot<State>.self, from: saved)
            store.state = snapshot.state
            sequence = snapshot.sequence
        }
        receipt = store.onStateChange { [weak self] change in self?.stateChanged() }
    }

    /// Lets remote clients dispatch `A` under `name` (its JSON payload is decoded as `A`).
    public func action<A: Action & Decodable>(_ type: A.Type, named name: String) {
        decoders[name] = { try PayloadCodec.decode(A.self, from: $0) }
        actionSchemas[name] = PayloadSchema.of(A.self)
    }

    /// Its state's shape and its actions' payloads (`introspect`, `busctl stores`).
    public var schema: StoreSchema? { StoreSchema(state: stateSchema, actions: actionSchemas) }

    /// The current state as a ``StoreSnapshot`` payload.
    public func snapshot() throws -> Data {
        try PayloadCodec.encode(StoreSnapshot(store: storeName, sequence: sequence, state: store.state))
    }

    public func attach(_ publisher: StorePublisher) {
        self.publisher = publisher
    }

    public func handle(_ request: StoreRequest) throws -> Data {
        switch (request.kind, request.operation) {
        case (.dispatch, _):
            return try PayloadCodec.encode(dispatch(request))
        case (_, StoreOperation.state):
            return try snapshot()
        case (_, StoreOperation.holderGone) where queries == nil:
            // Every owner hears when any board leaves; a store without queries has nothing to release.
            return Data()
        case (_, StoreOperation.activateQuery), (_, StoreOperation.releaseQuery), (_, StoreOperation.holderGone):
            guard let queries else { throw BusError(.unknownAction, "store '\(storeName)' takes no queries") }
            return try queries.handle(request, store: storeName)
        default:
            throw BusError(.malformed, "unknown store operation '\(request.operation)'")
        }
    }

    /// Applies a dispatched action all or nothing: the new state and the action's journal row are
    /// written in one transaction *before* the store's observers and watchers hear of the change
    /// or the sender is acknowledged; when the write fails the state goes back to what it was and
    /// the sender gets `storageFailed`, so a retry with the same id is applied exactly once.
    private func dispatch(_ request: StoreRequest) throws -> DispatchAck {
        let name = request.operation
        if let id = request.dispatchID { try HeaderCodec.checkDispatchID(id) }
        let dispatchID = request.dispatchID ?? UUID().uuidString
        let lockWait = Self.lockWait(for: request.timeout)
        switch try outcome(of: dispatchID, lockWait: lockWait) {
        case .applied(let previous): return DispatchAck(store: storeName, sequence: previous, applied: false)
        case .refused(let action, let reason): throw refusal(action, reason)
        case nil: break
        }
        guard let decode = decoders[name] else {
            let known = decoders.keys.sorted().joined(separator: ", ")
            throw BusError(.unknownAction, "store '\(storeName)' has no action '\(name)' (it has: \(known))")
        }
        let action: any Action
        do {
            action = try decode(request.payload)
        } catch let error as BusError where error.code == .typeMismatch {
            // Say what the action takes, as `call` says what a command takes.
            guard let expected = actionSchemas[name]?.summary else { throw error }
            throw BusError(.typeMismatch, "\(error.message); '\(name)' expects \(expected)")
        }
        let journal = (id: dispatchID, action: name, payload: request.payload)
        let changed: Bool
        do {
            changed = try store.stage({ try store.dispatcher.dispatch(action) }) { _, new in
                let next = sequence + 1
                let payload = try PayloadCodec.encode(StoreSnapshot(store: storeName, sequence: next, state: new))
                try persistence?.save(sequence: next, snapshot: payload, dispatch: journal, lockWait: lockWait)
                sequence = next
                committed = payload
            }
        } catch let refused as Refusal {
            // Nothing applied, no sequence spent; the id is journaled as refused, with the reason
            // as a sender is shown it (one line, at most 1 000 characters).
            let reason = refused.reason.escapedForDisplay(limit: 1_000)
            try persistence?.saveRefusal(sequence: sequence, dispatch: journal, reason: reason, lockWait: lockWait)
            remember(dispatchID, .refused(action: name, reason: reason))
            throw refusal(name, reason)
        } catch let error as BusError {
            throw error
        } catch {
            // Not a refusal: a fault of the handler. Nothing applied, nothing remembered: a retry
            // runs it again.
            throw BusError(.handlerFailed, "store '\(storeName)' failed on '\(name)': \(error)")
        }
        if !changed {
            // The action changed nothing: record it anyway, so that a retry is recognised.
            try persistence?.save(sequence: sequence, snapshot: nil, dispatch: journal, lockWait: lockWait)
        }
        remember(dispatchID, .applied(sequence))
        return DispatchAck(store: storeName, sequence: sequence)
    }

    private func refusal(_ action: String, _ reason: String) -> BusError {
        BusError(.rejected, "store '\(storeName)' refused '\(action)': \(reason)")
    }

    /// How long a write may wait for a lock: a little less than the sender waits (the request
    /// spent some of its time on the way here), and never more.
    static func lockWait(for timeout: Duration?) -> Duration {
        guard let timeout else { return StorePersistence.defaultLockWait }
        return max(.zero, min(timeout - .milliseconds(200), timeout * 0.8))
    }

    private func outcome(of id: String, lockWait: Duration) throws -> StorePersistence.Outcome? {
        if let persistence { return try persistence.outcome(ofDispatch: id, lockWait: lockWait) }
        return recentDispatches[id]
    }

    private func remember(_ id: String, _ outcome: StorePersistence.Outcome) {
        guard persistence == nil else { return }
        recentDispatches[id] = outcome
        recentOrder.append(id)
        if recentOrder.count > Self.recentDispatchLimit { recentDispatches[recentOrder.removeFirst()] = nil }
    }

    /// Every state change, once observers may hear of it. A dispatched action's change was saved
    /// (with its journal row) and numbered before this: it is only published. Any other change
    /// (the owning board's own) gets the next number, is saved, and published.
    private func stateChanged() {
        if let payload = committed {
            committed = nil
            publisher?.send(payload)
            return
        }
        sequence += 1
        guard let payload = try? snapshot() else { return }
        if let persistence {
            do {
                try persistence.save(sequence: sequence, snapshot: payload, dispatch: nil)
            } catch {
                FileHandle.standardError.write(Data("store \(storeName): cannot save state: \(error)\n".utf8))
            }
        }
        publisher?.send(payload)
    }
}

/// The earlier name of ``StoreHost``.
@available(*, deprecated, renamed: "StoreHost")
public typealias RemoteStore = StoreHost
