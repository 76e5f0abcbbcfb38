import Foundation

/// A token naming a registered dispatch callback (WordPressFlux's `DispatchToken`).
public struct DispatchToken: Hashable, Sendable {
    let value: Int
}

/// Delivers every action to every registered store, in registration order
/// (WordPressFlux's `ActionDispatcher`). Dispatching from inside a dispatch is refused.
public final class Dispatcher: @unchecked Sendable {
    /// The process-wide dispatcher that stores use unless given another.
    public static let global = Dispatcher()

    private let lock = NSLock()
    private var callbacks: [(token: DispatchToken, callback: (any Action) throws -> Void)] = []
    private var nextToken = 0
    private var dispatching = false

    public init() {}

    /// Registers a callback for every action; keep the token to unregister. A callback that
    /// throws (a store's ``Refusal``) stops the dispatch: later callbacks do not get the action.
    public func register(_ callback: @escaping (any Action) throws -> Void) -> DispatchToken {
        lock.withLock {
            nextToken += 1
            let token = DispatchToken(value: nextToken)
            callbacks.append((token, callback))
            return token
        }
    }

    public func unregister(_ token: DispatchToken) {
        lock.withLock { callbacks.removeAll { $0.token == token } }
    }

    /// Sends `action` to every registered callback, synchronously, in registration order.
    /// Throws ``FluxError/dispatchInProgress`` when called during another dispatch, and what a
    /// callback throws (a store's ``Refusal``), which stops the dispatch there.
    public func dispatch(_ action: any Action) throws {
        let targets = try lock.withLock {
            guard !dispatching else { throw FluxError.dispatchInProgress }
            dispatching = true
            return callbacks.map(\.callback)
        }
        defer { lock.withLock { dispatching = false } }
        for callback in targets { try callback(action) }
    }

    /// Whether a dispatch is under way.
    public var isDispatching: Bool { lock.withLock { dispatching } }
}
