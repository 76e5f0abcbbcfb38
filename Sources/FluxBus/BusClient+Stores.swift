import BoardKit
import BusCore
import Foundation

/// Flux stores over the bus: dispatch, state, watch, queries.
extension BusClient {
    /// Dispatches an action (JSON) to a store; returns once its owner applied it. A `dispatchID`
    /// (1 to 255 bytes of UTF-8; an empty or longer one is refused with `badArgument` before
    /// anything is sent) makes retries safe: an action with an id the store has seen is not
    /// applied again.
    ///
    /// With `retries`, the dispatch is sent again while the store's owner is not running, and
    /// after an owner that ended before it answered (`outcomeUnknown`), until the timeout, under
    /// one dispatch id (made up when none is given), so it is applied once.
    public func dispatch(
        store: String, action: String, payload: Data, dispatchID: String? = nil, scope: Scope = .root,
        timeout: Duration = BusClient.defaultTimeout, retries: Bool = false
    ) async throws -> DispatchAck {
        let id = dispatchID ?? (retries ? UUID().uuidString : nil)
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .dispatch, target: store, scope: scope, typeName: action, dispatchID: id), payload: payload)
        let reply = try await request(envelope, timeout: timeout, retryingOn: retries ? BusClient.retryable.union([.outcomeUnknown]) : [])
        return try PayloadCodec.decode(DispatchAck.self, from: reply.payload)
    }

    /// A store's current state as a `StoreSnapshot` JSON payload.
    public func storeState(_ store: String, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> Data {
        try await storeRequest(store, StoreOperation.state, scope: scope, timeout: timeout)
    }

    /// Watches a store: first a snapshot, then every change in order. When changes were lost (this
    /// client's queue was full), a new snapshot comes next, marked `isSnapshot`. The subscription
    /// ends when the stream's consumer stops.
    public func watch(_ store: String, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) -> AsyncThrowingStream<
        StoreUpdate, any Error
    > {
        let (stream, continuation) = AsyncThrowingStream<StoreUpdate, any Error>.makeStream(bufferingPolicy: .unbounded)
        let watch = StoreWatch(store: store, scope: scope, continuation: continuation) { [weak self] watch in
            guard let self else { return }
            Task {
                do {
                    let snapshot = try await self.whileWatched(watch) {
                        try await self.storeRequest(store, StoreOperation.state, scope: scope, timeout: timeout)
                    }
                    if let snapshot { watch.snapshot(snapshot) }
                } catch {
                    continuation.finish(throwing: error)
                }
            }
        }
        subscribe(watch, until: continuation)
        Task {
            do {
                // Registered before subscribing, so no change after the snapshot is missed.
                watch.snapshot(try await storeRequest(store, StoreOperation.subscribe, scope: scope, timeout: timeout))
            } catch {
                watch.fail(error)
            }
        }
        return stream
    }

    /// Holds a query on a store (only boards can: the lease lasts as long as the holder lives).
    public func activateQuery(store: String, query: Data, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws
        -> QueryLease
    {
        let reply = try await storeRequest(store, StoreOperation.activateQuery, payload: query, scope: scope, timeout: timeout)
        return try PayloadCodec.decode(QueryLease.self, from: reply)
    }

    /// Releases a held query.
    public func releaseQuery(_ lease: QueryLease, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws {
        _ = try await storeRequest(lease.store, StoreOperation.releaseQuery, payload: PayloadCodec.encode(lease), scope: scope, timeout: timeout)
    }

    /// Sends a `store` operation (PROTOCOL 5.8) with a JSON payload and returns the owner's answer
    /// as it came: for tools that print it (busctl) rather than decode it.
    public func storeRequest(_ store: String, _ operation: String, payload: Data = Data(), scope: Scope, timeout: Duration) async throws -> Data {
        let envelope = Envelope(header: EnvelopeHeader(kind: .store, target: store, scope: scope, typeName: operation), payload: payload)
        return try await request(envelope, timeout: timeout).payload
    }
}

/// Flux stores of other boards, from inside a board (in its scope).
extension BoardContext {
    /// Dispatches an action to a store another board owns; returns once it is applied.
    @discardableResult
    public func dispatch<Payload: Encodable>(
        _ action: Payload, named name: String, to store: String, dispatchID: String? = nil
    ) async throws -> DispatchAck {
        try await client.dispatch(store: store, action: name, payload: PayloadCodec.encode(action), dispatchID: dispatchID, scope: scope)
    }

    /// Holds a query on a store another board owns, until released or until this board leaves.
    public func activateQuery<Query: Encodable>(_ query: Query, on store: String) async throws -> QueryLease {
        try await client.activateQuery(store: store, query: PayloadCodec.encode(query), scope: scope)
    }

    /// Releases a query this board holds.
    public func releaseQuery(_ lease: QueryLease) async throws {
        try await client.releaseQuery(lease, scope: scope)
    }

    /// Watches a store's state: a snapshot, then every change in order.
    public func watch(_ store: String) -> AsyncThrowingStream<StoreUpdate, any Error> {
        client.watch(store, scope: scope)
    }
}
