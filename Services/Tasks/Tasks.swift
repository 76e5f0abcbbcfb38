import ArgumentParser
import BoardKit
import FoundationEssentials
import BoardBusDemoTasksIO

/// A BlockTaskBoard that runs `Job`s, in the execution mode given on the command line.
@main
struct Tasks: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "A task board that sleeps for each job's milliseconds.")

    @Option(help: "How jobs that overlap run: default, latest, only, queue or concurrent:N.")
    var mode: ExecutionMode = .default

    func run() throws {
        let board = BlockTaskBoard.make(id: "demo.tasks", mode: mode) { (job: TasksIO.Job, _: BoardContext) -> TasksIO.Done in
            try await Task.sleep(for: .milliseconds(job.millis))
            return TasksIO.Done(tag: job.tag)
        }
        board.runAsProcess()
    }
}

extension ExecutionMode: ExpressibleByArgument {
    public init?(argument text: String) {
        switch text {
        case "default": self = .default
        case "latest": self = .latest
        case "only": self = .only
        case "queue": self = .queue
        default:
            guard text.hasPrefix("concurrent:"), let max = Int(text.dropFirst("concurrent:".count)), max > 0 else { return nil }
            self = .concurrent(max: max)
        }
    }

    public var defaultValueDescription: String {
        switch self {
        case .default: "default"
        case .latest: "latest"
        case .only: "only"
        case .queue: "queue"
        case .concurrent(let max): "concurrent:\(max)"
        }
    }
}
