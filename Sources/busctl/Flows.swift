import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Flows: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "flows", abstract: "List the flows, in the order they run.")
        @OptionGroup var options: GlobalOptions

        @Flag(help: "Print them as a Graphviz graph of the scopes and boards they join (render with `dot -Tsvg`).") var dot = false

        func run() async throws {
            try await options.withClient { client in
                let list = try await client.flows(timeout: options.deadline)
                if dot { return print(FleetGraph.dot(tree: try await client.tree(timeout: options.deadline), flows: list.flows, actions: false)) }
                if options.json { return try options.printJSON(list) }
                let rows = list.flows.map { flow in
                    ["\(flow.id)", flow.scope.isRoot ? "-" : flow.scope.name, flow.owner?.rawValue ?? "manifest", "\(flow.runs)", flow.description]
                }
                printTable(header: ["ID", "SCOPE", "OWNER", "RUNS", "FLOW"], rows: rows)
                print("outputs dropped (no flow): \(list.droppedOutputs)")
            }
        }
    }
}
