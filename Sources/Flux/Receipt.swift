import Foundation

/// Keeps a subscription alive: when the receipt is released, the observer (or query) is removed.
public final class Receipt: Sendable {
    private let cancellation: @Sendable () -> Void

    init(_ cancellation: @escaping @Sendable () -> Void) {
        self.cancellation = cancellation
    }

    deinit {
        cancellation()
    }
}

/// Observers by token; removal happens when a receipt is released, from any thread.
final class ObserverList<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var observers: [(token: Int, handler: (Value) -> Void)] = []
    private var nextToken = 0

    func add(_ handler: @escaping (Value) -> Void) -> Receipt {
        let token = lock.withLock {
            nextToken += 1
            observers.append((nextToken, handler))
            return nextToken
        }
        return Receipt { [weak self] in self?.remove(token) }
    }

    private func remove(_ token: Int) {
        lock.withLock { observers.removeAll { $0.token == token } }
    }

    func notify(_ value: Value) {
        // Call outside the lock: a handler may add or release observers.
        let handlers = lock.withLock { observers.map(\.handler) }
        for handler in handlers { handler(value) }
    }

    var count: Int { lock.withLock { observers.count } }
}
