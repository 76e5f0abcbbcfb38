import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Emit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "emit", abstract: "Emit an output on a board's behalf (sendToMotherboard), to test flows.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The source board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The output's type name.") var output: String
        @Argument(help: "The output as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let delivery = try await client.emit(
                        from: try boardID(id), typeName: output, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(delivery) }
                    print("\(output) from \(id) ran \(delivery.delivered) flow(s)")
                }
            }
        }
    }
}
