import BoardKit
import BusCore
import DequeModule
import Flux
import Foundation

/// Makes a `StatefulStore` reachable over the bus: actions dispatched by other processes are
/// decoded by name and dispatched to it in arrival order, then acknowledged; every state change
/// is published with the next sequence number to the store's watchers. Optionally persistent
/// and, for a `QueryStore`, queryable by other boards.
///
/// Host it in the owning board with `board.host(storeHost)`; like its store, it runs on that
/// board's socket thread.
///
/// A dispatch is all or nothing for the hosted store (see `StatefulStore/stage(_:commit:)`):
/// give the store a dispatcher of its own, since other stores that listen on the same dispatcher
/// would apply a remote action that the hosted store then refuses.
public final class StoreHost<State: Codable & Sendable>: StoreEndpoint, @unchecked Sendable {
    public let storeName: String
    public let store: StatefulStore<State>
    private let actions: StoreActions
    private lazy var stateSchema = PayloadSchema.of(State.self)
    private(set) var sequence: UInt64 = 0
    private var publisher: StorePublisher?
    private var receipt: Receipt?
    private let persistence: StorePersistence?
    /// A dispatched action's change, saved and numbered, until observers are told of it.
    private var committed: Data?
    var queries: QueryLeases?

    /// `persistence`: where to keep state and journal; nil for a store kept in memory.
    public init(name: String, store: StatefulStore<State>, persistence: StorePersistence? = nil) throws {
        storeName = name
        self.store = store
        self.persistence = persistence
        actions = StoreActions(storeName: name, persistence: persistence)
        if let saved = try persistence?.load() {
            let snapshot = try PayloadCodec.decode(StoreSnapshot<State>.self, from: saved)
            store.state = snapshot.state
            sequence = snapshot.sequence
        }
        receipt = store.onStateChange { [weak self] change in self?.stateChanged() }
    }

    /// Lets remote clients dispatch `A` under `name` (its JSON payload is decoded as `A`).
    /// `ownerOnly`: only the owning board dispatches it (`context.dispatch(_:named:to:)` to its
    /// own store, with the journal and dispatch ids of any dispatch); anyone else is refused
    /// `forbidden`, operators and the broker's own user included.
    public func action<A: Action & Decodable>(_ type: A.Type, named name: String, ownerOnly: Bool = false) {
        actions.register(type, named: name, ownerOnly: ownerOnly)
    }

    /// Declares a query other processes call by name (`busctl query STORE NAME REQUEST`): `answer`
    /// computes the answer from the request on the store's current state, at the owner.
    public func query<Request: Codable & Sendable, Answer: Codable>(
        _ name: String, _ request: Request.Type, answer: @escaping (Request, State) throws -> Answer
    ) {
        actions.register(query: name, request, Answer.self) { [unowned self] in try answer($0, store.state) }
    }

    /// Its state's shape, its actions' payloads and its queries (`introspect`, `busctl stores`).
    public var schema: StoreSchema? {
        StoreSchema(
            state: stateSchema, actions: actions.schemas, queries: actions.querySchemas.isEmpty ? nil : actions.querySchemas,
            ownerActions: actions.ownerActionList)
    }

    /// The current state as a `StoreSnapshot` payload.
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
        case (_, StoreOperation.query):
            return try actions.query(request.payload)
        case (_, StoreOperation.holderGone) where queries == nil:
            // Every owner hears when any board leaves; a store without queries has nothing to release.
            return Data()
        case (_, StoreOperation.activateQuery), (_, StoreOperation.releaseQuery), (_, StoreOperation.holderGone):
            guard let queries else { throw BusError(.unknownAction, "store '\(storeName)' takes no queries") }
            return try queries.handle(request, store: storeName)
        case (_, StoreOperation.get), (_, StoreOperation.list):
            throw BusError(.unknownAction, "store '\(storeName)' is not keyed: read its whole state with 'state'")
        default:
            throw BusError(.malformed, "unknown store operation '\(request.operation.escapedForDisplay())'")
        }
    }

    /// Applies a dispatched action all or nothing (``StoreActions``): the new state and the
    /// action's journal row are written in one transaction before anyone hears of the change.
    private func dispatch(_ request: StoreRequest) throws -> DispatchAck {
        try actions.dispatch(request, sequence: { sequence }) { action, journal, lockWait in
            try store.stage({ try store.dispatcher.dispatch(action) }) { _, new in
                let next = sequence + 1
                let payload = try PayloadCodec.encode(StoreSnapshot(store: storeName, sequence: next, state: new))
                try persistence?.save(sequence: next, snapshot: payload, dispatch: journal, lockWait: lockWait)
                sequence = next
                committed = payload
            }
        }
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
