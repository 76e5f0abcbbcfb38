import BusCore

/// An interaction command a board answers (Boardy's `BoardCommandModel`), with its reply type.
public protocol BoardCommand: BusPayload {
    associatedtype Reply: BusPayload
    /// The command's name on the wire and in `busctl call ID NAME`. Defaults to the type's name.
    static var commandName: String { get }
}

extension BoardCommand {
    public static var commandName: String { busTypeName }
}

/// An action that bubbles to the motherboard and reaches every board subscribed to its name
/// (Boardy's `sendAction` / `BoardFlowAction`).
public protocol BoardAction: BusPayload {
    /// The action's name on the wire and in `busctl action NAME`. Defaults to the type's name.
    static var actionName: String { get }
}

extension BoardAction {
    public static var actionName: String { busTypeName }
}

/// A board's typed address, as an interface library declares it: its id and input type, so
/// callers activate it without stringly-typed ids.
public struct BoardDestination<Input: BusPayload>: Sendable, Hashable {
    public let id: BoardID
    public init(_ id: BoardID) { self.id = id }
}
