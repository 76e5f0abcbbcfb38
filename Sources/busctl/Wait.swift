import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Wait: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "wait", abstract: "Wait until a board is live, or with no id until every always-on board is.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try id.map(boardID) } }

        /// The broker too is waited for, within the same timeout; what is still waited for is said
        /// on stderr as it changes.
        func run() async throws {
            let deadline = ContinuousClock.now.advanced(by: options.deadline)
            try await options.withClient(waitingForBroker: deadline) { client in
                let left = max(.zero, ContinuousClock.now.duration(to: deadline))
                if let id {
                    let info = try await client.waitForBoard(try boardID(id), scope: options.scope, timeout: left)
                    if options.json { return try options.printJSON(info) }
                    print("\(info.id) is running (pid \(info.pid))")
                } else {
                    let list = try await client.waitForFleet(timeout: left) { waiting in
                        let names = waiting.map(\.rawValue).joined(separator: ", ")
                        FileHandle.standardError.write(Data("busctl: waiting for \(waiting.count) board(s): \(names)\n".utf8))
                    }
                    if options.json { return try options.printJSON(list) }
                    print("fleet ready: \(list.boards.count) board(s) running")
                }
            }
        }
    }
}
