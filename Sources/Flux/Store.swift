import Foundation

/// Holds data and the logic that changes it in response to actions (WordPressFlux's `Store`).
///
/// Subclasses override ``onDispatch(_:)`` and call ``emitChange()`` after a change; observers
/// registered with ``onChange(_:)`` are called until their ``Receipt`` is released. Like
/// WordPressFlux's stores (main thread only), a store is used from one thread or executor at a
/// time; a board's stores live on its socket thread.
open class Store: @unchecked Sendable {
    public let dispatcher: Dispatcher
    private var token: DispatchToken?
    private let changeObservers = ObserverList<Void>()

    public init(dispatcher: Dispatcher = .global) {
        self.dispatcher = dispatcher
        token = dispatcher.register { [weak self] action in try self?.onDispatch(action) }
    }

    deinit {
        if let token { dispatcher.unregister(token) }
    }

    /// Called for every dispatched action; the default does nothing. Throw a ``Refusal`` to refuse
    /// the action (an override that never refuses need not be `throws`).
    open func onDispatch(_ action: any Action) throws {}

    /// Observes changes; the observer goes when the receipt is released.
    public func onChange(_ handler: @escaping () -> Void) -> Receipt {
        changeObservers.add { _ in handler() }
    }

    /// Tells every observer that the store changed.
    public func emitChange() {
        changeObservers.notify(())
    }

    /// How many change observers are registered.
    public var changeObserverCount: Int { changeObservers.count }
}
