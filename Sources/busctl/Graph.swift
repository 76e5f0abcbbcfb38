import BusCore
import Foundation

/// The fleet as a Graphviz graph (`busctl tree --dot`, `busctl flows --dot`): a cluster per
/// scope, a box per board (dashed and grey when it is not running), an edge per flow (labelled
/// with its output type, dashed for a completion flow) and, with `actions`, a dotted edge from
/// each action name to the boards subscribed to it. Sorted, so that the same fleet prints the
/// same graph.
enum FleetGraph {
    static func dot(tree: ScopeTree, flows: [FlowInfo], actions: Bool) -> String {
        var lines = [
            "digraph fleet {", "  rankdir=LR;", "  node [shape=box, fontname=\"Helvetica\"];", "  edge [fontname=\"Helvetica\", fontsize=10];",
        ]
        func cluster(_ scope: Scope, indent: String) {
            guard let node = tree.scopes.first(where: { $0.name == scope }) else { return }
            lines.append("\(indent)subgraph \(quoted("cluster_\(scope.isRoot ? "/" : scope.name)")) {")
            lines.append("\(indent)  label=\(quoted(scope.isRoot ? "(root)" : scope.name));")
            for board in node.boards.sorted(by: { $0.id < $1.id }) {
                let live = board.state == .running || board.state == .busy
                let style = live ? "" : ", style=dashed, color=grey50, fontcolor=grey50"
                lines.append("\(indent)  \(boardNode(scope, board.id.rawValue)) [label=\(quoted("\(board.id)\n\(board.state)"))\(style)];")
            }
            for child in tree.scopes.filter({ $0.parent == scope && !$0.name.isRoot }).map(\.name).sorted() {
                cluster(child, indent: indent + "  ")
            }
            lines.append("\(indent)}")
        }
        cluster(.root, indent: "  ")
        var edges: [String] = []
        for flow in flows {
            let target = flow.spec.target ?? flow.owner
            guard let target else { continue }
            var attributes: [String] = []
            if let type = flow.spec.outputType { attributes.append("label=\(quoted(type))") }
            if flow.spec.trigger == .completion { attributes.append(contentsOf: ["label=\"complete\"", "style=dashed"]) }
            if flow.spec.target == nil { attributes.append("arrowhead=odot") }
            let suffix = attributes.isEmpty ? "" : " [\(attributes.joined(separator: ", "))]"
            for source in flow.spec.sources {
                edges.append("  \(boardNode(flow.scope, source.rawValue)) -> \(boardNode(flow.scope, target.rawValue))\(suffix);")
            }
        }
        if actions {
            var names = Set<String>()
            for scope in tree.scopes {
                for board in scope.boards {
                    for action in board.actions {
                        names.insert(action)
                        edges.append("  \(quoted("action:\(action)")) -> \(boardNode(scope.name, board.id.rawValue)) [style=dotted];")
                    }
                }
            }
            for name in names.sorted() { lines.append("  \(quoted("action:\(name)")) [label=\(quoted(name)), shape=ellipse];") }
        }
        return (lines + Array(Set(edges)).sorted() + ["}"]).joined(separator: "\n")
    }

    private static func boardNode(_ scope: Scope, _ id: String) -> String { quoted("\(scope.name)/\(id)") }

    /// A DOT string: quotes and backslashes escaped, line ends as `\n`.
    private static func quoted(_ text: String) -> String {
        var out = "\""
        for character in text {
            switch character {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.append(character)
            }
        }
        return out + "\""
    }
}
