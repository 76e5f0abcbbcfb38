import BoardKit
import FluxBus
import Foundation
import RecorderIO
import Synchronization

/// Everything that reached the board, in arrival order.
final class Log: Sendable {
    private let entries = Mutex<[RecorderIO.Entry]>([])
    func record(_ kind: String, _ message: RawMessage) {
        let entry = RecorderIO.Entry(
            kind: kind, source: message.source, typeName: message.typeName, payload: String(decoding: message.payload, as: UTF8.self))
        entries.withLock { $0.append(entry) }
    }
    var all: [RecorderIO.Entry] { entries.withLock { $0 } }
}

/// The comma-separated values after `flag`.
func values(_ flag: String) -> [String] {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: flag), index + 1 < arguments.count else { return [] }
    return arguments[index + 1].split(separator: ",").map(String.init)
}

let log = Log()
let flowSources = try values("--from").map { try BoardID(validating: $0) }
let completionSources = try values("--completions-of").map { try BoardID(validating: $0) }
var board = Board(id: RecorderIO.id)
board.onAnyActivation { message, _ in log.record("activation", message) }
for action in values("--actions") {
    board.onAction(named: action) { message, _ in log.record("action", message) }
}
board.onCommand(RecorderIO.Recorded.self) { _, _ in RecorderIO.Recording(entries: log.all) }
board.onStart { context in
    // `--hold-query STORE JSON`: hold a query on a store for as long as this board lives.
    let arguments = CommandLine.arguments
    if let index = arguments.firstIndex(of: "--hold-query"), index + 2 < arguments.count {
        let query = try JSONSerialization.jsonObject(with: Data(arguments[index + 2].utf8))
        _ = try await context.client.activateQuery(
            store: arguments[index + 1], query: try JSONSerialization.data(withJSONObject: query), scope: context.scope)
    }
    if !flowSources.isEmpty {
        try await context.registerFlow(from: flowSources) { message, _ in log.record("flow", message) }
    }
    if !completionSources.isEmpty {
        try await context.onCompletion(of: completionSources) { completion, source, _ in
            let payload = (try? PayloadCodec.encode(completion)) ?? Data()
            log.record("completion", RawMessage(source: source.rawValue, typeName: Completion.busTypeName, payload: payload))
        }
    }
}
try await board.run()
