import BusCore
import Foundation

/// Prints rows in aligned columns.
func printTable(header: [String], rows: [[String]]) {
    let all = [header] + rows
    let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
    for row in all {
        let cells = row.enumerated().map { index, cell in
            index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
        }
        // No trailing spaces when the last cells are empty.
        var line = cells.joined(separator: "  ")
        while line.last == " " { line.removeLast() }
        print(line)
    }
}

/// The payload shapes `introspect` shows: input, each command (request → reply), output, action.
func printSchemas(_ schemas: BoardSchemas) {
    print("payloads:")
    if let input = schemas.input { print("  input \(input.title ?? "")  \(input.summary)") }
    for (name, command) in schemas.commands.sorted(by: { $0.key < $1.key }) {
        print("  command \(name)  \(command.request.summary) → \(command.reply.summary)")
    }
    for (name, output) in schemas.outputs.sorted(by: { $0.key < $1.key }) { print("  output \(name)  \(output.summary)") }
    for (name, action) in schemas.actions.sorted(by: { $0.key < $1.key }) { print("  action \(name)  \(action.summary)") }
    for (name, store) in (schemas.stores ?? [:]).sorted(by: { $0.key < $1.key }) {
        print("  store \(name)  state \(store.state?.summary ?? "-")")
        if let record = store.record { print("    record  \(record.summary)") }
        let ownerOnly = Set(store.ownerActions ?? [])
        for (action, payload) in store.actions.sorted(by: { $0.key < $1.key }) {
            print("    dispatch \(action)  \(payload.summary)\(ownerOnly.contains(action) ? "  (owner only)" : "")")
        }
        for (query, shapes) in (store.queries ?? [:]).sorted(by: { $0.key < $1.key }) {
            print("    query \(query)  \(shapes.request.summary) → \(shapes.reply.summary)")
        }
    }
}

/// A list for people: comma-separated, or "-" when empty.
func listed(_ items: [String]) -> String {
    items.isEmpty ? "-" : items.joined(separator: ", ")
}
