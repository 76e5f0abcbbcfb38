import BoardKit
import Foundation
import TasksIO

/// A BlockTaskBoard whose execution mode comes from `--mode default|latest|only|queue|concurrent:N`.
func mode(from arguments: [String]) throws -> ExecutionMode {
    guard let index = arguments.firstIndex(of: "--mode"), index + 1 < arguments.count else { return .default }
    let text = arguments[index + 1]
    switch text {
    case "default": return .default
    case "latest": return .latest
    case "only": return .only
    case "queue": return .queue
    default:
        if text.hasPrefix("concurrent:"), let max = Int(text.dropFirst("concurrent:".count)), max > 0 {
            return .concurrent(max: max)
        }
        throw BusError(.badArgument, "unknown mode '\(text)'")
    }
}

let board = BlockTaskBoard.make(id: "demo.tasks", mode: try mode(from: CommandLine.arguments)) {
    (job: TasksIO.Job, _: BoardContext) -> TasksIO.Done in
    try await Task.sleep(for: .milliseconds(job.millis))
    return TasksIO.Done(tag: job.tag)
}
try await board.run()
