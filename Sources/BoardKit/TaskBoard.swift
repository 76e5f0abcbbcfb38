import BusCore
import Foundation

/// Boardy's TaskBoard: a board that runs one task per activation and then completes.
///
/// One task at a time: an activation while the task runs is refused with `busy`. The activation
/// is acknowledged when the task starts; on success the board emits the output
/// (`sendToMotherboard`) and completes with `isDone: true`, on failure it completes with
/// `isDone: false`. Either way the completion flows run and the process exits.
public enum TaskBoard {
    public static func make<Input: BusPayload, Output: BusPayload>(
        id: BoardID, environment: [String: String] = ProcessInfo.processInfo.environment,
        _ work: @escaping @Sendable (Input, BoardContext) async throws -> Output
    ) -> Board {
        let gate = TaskGate()
        var board = Board(id: id, environment: environment)
        board.declaresOutput(Output.self)
        board.onActivate(Input.self) { input, context in
            guard await gate.enter() else {
                throw BusError(.busy, "board '\(context.id)' is already running its task")
            }
            Task {
                do {
                    let output = try await work(input, context)
                    try await context.sendToMotherboard(output)
                    try await context.complete(isDone: true)
                } catch {
                    context.logger.warning("task failed", metadata: ["error": "\(error)"])
                    try? await context.complete(isDone: false)
                }
            }
        }
        return board
    }
}

/// Lets one task in at a time, for good: a TaskBoard runs a single task in its life.
actor TaskGate {
    private var taken = false
    func enter() -> Bool {
        defer { taken = true }
        return !taken
    }
}
