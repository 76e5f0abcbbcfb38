import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the live boards.")
        @OptionGroup var options: GlobalOptions

        func run() async throws {
            try await options.withClient { client in
                let list = try await client.list(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                // The HOST column only when some board is on another host.
                let remote = list.boards.contains { $0.host != nil }
                let rows = list.boards.map { board in
                    [
                        board.id.rawValue, "\(board.pid)", board.scope.isRoot ? "-" : board.scope.name, board.state.name, board.start,
                        String(format: "%.1fs", board.uptimeSeconds), board.commands.joined(separator: ","),
                    ] + (remote ? [board.host ?? "local"] : [])
                }
                printTable(header: ["ID", "PID", "SCOPE", "STATE", "START", "UPTIME", "COMMANDS"] + (remote ? ["HOST"] : []), rows: rows)
                if !list.waitingFor.isEmpty {
                    print("waiting for: \(list.waitingFor.map(\.rawValue).joined(separator: ", "))")
                }
            }
        }
    }
}
