import BusCore
import FoundationEssentials
import Glibc

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
        make(id: id, emits: Output.self, environment: environment) { input, outputs in
            try await outputs.emit(work(input, outputs.context))
        }
    }

    /// A task board whose task decides what it emits, of any of the types it declares (`emits`):
    /// a payment that ends `Paid` or `Declined`, each with flows of its own. It emits with
    /// ``TaskOutputs/emit(_:)``, any number of times; when the task returns the board completes
    /// with `isDone: true`, when it throws with `isDone: false`.
    public static func make<Input: BusPayload, each Output: BusPayload>(
        id: BoardID, emits outputs: repeat (each Output).Type, environment: [String: String] = ProcessInfo.processInfo.environment,
        _ work: @escaping @Sendable (Input, TaskOutputs) async throws -> Void
    ) -> Board {
        let gate = TaskGate()
        var board = Board(id: id, environment: environment)
        repeat board.declaresOutput(each outputs)
        let declared = Set(board.outputTypes)
        board.onActivate(Input.self) { input, context in
            guard await gate.enter() else {
                throw BusError(.busy, "board '\(context.id)' is already running its task")
            }
            Task {
                do {
                    try await work(input, TaskOutputs(context: context, declared: declared))
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

/// What a task emits through: only the output types its board declared, and nothing once the
/// task is cancelled (a ``BlockTaskBoard`` in mode `latest` cancels the task a newer input replaces).
public struct TaskOutputs: Sendable {
    /// The board's context, for everything but emitting (`sendAction`, `nextToBoard`, the logger).
    public let context: BoardContext
    let declared: Set<String>

    /// Emits an output (`sendToMotherboard`); returns how many flows ran. Throws `badArgument`
    /// for a type the board did not declare, and `CancellationError` once the task is cancelled.
    @discardableResult
    public func emit<Output: BusPayload>(_ output: Output) async throws -> Int {
        guard declared.contains(Output.busTypeName) else {
            let declares = declared.sorted().joined(separator: ", ")
            throw BusError(.badArgument, "'\(Output.busTypeName)' is not an output of board '\(context.id)' (it declares \(declares))")
        }
        try Task.checkCancellation()
        return try await context.sendToMotherboard(output)
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
