import Foundation

/// A store whose data is one `State` value (WordPressFlux's `StatefulStore`, PlanGrid's state
/// struct). Every assignment to ``state`` notifies state observers with the old and the new
/// value and emits a change; ``transaction(_:)`` groups several changes into one notification.
open class StatefulStore<State>: Store, @unchecked Sendable {
    private var storedState: State
    private var transactionDepth = 0
    /// Whether the state was assigned while notifications were held (in a transaction or a stage).
    private var assignedWhileHeld = false
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
            if transactionDepth == 0 { stateChanged(from: old) } else { assignedWhileHeld = true }
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
        assignedWhileHeld = true
        return try body(&storedState)
    }

    /// Runs `body`, which may change the state by any path (dispatched actions, assignments,
    /// transactions), with every notification held, then offers the change to `commit` before
    /// anyone hears of it: when `commit` (or `body`) throws, the state goes back to what it was
    /// and no observer is notified; otherwise observers are notified once, as after a
    /// transaction. `commit` is called only when the state was assigned.
    ///
    /// This is how a change is made durable before it is visible: `commit` writes it to storage,
    /// and a failed write leaves the store as if the change had never been made.
    /// - Returns: whether the state was assigned (and committed).
    @discardableResult
    public func stage(_ body: () throws -> Void, commit: (_ old: State, _ new: State) throws -> Void) throws -> Bool {
        let old = storedState
        let outerAssigned = assignedWhileHeld
        assignedWhileHeld = false
        transactionDepth += 1
        defer { assignedWhileHeld = outerAssigned || assignedWhileHeld }
        do {
            try body()
            if assignedWhileHeld { try commit(old, storedState) }
        } catch {
            storedState = old
            assignedWhileHeld = false
            transactionDepth -= 1
            throw error
        }
        transactionDepth -= 1
        guard assignedWhileHeld else { return false }
        if transactionDepth == 0 { stateChanged(from: old) }
        return true
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
