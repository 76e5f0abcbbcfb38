import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Call: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "call", abstract: "Send a command to a live board and print its reply.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The command name.", completion: LiveCompletion.commands) var command: String
        @Argument(help: "The command as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let target = try boardID(id)
                    let reply: Data
                    do {
                        reply = try await client.call(
                            target, command: command, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    } catch let error as BusError where error.code == .typeMismatch {
                        // Say what the board expects, from its introspection (best effort).
                        let found = try? await client.introspect(target, scope: options.scope, timeout: .seconds(2))
                        guard let expected = found?.schemas?.commands[command]?.request.summary else { throw error }
                        throw BusError(error.code, "\(error.message); '\(command)' expects \(expected)")
                    }
                    print(options.json ? String(decoding: reply, as: UTF8.self) : prettyJSON(reply))
                }
            }
        }
    }
}
