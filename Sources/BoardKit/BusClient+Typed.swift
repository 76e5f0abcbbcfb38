import BusCore
import FoundationEssentials
import Glibc

/// Type-safe operations: payloads are `Codable` values, type names come from their types.
extension BusClient {
    /// Sends a command to a live board and decodes its reply (`interactWithOtherBoard`). The
    /// command travels in `format` (by default the client's ``payloadFormat``); the reply is
    /// decoded in the content type it says it has.
    public nonisolated(nonsending) func interact<Command: BoardCommand>(
        with board: BoardID, _ command: Command, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout,
        retries: Bool = false, format: PayloadFormat? = nil
    ) async throws -> Command.Reply {
        let format = format ?? payloadFormat
        let reply = try await callForEnvelope(
            board, command: Command.commandName, payload: PayloadCodec.encode(command, format: format), contentType: format.contentType,
            scope: scope, timeout: timeout, retries: retries)
        return try PayloadCodec.decode(Command.Reply.self, from: reply.payload, format: PayloadFormat(contentType: reply.header.contentType))
    }

    /// Activates a board through its typed destination.
    public func activate<Input>(
        _ destination: BoardDestination<Input>, with input: Input, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout
    ) async throws {
        try await activate(destination.id, typeName: Input.busTypeName, payload: PayloadCodec.encode(input), scope: scope, timeout: timeout)
    }

    /// Sends an action; returns how many boards received it.
    @discardableResult
    public func send<Action: BoardAction>(action: Action, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> Int {
        try await self.action(Action.actionName, payload: PayloadCodec.encode(action), scope: scope, timeout: timeout).delivered
    }
}
