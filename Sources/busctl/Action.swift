import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Action: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "action", abstract: "Send an action to every board subscribed to its name (sendAction).")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The action name.") var name: String
        @Argument(help: "The action as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try jsonPayload(payload) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let delivery = try await client.action(name, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(delivery) }
                    print("action \(name) delivered to \(delivery.delivered) board(s)")
                }
            }
        }
    }
}
