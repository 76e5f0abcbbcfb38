import BoardKit
import BusCore
import DequeModule
import Flux
import Foundation

/// What every hosted store (``StoreHost``, ``KeyedStoreHost``) does around its own change: the
/// actions it takes by name and their decoding, the dispatch ids it has seen (journaled by its
/// persistence, else remembered in memory), refusals, and its typed queries.
final class StoreActions: @unchecked Sendable {
    let storeName: String
    let persistence: StorePersistence?
    private var decoders: [String: (Data) throws -> any Action] = [:]
    /// The payload schema of each action (made once, when named).
    private(set) var schemas: [String: PayloadSchema] = [:]
    /// The actions only the owning board may dispatch (its own bookkeeping).
    private(set) var ownerOnly: Set<String> = []
    var ownerActionList: [String]? { ownerOnly.isEmpty ? nil : ownerOnly.sorted() }
    private var queries: [String: (Data) throws -> Data] = [:]
    private(set) var querySchemas: [String: BoardSchemas.Command] = [:]
    /// Recent dispatch ids of a store that is not persistent (bounded), so retries are not applied
    /// twice (or refused once and then applied).
    private var recentDispatches: [String: StorePersistence.Outcome] = [:]
    private var recentOrder = Deque<String>()

    /// How many dispatch ids a store kept in memory remembers.
    static var recentDispatchLimit: Int { 10_000 }

    init(storeName: String, persistence: StorePersistence?) {
        self.storeName = storeName
        self.persistence = persistence
    }

    func register<A: Action & Decodable>(_: A.Type, named name: String, ownerOnly: Bool) {
        decoders[name] = { try PayloadCodec.decode(A.self, from: $0) }
        schemas[name] = PayloadSchema.of(A.self)
        if ownerOnly { self.ownerOnly.insert(name) } else { self.ownerOnly.remove(name) }
    }

    func register<Request: Codable & Sendable, Answer: Codable>(
        query name: String, _: Request.Type, _: Answer.Type, answer: @escaping (Request) throws -> Answer
    ) {
        queries[name] = { payload in
            let query = try PayloadCodec.decode(StoreQuery<Request>.self, from: payload)
            return try PayloadCodec.encode(answer(query.request))
        }
        querySchemas[name] = BoardSchemas.Command(request: PayloadSchema.of(Request.self), reply: PayloadSchema.of(Answer.self))
    }

    private struct QueryName: Decodable { var name: String }

    /// Answers a `query` with the named query's answer, computed now, on the store's thread.
    func query(_ payload: Data) throws -> Data {
        let name = try PayloadCodec.decode(QueryName.self, from: payload).name
        guard let answer = queries[name] else {
            let known = queries.keys.sorted().joined(separator: ", ")
            throw BusError(.unknownAction, "store '\(storeName)' has no query '\(name.escapedForDisplay())' (it has: \(known))")
        }
        do {
            return try answer(payload)
        } catch let error as BusError where error.code == .typeMismatch {
            guard let expected = querySchemas[name]?.request.summary else { throw error }
            throw BusError(.typeMismatch, "\(error.message); query '\(name)' expects \(expected)")
        } catch let error as BusError {
            throw error
        } catch let refused as Refusal {
            throw BusError(.rejected, "store '\(storeName)' refused query '\(name)': \(refused.reason.escapedForDisplay(limit: 1_000))")
        } catch {
            throw BusError(.handlerFailed, "store '\(storeName)' failed on query '\(name)': \(error)")
        }
    }

    /// Applies a dispatched action all or nothing: `apply` makes the store's change and writes it
    /// with the action's journal entry *before* anyone hears of it, and returns whether anything
    /// changed; when it fails nothing is applied and the sender gets the error (`storageFailed`),
    /// so a retry with the same id is applied exactly once. A ``Refusal`` spends no sequence
    /// number and is remembered with the id; a fault of the handler is not (a retry runs it again).
    func dispatch(
        _ request: StoreRequest, sequence: () -> UInt64, apply: (_ action: any Action, _ journal: JournalEntry, _ lockWait: Duration) throws -> Bool
    ) throws -> DispatchAck {
        let name = request.operation
        // Before the id is looked up: another sender learns nothing of the owner's dispatches.
        guard request.fromOwner || !ownerOnly.contains(name) else {
            throw BusError(.forbidden, "store '\(storeName)' takes '\(name)' from its owner only: \(senderNamed(request)) may not dispatch it")
        }
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
            guard let expected = schemas[name]?.summary else { throw error }
            throw BusError(.typeMismatch, "\(error.message); '\(name)' expects \(expected)")
        }
        let journal = JournalEntry(id: dispatchID, action: name, payload: request.payload)
        let changed: Bool
        do {
            changed = try apply(action, journal, lockWait)
        } catch let refused as Refusal {
            // Nothing applied, no sequence spent; the id is journaled as refused, with the reason
            // as a sender is shown it (one line, at most 1 000 characters).
            let reason = refused.reason.escapedForDisplay(limit: 1_000)
            try persistence?.saveRefusal(sequence: sequence(), dispatch: journal, reason: reason, lockWait: lockWait)
            remember(dispatchID, .refused(action: name, reason: reason))
            throw refusal(name, reason)
        } catch let error as BusError {
            throw error
        } catch {
            throw BusError(.handlerFailed, "store '\(storeName)' failed on '\(name)': \(error)")
        }
        if !changed {
            // The action changed nothing: record it anyway, so that a retry is recognised.
            try persistence?.save(sequence: sequence(), snapshot: nil, dispatch: journal, lockWait: lockWait)
        }
        remember(dispatchID, .applied(sequence()))
        return DispatchAck(store: storeName, sequence: sequence())
    }

    private func senderNamed(_ request: StoreRequest) -> String {
        request.sender.isEmpty ? "a client that is not a board" : "board '\(request.sender.escapedForDisplay())'"
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
}
