import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "activate", abstract: "Activate a live board with an input (nextToBoard).")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The input as JSON (default {}).") var payload: String?
        @Option(help: "The input's type name, checked by guaranteed boards.") var type: String = ""

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let target = try boardID(id)
                    try await client.activate(
                        target, typeName: type, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(Delivery(delivered: 1)) }
                    print("activated \(target)")
                }
            }
        }
    }
}
