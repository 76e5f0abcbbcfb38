import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Stores: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stores", abstract: "List the Flux stores of the live boards, with their owners and actions.")
        @OptionGroup var options: GlobalOptions

        func run() async throws {
            try await options.withClient { client in
                let list = try await client.stores(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                let rows = list.stores.map { store in
                    [store.store, store.scope.isRoot ? "-" : store.scope.name, store.board.rawValue, listed(store.actions), store.state ?? "-"]
                }
                printTable(header: ["STORE", "SCOPE", "BOARD", "ACTIONS", "STATE"], rows: rows)
            }
        }
    }
}
