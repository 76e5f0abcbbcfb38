import BusCore
import Foundation
import Logging

/// What a board's handlers use to talk to the motherboard: the Boardy verbs.
public struct BoardContext: Sendable {
    /// The board's own id.
    public let id: BoardID
    /// The board's motherboard scope.
    public let scope: String
    /// A logger with the board id in its metadata.
    public let logger: Logger
    let client: BusClient
    let completion: @Sendable () -> Void

    /// `sendToMotherboard(output)`: the motherboard runs every flow from this board. Returns how
    /// many flows ran (0 when nobody listens, which is not an error).
    @discardableResult
    public func sendToMotherboard<Output: BusPayload>(_ output: Output, timeout: Duration = BusClient.defaultTimeout) async throws -> Int {
        try await client.emit(from: id, typeName: Output.busTypeName, payload: PayloadCodec.encode(output), timeout: timeout).delivered
    }

    /// `nextToBoard`: activates another live board with an input; returns once it accepted it.
    public func nextToBoard<Input>(_ destination: BoardDestination<Input>, with input: Input, timeout: Duration = BusClient.defaultTimeout) async throws {
        try await client.activate(destination, with: input, timeout: timeout)
    }

    /// `sendAction`: delivers an action to every board subscribed to its name; returns how many.
    @discardableResult
    public func sendAction<Action: BoardAction>(_ action: Action, timeout: Duration = BusClient.defaultTimeout) async throws -> Int {
        try await client.send(action: action, timeout: timeout)
    }

    /// `interactWithOtherBoard`: a command to a live board, answered with its reply.
    public func interact<Command: BoardCommand>(with board: BoardID, _ command: Command, timeout: Duration = BusClient.defaultTimeout) async throws -> Command.Reply {
        try await client.interact(with: board, command, timeout: timeout)
    }

    /// `complete(isDone)`: leaves the motherboard; the board's `run()` then returns and the process exits.
    public func complete(isDone: Bool = true) async throws {
        let envelope = Envelope(header: EnvelopeHeader(kind: .complete, source: id.rawValue), payload: try PayloadCodec.encode(Completion(isDone: isDone)))
        _ = try await client.request(envelope, timeout: .seconds(5))
        completion()
    }
}
