import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct State: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "state",
            abstract: "Print a store's state as JSON; with --watch, a snapshot and then every change, one JSON line each.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The store name.", completion: LiveCompletion.stores) var store: String
        @Flag(help: "Keep printing changes.") var watch = false
        @Option(parsing: .unconditional, help: "With --watch, stop after this many lines.") var count: String?
        @Option(name: .customLong("for"), parsing: .unconditional, help: "With --watch, stop after this many seconds (exit 0).")
        var duration: String?
        @Option(help: "A keyed store: print the record at this key.") var key: String?
        @Option(help: "A keyed store: print a page of the records whose keys start with this.") var prefix: String?
        @Option(help: "A keyed store: the page after this key (the previous page's \"next\").") var after: String?
        @Option(parsing: .unconditional, help: "A keyed store: at most this many records in the page (1 to 1000, default 100).")
        var limit: String?

        func run() async throws {
            let (lines, period, pageLimit) = try options.validated {
                let paging = prefix != nil || after != nil || limit != nil
                if watch && (after != nil || limit != nil) {
                    throw BusError(.badArgument, "--after and --limit read a page once; --watch watches the records under --prefix or at --key")
                }
                if key != nil && paging { throw BusError(.badArgument, "--key reads one record; --prefix, --after and --limit read a page") }
                return (
                    try self.count.map { try busctl.count($0, option: "--count") },
                    try self.duration.map { try seconds($0, option: "--for", maximum: GlobalOptions.maximumTimeoutSeconds) },
                    try self.limit.map { try busctl.count($0, option: "--limit") }
                )
            }
            try await options.withClient { client in
                if watch, key != nil || prefix != nil { return try await watchRecords(client, lines: lines, period: period) }
                let read: (String, Data)? =
                    if let key {
                        (StoreOperation.get, try PayloadCodec.encode(RecordKey(key: key)))
                    } else if prefix != nil || after != nil || pageLimit != nil {
                        (StoreOperation.list, try PayloadCodec.encode(RecordRange(prefix: prefix, after: after, limit: pageLimit)))
                    } else { nil }
                if let (operation, payload) = read {
                    let answer = try await client.storeRequest(store, operation, payload: payload, scope: options.scope, timeout: options.deadline)
                    return print(options.json ? String(decoding: answer, as: UTF8.self) : prettyJSON(answer))
                }
                guard watch else {
                    let snapshot = try await client.storeState(store, scope: options.scope, timeout: options.deadline)
                    return print(options.json ? String(decoding: snapshot, as: UTF8.self) : prettyJSON(snapshot))
                }
                try await printLines(lines: lines, period: period) {
                    client.watch(store, scope: options.scope, timeout: options.deadline).map { String(decoding: $0.snapshot, as: UTF8.self) }
                }
            }
        }

        /// A keyed store's records under --prefix (or at --key): a snapshot, then each change,
        /// one JSON line each (`{"sequence", "snapshot", "changes": [{"key", "record"} | {"key", "removed": true}]}`).
        private func watchRecords(_ client: BusClient, lines: Int?, period: Duration?) async throws {
            struct Line: Encodable {
                var sequence: UInt64
                var snapshot: Bool
                var changes: [KeyedChange<JSONValue>]
            }
            let (store, scope, deadline, key) = (self.store, options.scope, options.deadline, self.key)
            try await printLines(lines: lines, period: period) {
                client.watchRecords(JSONValue.self, store: store, prefix: key ?? prefix ?? "", scope: scope, timeout: deadline).compactMap {
                    update -> String? in
                    // A key's watch is the prefix watch of its key, less the longer keys it starts.
                    let changes = update.changes.filter { key == nil || $0.key == key }
                    guard update.isSnapshot || !changes.isEmpty else { return nil }
                    let line = Line(
                        sequence: update.sequence, snapshot: update.isSnapshot, changes: changes.map { KeyedChange(key: $0.key, record: $0.record) })
                    return String(decoding: try PayloadCodec.encode(line), as: UTF8.self)
                }
            }
        }

        /// Prints the watch's lines as they come, until --count lines or --for seconds.
        private func printLines<Lines: AsyncSequence & Sendable>(lines: Int?, period: Duration?, _ watch: @escaping @Sendable () -> Lines)
            async throws where Lines.Element == String
        {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var printed = 0
                    for try await line in watch() {
                        print(line)
                        fflushStandardOutput()
                        printed += 1
                        if let lines, printed >= lines { return }
                    }
                }
                if let period { group.addTask { try await Task.sleep(for: period) } }
                try await group.next()
                group.cancelAll()
            }
        }
    }
}
