import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Restart: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "restart", abstract: "Start a manifest board that is not running, one its restart limit stopped included.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String

        func validate() throws { try options.validated { _ = try boardID(id) } }

        func run() async throws {
            try await options.withClient { client in
                let info = try await client.restart(try boardID(id), scope: options.scope, timeout: options.deadline)
                if options.json { return try options.printJSON(info) }
                print("\(info.id): \(info.state)")
            }
        }
    }
}
