/// Something that happened, sent through a ``Dispatcher`` to every store (WordPressFlux's `Action`).
/// Only stores change their data, and only in response to actions.
public protocol Action: Sendable {}

/// Errors of the in-process Flux layer.
public enum FluxError: Error, Equatable, Sendable {
    /// `dispatch` was called while the dispatcher was delivering another action (a store
    /// dispatching from `onDispatch`): Flux forbids cascades.
    case dispatchInProgress
}

/// What a store throws from ``Store/onDispatch(_:)`` to refuse an action (a cancel of an order
/// already paid): the dispatch stops there. A ``StatefulStore`` dispatching through
/// ``StatefulStore/stage(_:commit:)`` (as a store hosted on the bus does) keeps its state as it
/// was; over the bus the sender gets `rejected` with `reason`, and a retry with the same dispatch
/// id gets the same refusal.
public struct Refusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// Why, for the sender (one sentence).
    public var reason: String

    public init(_ reason: String) { self.reason = reason }

    public var description: String { reason }
}
