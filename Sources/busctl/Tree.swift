import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Tree: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "tree", abstract: "Show the motherboard scopes and their boards.")
        @OptionGroup var options: GlobalOptions
        @Flag(help: "Print it as a Graphviz graph, with the flows and action subscriptions (render with `dot -Tsvg`).") var dot = false

        func run() async throws {
            try await options.withClient { client in
                let tree = try await client.tree(timeout: options.deadline)
                if dot {
                    let flows = try await client.flows(timeout: options.deadline)
                    return print(FleetGraph.dot(tree: tree, flows: flows.flows, actions: true))
                }
                if options.json { return try options.printJSON(tree) }
                printScope(.root, in: tree, indent: "")
            }
        }

        private func printScope(_ name: Scope, in tree: ScopeTree, indent: String) {
            guard let node = tree.scopes.first(where: { $0.name == name }) else { return }
            print("\(indent)\(name)")
            for board in node.boards {
                print("\(indent)  \(board.id)  \(board.state)\(board.pid > 0 ? " pid \(board.pid)" : "")")
            }
            for child in tree.scopes where child.parent == name && !child.name.isRoot {
                printScope(child.name, in: tree, indent: indent + "  ")
            }
        }
    }
}
