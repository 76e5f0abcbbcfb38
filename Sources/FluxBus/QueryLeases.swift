import BoardKit
import BusCore
import Flux
import Foundation

/// Queries held on a `QueryStore` by other boards. A query lives until its holder releases it
/// or the holder leaves the bus (the broker sends `holder.gone`): the holder's liveness is the lease.
final class QueryLeases: @unchecked Sendable {
    private let activate: (Data) throws -> Receipt
    private var leases: [String: [Int: Receipt]] = [:]
    private var nextLease = 0

    init(activate: @escaping (Data) throws -> Receipt) {
        self.activate = activate
    }

    func handle(_ request: StoreRequest, store: String) throws -> Data {
        switch request.operation {
        case StoreOperation.activateQuery:
            guard !request.sender.isEmpty else {
                throw BusError(.notRegistered, "only a registered board can hold a query: its liveness is the lease")
            }
            let receipt = try activate(request.payload)
            nextLease += 1
            leases[request.sender, default: [:]][nextLease] = receipt
            return try PayloadCodec.encode(QueryLease(store: store, lease: nextLease))
        case StoreOperation.releaseQuery:
            let lease = try PayloadCodec.decode(QueryLease.self, from: request.payload)
            guard leases[request.sender]?.removeValue(forKey: lease.lease) != nil else {
                throw BusError(.badArgument, "no query \(lease.lease) held by '\(request.sender)'")
            }
            return try PayloadCodec.encode(Delivery(delivered: 1))
        default:  // holder.gone: releasing the receipts releases the queries
            let released = leases.removeValue(forKey: request.sender)?.count ?? 0
            return try PayloadCodec.encode(Delivery(delivered: released))
        }
    }

    var count: Int { leases.values.reduce(0) { $0 + $1.count } }
}

extension StoreHost {
    /// Makes a `QueryStore` reachable, with queries that other boards hold (decoded as `Query`).
    public convenience init<Query: Decodable>(
        name: String, queryStore: QueryStore<State, Query>, persistence: StorePersistence? = nil
    ) throws {
        try self.init(name: name, store: queryStore, persistence: persistence)
        queries = QueryLeases { [weak queryStore] payload in
            guard let queryStore else { throw BusError(.noSuchStore, "store is gone") }
            return queryStore.activate(try PayloadCodec.decode(Query.self, from: payload))
        }
    }
}
