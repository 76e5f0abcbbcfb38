/// The kind of an envelope: the one byte the broker switches on.
///
/// The values are part of the wire protocol (docs/PROTOCOL.md); never renumber them.
public enum MessageKind: UInt8, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// board → broker: "I am board X", payload ``Registration``. Answered by `reply` or `error`.
    case register = 1
    /// board → broker: graceful goodbye; the broker forgets the board.
    case unregister = 2
    /// both ways, no reply: liveness.
    case heartbeat = 3
    /// any → broker → board: activate the target with an input (Boardy's `nextToBoard` / `activate`).
    case activate = 4
    /// any → broker → board: an interaction command, answered by the board.
    case command = 5
    /// board → broker: `sendToMotherboard(output)`; the broker runs the matching flows.
    case output = 6
    /// any → broker → subscribers: `sendAction`, delivered to every board subscribed to that name.
    case action = 7
    /// board → broker: `complete(isDone)`; the board leaves the registry.
    case complete = 8
    /// client → broker: a question for the broker itself (`list`, `status`, `flows`…).
    case control = 9
    /// broker → board: an output matched a flow the board registered with "deliver to me";
    /// the correlation id carries the flow's id, the source the board that produced the output.
    case flowEvent = 10
    /// any → broker → the store's owner: a Flux action for a store; the target is the store's
    /// name, the type name the action's. Answered by the owner with a ``DispatchAck``.
    case dispatch = 11
    /// store traffic; the target is the store's name and the type name the operation
    /// (``StoreOperation``): `state`, `subscribe`, `unsubscribe`, `change`, `query.activate`,
    /// `query.release`, `holder.gone`.
    case store = 12
    /// a successful answer to a request, carrying the request's correlation id.
    case reply = 16
    /// a failed answer: payload is a ``BusError``.
    case error = 17

    public var description: String {
        switch self {
        case .register: "register"
        case .unregister: "unregister"
        case .heartbeat: "heartbeat"
        case .activate: "activate"
        case .command: "command"
        case .output: "output"
        case .action: "action"
        case .complete: "complete"
        case .control: "control"
        case .flowEvent: "flowEvent"
        case .dispatch: "dispatch"
        case .store: "store"
        case .reply: "reply"
        case .error: "error"
        }
    }
}

/// Header flags (a 16-bit field on the wire).
public struct MessageFlags: OptionSet, Sendable, Hashable, Codable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The sender waits for a `reply` or `error` with the same correlation id.
    public static let replyExpected = MessageFlags(rawValue: 1 << 0)
}
