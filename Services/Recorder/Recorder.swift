import ArgumentParser
import BoardKit
import FluxBus
import Foundation
import BoardBusDemoRecorderIO
import Synchronization

/// Everything that reached the board, in arrival order.
final class Log: Sendable {
    private let entries = Mutex<[RecorderIO.Entry]>([])
    func record(_ kind: String, _ message: RawMessage) {
        let entry = RecorderIO.Entry(
            kind: kind, source: message.source, typeName: message.typeName, payload: String(decoding: message.payload, as: UTF8.self))
        entries.withLock { $0.append(entry) }
    }
    var all: [RecorderIO.Entry] { entries.withLock { $0 } }
}

/// Whether a sleep that should not end did.
final class Woke: Sendable {
    let value = Atomic<Bool>(false)
}

/// A board that records every activation, flow output, completion and action it is given.
@main
struct Recorder: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "A board that records what reaches it, for tests.")

    @Option(help: "Boards (comma-separated) whose outputs a run-time flow of this board receives.", transform: Recorder.boardIDs)
    var from: [BoardID] = []

    @Option(help: "Boards (comma-separated) whose completions this board is told of.", transform: Recorder.boardIDs)
    var completionsOf: [BoardID] = []

    @Option(help: "Action names (comma-separated) this board subscribes to.", transform: { $0.split(separator: ",").map(String.init) })
    var actions: [String] = []

    @Option(parsing: .upToNextOption, help: ArgumentHelp("Holds a query on a store for as long as the board lives.", valueName: "store> <json"))
    var holdQuery: [String] = []

    @Option(help: "For tests: calls runAsProcess as it refuses to run, from inside a task or after another thread started.")
    var misuse: Misuse?

    enum Misuse: String, ExpressibleByArgument {
        case task, thread
    }

    func validate() throws {
        guard holdQuery.isEmpty || holdQuery.count == 2 else {
            throw ValidationError("--hold-query takes a store name and a JSON query")
        }
    }

    static func boardIDs(_ text: String) throws -> [BoardID] {
        try text.split(separator: ",").map { try BoardID(validating: String($0)) }
    }

    func run() throws {
        let log = Log()
        var board = Board(id: RecorderIO.id)
        board.onAnyActivation { message, _ in log.record("activation", message) }
        for action in actions {
            board.onAction(named: action) { message, _ in log.record("action", message) }
        }
        board.onCommand(RecorderIO.Recorded.self) { _, _ in RecorderIO.Recording(entries: log.all) }
        board.onCommand(RecorderIO.Threads.self) { request, _ in try await Recorder.threadReport(sleeping: .milliseconds(request.sleepMilliseconds)) }
        let (flowSources, completionSources, holdQuery) = (from, completionsOf, holdQuery)
        board.onStart { context in
            if holdQuery.count == 2 {
                let query = try JSONSerialization.jsonObject(with: Data(holdQuery[1].utf8))
                _ = try await context.client.activateQuery(
                    store: holdQuery[0], query: try JSONSerialization.data(withJSONObject: query), scope: context.scope)
            }
            if !flowSources.isEmpty {
                try await context.registerFlow(from: flowSources) { message, _ in log.record("flow", message) }
            }
            if !completionSources.isEmpty {
                try await context.onCompletion(of: completionSources) { completion, source, _ in
                    let payload = (try? PayloadCodec.encode(completion)) ?? Data()
                    log.record("completion", RawMessage(source: source.rawValue, typeName: Completion.busTypeName, payload: payload))
                }
            }
        }
        let ready = board
        switch misuse {
        case .task?:
            Task { ready.runAsProcess() }
            dispatchMain()
        case .thread?:
            Thread { sleep(60) }.start()
            while (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) == 1 { usleep(1_000) }
        case nil:
            break
        }
        ready.runAsProcess()
    }

    static func threadReport(sleeping pause: Duration) async throws -> RecorderIO.ThreadReport {
        let handlerThread = currentThreadName()
        // The longest sleeps there are, beside the others: they must still sleep at the end.
        let woke = Woke()
        let forever = [
            Task {
                try await Task.sleep(nanoseconds: .max)
                woke.value.store(true, ordering: .relaxed)
            },
            Task {
                try await Task.sleep(for: .seconds(Int64.max))
                woke.value.store(true, ordering: .relaxed)
            },
        ]
        var slept: [String: Double] = [:]
        func milliseconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
        }
        slept["nanoseconds"] = try await milliseconds(
            ContinuousClock().measure { try await Task.sleep(nanoseconds: UInt64(pause / .nanoseconds(1))) })
        slept["continuous"] = try await milliseconds(ContinuousClock().measure { try await Task.sleep(for: pause) })
        let suspending = SuspendingClock()
        slept["suspending"] = try await milliseconds(
            suspending.measure { try await Task.sleep(until: suspending.now.advanced(by: pause), clock: suspending) })
        let longestSleepsWoke = woke.value.load(ordering: .relaxed)
        for task in forever { task.cancel() }
        let mainActorOnMainThread = await MainActor.run { Thread.isMainThread }
        // On the main thread, it may assume the main actor's isolation; elsewhere it could not.
        let (detachedThread, detachedAssumesMainActor) = await Task.detached {
            (currentThreadName(), Thread.isMainThread && MainActor.assumeIsolated { true })
        }.value
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        let threads = tasks.map { threadName(at: "/proc/self/task/\($0)/comm") }.sorted()
        return RecorderIO.ThreadReport(
            threads: threads, handlerThread: handlerThread, mainActorOnMainThread: mainActorOnMainThread, detachedThread: detachedThread,
            detachedAssumesMainActor: detachedAssumesMainActor, longestSleepsWoke: longestSleepsWoke,
            sleptMilliseconds: slept)
    }

    static func currentThreadName() -> String { threadName(at: "/proc/thread-self/comm") }

    static func threadName(at path: String) -> String {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
