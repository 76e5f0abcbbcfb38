import Foundation

/// A stateful store that also knows which queries are active (WordPressFlux's `QueryStore`):
/// components activate a query and keep its receipt; the store decides what to fetch in
/// ``queriesChanged()``, which runs when the set of active queries changes, never on a state change.
open class QueryStore<State, Query>: StatefulStore<State>, @unchecked Sendable {
    private let lock = NSLock()
    private var queries: [(token: Int, query: Query)] = []
    private var nextToken = 0

    public override init(initialState: State, dispatcher: Dispatcher = .global) {
        super.init(initialState: initialState, dispatcher: dispatcher)
    }

    /// The active queries, in activation order.
    public var activeQueries: [Query] {
        lock.withLock { queries.map(\.query) }
    }

    /// Activates a query until the receipt is released.
    public func activate(_ query: Query) -> Receipt {
        let token = lock.withLock {
            nextToken += 1
            queries.append((nextToken, query))
            return nextToken
        }
        queriesChanged()
        return Receipt { [weak self] in self?.release(token) }
    }

    private func release(_ token: Int) {
        let removed = lock.withLock {
            let before = queries.count
            queries.removeAll { $0.token == token }
            return queries.count != before
        }
        if removed { queriesChanged() }
    }

    /// Called when a query is activated or released; override to fetch what the queries need.
    open func queriesChanged() {}
}
