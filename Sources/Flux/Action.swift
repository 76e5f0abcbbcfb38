/// Something that happened, sent through a ``Dispatcher`` to every store (WordPressFlux's `Action`).
/// Only stores change their data, and only in response to actions.
public protocol Action: Sendable {}

/// Errors of the in-process Flux layer.
public enum FluxError: Error, Equatable, Sendable {
    /// `dispatch` was called while the dispatcher was delivering another action (a store
    /// dispatching from `onDispatch`): Flux forbids cascades.
    case dispatchInProgress
}
