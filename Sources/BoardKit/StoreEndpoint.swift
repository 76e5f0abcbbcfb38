import BusCore
import FoundationEssentials
import Glibc

/// A store a board hosts for other processes (the `Flux` library's `StoreHost` is one).
///
/// The board hands it every `dispatch` and `store` message addressed to its name, on the socket
/// thread, one at a time in arrival order, and answers with what it returns.
public protocol StoreEndpoint: AnyObject, Sendable {
    /// The name other processes use (`busctl dispatch NAME …`).
    var storeName: String { get }
    /// Handles a request; returns the reply's payload or throws a `BusError`.
    func handle(_ request: StoreRequest) throws -> Data
    /// Called when the board starts, before it registers: from then on, `publisher` sends changes
    /// to subscribers (the broker forwards them once the registration names the store).
    func attach(_ publisher: StorePublisher)
    /// The store's state and action payloads, for `introspect` and `busctl stores` (nil: not said).
    var schema: StoreSchema? { get }
}

extension StoreEndpoint {
    public var schema: StoreSchema? { nil }
}

/// A `dispatch` or `store` message, as a store endpoint sees it.
public struct StoreRequest: Sendable {
    /// `dispatch` (then `operation` is the action name) or `store` (a `StoreOperation`).
    public var kind: MessageKind
    public var operation: String
    /// A dispatch's idempotency key, when the sender gave one.
    public var dispatchID: String?
    /// The board that sent it (in the scope it sent from); empty for a client that is not a board.
    /// The broker writes it, whatever the sender said.
    public var sender: String
    /// Whether the owning board itself sent it (its own id, from its own scope): a store's
    /// owner-only actions are applied only then.
    public var fromOwner: Bool
    public var payload: Data
    /// How long the sender waits for the answer, from the header; nil when it set no deadline.
    public var timeout: Duration?

    public init(
        kind: MessageKind, operation: String, dispatchID: String? = nil, sender: String, fromOwner: Bool = false, payload: Data,
        timeout: Duration? = nil
    ) {
        self.kind = kind
        self.operation = operation
        self.dispatchID = dispatchID
        self.sender = sender
        self.fromOwner = fromOwner
        self.payload = payload
        self.timeout = timeout
    }
}

/// Sends a store's changes to the broker, which forwards them to the store's subscribers.
public struct StorePublisher: Sendable {
    let publish: @Sendable (Data) -> Void

    public init(_ publish: @escaping @Sendable (Data) -> Void) {
        self.publish = publish
    }

    /// Publishes a change (a `StoreSnapshot` payload).
    public func send(_ snapshot: Data) {
        publish(snapshot)
    }
}
