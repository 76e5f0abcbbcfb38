import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Query: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "query", abstract: "Call a query a store declared; prints its answer, computed at the store's owner.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The store name.", completion: LiveCompletion.stores) var store: String
        @Argument(help: "The query's name (introspect lists them).") var name: String
        @Argument(help: "The query's request as JSON (default {}).") var request: String?

        func run() async throws {
            let payload = try options.validated {
                let request = try jsonPayload(request)
                return Data(#"{"name":"#.utf8) + (try PayloadCodec.encode(name)) + Data(#","request":"#.utf8) + request + Data("}".utf8)
            }
            try await options.withClient { client in
                let answer = try await client.storeRequest(
                    store, StoreOperation.query, payload: payload, scope: options.scope, timeout: options.deadline)
                print(options.json ? String(decoding: answer, as: UTF8.self) : prettyJSON(answer))
            }
        }
    }
}
