import Foundation

/// A store whose data is one `State` value (WordPressFlux's `StatefulStore`, PlanGrid's state
/// struct). Every assignment to ``state`` notifies state observers with the old and the new
/// value and emits a change; ``transaction(_:)`` groups several changes into one notification.
open class StatefulStore<State>: Store, @unchecked Sendable {
    private var storedState: State
    private var transactionDepth = 0
    private let stateObservers = ObserverList<(old: State, new: State)>()

    public init(initialState: State, dispatcher: Dispatcher = .global) {
        storedState = initialState
        super.init(dispatcher: dispatcher)
    }

    /// The current state. Setting it outside a transaction notifies at once.
    public var state: State {
        get { storedState }
        set {
            let old = storedState
            storedState = newValue
            if transactionDepth == 0 { stateChanged(from: old) }
        }
    }

    /// Changes the state in several steps and notifies exactly once, with the state from before
    /// the first step and after the last.
    public func transaction<T>(_ body: (inout State) throws -> T) rethrows -> T {
        let old = storedState
        transactionDepth += 1
        defer {
            transactionDepth -= 1
            if transactionDepth == 0 { stateChanged(from: old) }
        }
        return try body(&storedState)
    }

    /// Observes state changes with the old and new values; goes when the receipt is released.
    public func onStateChange(_ handler: @escaping ((old: State, new: State)) -> Void) -> Receipt {
        stateObservers.add(handler)
    }

    private func stateChanged(from old: State) {
        stateObservers.notify((old, storedState))
        emitChange()
    }
}
