import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Introspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "introspect", abstract: "Show a board's interface and the flows that touch it.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try boardID(id) } }

        func run() async throws {
            try await options.withClient { client in
                let found = try await client.introspect(try boardID(id), scope: options.scope, timeout: options.deadline)
                if options.json { return try options.printJSON(found) }
                let board = found.board
                print(
                    """
                    id:       \(board.id)
                    scope:    \(board.scope)
                    state:    \(board.state)\(board.pid > 0 ? " (pid \(board.pid))" : "")
                    input:    \(board.inputTypes?.joined(separator: ", ") ?? board.inputType ?? "-")
                    outputs:  \(listed(found.outputTypes))
                    commands: \(listed(board.commands))
                    actions:  \(listed(board.actions))
                    flows:
                    """)
                for flow in found.flows { print("  #\(flow.id)  \(flow)") }
                if found.flows.isEmpty { print("  -") }
                if let schemas = found.schemas { printSchemas(schemas) }
            }
        }
    }
}
