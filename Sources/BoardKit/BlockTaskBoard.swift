import BusCore
import FoundationEssentials
import Glibc

/// How a ``BlockTaskBoard`` runs tasks when activations overlap.
public enum ExecutionMode: Sendable, Hashable, CustomStringConvertible {
    /// Every activation runs its own task at once; every result is emitted.
    case `default`
    /// A new activation cancels the running task; only the newest result is emitted.
    case latest
    /// While a task runs, new activations are refused with `busy`.
    case only
    /// Tasks run one at a time in arrival order.
    case queue
    /// Up to `max` tasks at once; further activations wait in arrival order.
    case concurrent(max: Int)

    public var description: String {
        switch self {
        case .default: "default"
        case .latest: "latest"
        case .only: "only"
        case .queue: "queue"
        case .concurrent(let max): "concurrent(\(max))"
        }
    }
}

/// Boardy's BlockTaskBoard: a long-lived board that runs a task for each activation according to
/// an ``ExecutionMode`` and emits each task's output (`sendToMotherboard`). It does not complete.
/// Waiting activations are bounded (`queueLimit`); beyond it they are refused with `busy`.
public enum BlockTaskBoard {
    public static func make<Input: BusPayload, Output: BusPayload>(
        id: BoardID, mode: ExecutionMode, queueLimit: Int = 64,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        _ work: @escaping @Sendable (Input, BoardContext) async throws -> Output
    ) -> Board {
        make(id: id, mode: mode, emits: Output.self, queueLimit: queueLimit, environment: environment) { input, outputs in
            try await outputs.emit(work(input, outputs.context))
        }
    }

    /// A block task board whose tasks decide what they emit, of any of the types it declares
    /// (`emits`), with ``TaskOutputs/emit(_:)``; in mode `latest` a replaced task emits nothing more.
    public static func make<Input: BusPayload, each Output: BusPayload>(
        id: BoardID, mode: ExecutionMode, emits outputs: repeat (each Output).Type, queueLimit: Int = 64,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        _ work: @escaping @Sendable (Input, TaskOutputs) async throws -> Void
    ) -> Board {
        let scheduler = TaskScheduler(mode: mode, queueLimit: queueLimit)
        var board = Board(id: id, environment: environment)
        repeat board.declaresOutput(each outputs)
        let declared = Set(board.outputTypes)
        board.onActivate(Input.self) { input, context in
            try await scheduler.submit {
                try await work(input, TaskOutputs(context: context, declared: declared))
            } onFailure: { error in
                if !(error is CancellationError) {
                    context.logger.warning("task failed", metadata: ["error": "\(error)"])
                }
            }
        }
        return board
    }
}

/// Runs submitted jobs according to an execution mode.
actor TaskScheduler {
    typealias Job = @Sendable () async throws -> Void
    private let mode: ExecutionMode
    private let queueLimit: Int
    private var running: [Int: Task<Void, Never>] = [:]
    private var waiting: [(Job, @Sendable (any Error) -> Void)] = []
    private var nextID = 0
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []

    init(mode: ExecutionMode, queueLimit: Int) {
        self.mode = mode
        self.queueLimit = queueLimit
    }

    /// Starts or queues a job, or throws `busy`; returns at once.
    func submit(_ job: @escaping Job, onFailure: @escaping @Sendable (any Error) -> Void) throws {
        switch mode {
        case .default:
            start(job, onFailure)
        case .latest:
            for task in running.values { task.cancel() }
            start(job, onFailure)
        case .only:
            guard running.isEmpty else { throw BusError(.busy, "a task is running (mode only)") }
            start(job, onFailure)
        case .queue, .concurrent:
            if running.count < limit {
                start(job, onFailure)
            } else {
                guard waiting.count < queueLimit else { throw BusError(.busy, "\(queueLimit) tasks already wait (mode \(mode))") }
                waiting.append((job, onFailure))
            }
        }
    }

    private var limit: Int {
        if case .concurrent(let max) = mode { return Swift.max(1, max) }
        return 1
    }

    private func start(_ job: @escaping Job, _ onFailure: @escaping @Sendable (any Error) -> Void) {
        let id = nextID
        nextID += 1
        running[id] = Task {
            do { try await job() } catch { onFailure(error) }
            self.finished(id)
        }
    }

    private func finished(_ id: Int) {
        running[id] = nil
        if !waiting.isEmpty && running.count < limit {
            let (job, onFailure) = waiting.removeFirst()
            start(job, onFailure)
        }
        if running.isEmpty && waiting.isEmpty {
            for waiter in idleWaiters { waiter.resume() }
            idleWaiters.removeAll()
        }
    }

    /// Returns once no job runs or waits (at once when none does).
    func untilIdle() async {
        guard !running.isEmpty || !waiting.isEmpty else { return }
        await withCheckedContinuation { idleWaiters.append($0) }
    }
}
