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

/// The payload shapes `introspect` shows (``BoardSchemas/shapeLines``).
func printSchemas(_ schemas: BoardSchemas) {
    print("payloads:")
    for line in schemas.shapeLines { print("  " + line) }
}

/// A list for people: comma-separated, or "-" when empty.
func listed(_ items: [String]) -> String {
    items.isEmpty ? "-" : items.joined(separator: ", ")
}
