import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "Show one board.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try boardID(id) } }

        func run() async throws {
            try await options.withClient { client in
                let info = try await client.status(try boardID(id), scope: options.scope, timeout: options.deadline)
                if options.json { return try options.printJSON(info) }
                print(
                    """
                    id:         \(info.id)
                    state:      \(info.state)
                    pid:        \(info.pid)
                    scope:      \(info.scope)
                    start:      \(info.start)
                    input:      \(info.inputTypes?.joined(separator: ", ") ?? info.inputType ?? "-")
                    commands:   \(listed(info.commands))
                    actions:    \(listed(info.actions))
                    uptime:     \(String(format: "%.1f", info.uptimeSeconds)) s
                    delivered:  \(info.activations) activations, \(info.commandsHandled) commands, \(info.actionsDelivered) actions
                    restarts:   \(info.restarts)\(info.lastExit.map { " (last exit: \($0))" } ?? "")
                    """)
                if let refused = info.refusedInputs {
                    print("refused:    \(refused) input(s) nobody waited for (last: \(info.lastRefusedInput ?? "-"))")
                }
                if let host = info.host { print("host:       \(host)") }
                // The boards a gateway serves over one connection show the same one.
                if let connection = info.connection { print("connection: \(connection)") }
            }
        }
    }
}
