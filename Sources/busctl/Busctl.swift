import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

/// `busctl`: inspect and drive a BoardBus fleet, in the manner of systemd's busctl.
@main
struct Busctl: AsyncParsableCommand {
    /// The name it was run by: `busctl`, or the one it is installed under beside systemd's
    /// (`boardbusctl`), which its usage, completion scripts and manual then show.
    static let invokedName: String = {
        let name = URL(fileURLWithPath: CommandLine.arguments.first ?? "busctl").lastPathComponent
        return name.isEmpty ? "busctl" : name
    }()

    static let configuration = CommandConfiguration(
        commandName: invokedName,
        abstract: "Inspect and drive a BoardBus fleet.",
        subcommands: [
            List.self, Status.self, Restart.self, Introspect.self, Tree.self, Flows.self, Call.self, Activate.self, Emit.self, Action.self,
            Dispatch.self,
            State.self, Query.self, Stores.self, DeadLetters.self, Wait.self, Monitor.self, Metrics.self, Keys.self, Policy.self,
        ])
}

extension Busctl {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the live boards.")
        @OptionGroup var options: GlobalOptions

        func run() async throws {
            try await options.withClient { client in
                let list = try await client.list(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                // The HOST column only when some board is on another host.
                let remote = list.boards.contains { $0.host != nil }
                let rows = list.boards.map { board in
                    [
                        board.id.rawValue, "\(board.pid)", board.scope.isRoot ? "-" : board.scope.name, board.state.name, board.start,
                        String(format: "%.1fs", board.uptimeSeconds), board.commands.joined(separator: ","),
                    ] + (remote ? [board.host ?? "local"] : [])
                }
                printTable(header: ["ID", "PID", "SCOPE", "STATE", "START", "UPTIME", "COMMANDS"] + (remote ? ["HOST"] : []), rows: rows)
                if !list.waitingFor.isEmpty {
                    print("waiting for: \(list.waitingFor.map(\.rawValue).joined(separator: ", "))")
                }
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "Show one board.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try boardID(id) } }

        func run() async throws {
            try await options.withClient { client in
                let info = try await client.status(try boardID(id), scope: options.scope, timeout: options.deadline)
                if options.json { return try options.printJSON(info) }
                print(
                    """
                    id:         \(info.id)
                    state:      \(info.state)
                    pid:        \(info.pid)
                    scope:      \(info.scope)
                    start:      \(info.start)
                    input:      \(info.inputTypes?.joined(separator: ", ") ?? info.inputType ?? "-")
                    commands:   \(listed(info.commands))
                    actions:    \(listed(info.actions))
                    uptime:     \(String(format: "%.1f", info.uptimeSeconds)) s
                    delivered:  \(info.activations) activations, \(info.commandsHandled) commands, \(info.actionsDelivered) actions
                    restarts:   \(info.restarts)\(info.lastExit.map { " (last exit: \($0))" } ?? "")
                    """)
                if let refused = info.refusedInputs {
                    print("refused:    \(refused) input(s) nobody waited for (last: \(info.lastRefusedInput ?? "-"))")
                }
                if let host = info.host { print("host:       \(host)") }
                // The boards a gateway serves over one connection show the same one.
                if let connection = info.connection { print("connection: \(connection)") }
            }
        }
    }

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

    struct Introspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "introspect", abstract: "Show a board's interface and the flows that touch it.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try boardID(id) } }

        func run() async throws {
            try await options.withClient { client in
                let found = try await client.introspect(try boardID(id), scope: options.scope, timeout: options.deadline)
                if options.json { return try options.printJSON(found) }
                let board = found.board
                print(
                    """
                    id:       \(board.id)
                    scope:    \(board.scope)
                    state:    \(board.state)\(board.pid > 0 ? " (pid \(board.pid))" : "")
                    input:    \(board.inputTypes?.joined(separator: ", ") ?? board.inputType ?? "-")
                    outputs:  \(listed(found.outputTypes))
                    commands: \(listed(board.commands))
                    actions:  \(listed(board.actions))
                    flows:
                    """)
                for flow in found.flows { print("  #\(flow.id)  \(flow)") }
                if found.flows.isEmpty { print("  -") }
                if let schemas = found.schemas { printSchemas(schemas) }
            }
        }
    }

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

    struct DeadLetters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dead-letters",
            abstract: "List the activations of at-least-once boards that ran out of deliveries; --replay ID delivers one again.")
        @OptionGroup var options: GlobalOptions
        @Option(help: "Deliver this dead letter again, as a new activation (its delivery count starts over).") var replay: UInt64?

        func run() async throws {
            try await options.withClient { client in
                if let replay {
                    try await client.replayDeadLetter(replay, timeout: options.deadline)
                    return print("dead letter \(replay) delivered again")
                }
                let list = try await client.deadLetters(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                let rows = list.letters.map { letter in
                    [
                        "\(letter.id)", letter.board.rawValue, letter.scope.isRoot ? "-" : letter.scope.name, letter.type.isEmpty ? "-" : letter.type,
                        "\(letter.attempts)", "\(letter.payloadBytes)", letter.reason.escapedForDisplay(limit: 200),
                    ]
                }
                printTable(header: ["ID", "BOARD", "SCOPE", "TYPE", "DELIVERIES", "BYTES", "WHY"], rows: rows)
            }
        }
    }

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

    struct Call: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "call", abstract: "Send a command to a live board and print its reply.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The command name.", completion: LiveCompletion.commands) var command: String
        @Argument(help: "The command as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let target = try boardID(id)
                    let reply: Data
                    do {
                        reply = try await client.call(
                            target, command: command, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    } catch let error as BusError where error.code == .typeMismatch {
                        // Say what the board expects, from its introspection (best effort).
                        let found = try? await client.introspect(target, scope: options.scope, timeout: .seconds(2))
                        guard let expected = found?.schemas?.commands[command]?.request.summary else { throw error }
                        throw BusError(error.code, "\(error.message); '\(command)' expects \(expected)")
                    }
                    print(options.json ? String(decoding: reply, as: UTF8.self) : prettyJSON(reply))
                }
            }
        }
    }

    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "activate", abstract: "Activate a live board with an input (nextToBoard).")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The input as JSON (default {}).") var payload: String?
        @Option(help: "The input's type name, checked by guaranteed boards.") var type: String = ""

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let target = try boardID(id)
                    try await client.activate(
                        target, typeName: type, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(Delivery(delivered: 1)) }
                    print("activated \(target)")
                }
            }
        }
    }

    struct Emit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "emit", abstract: "Emit an output on a board's behalf (sendToMotherboard), to test flows.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The source board id.", completion: LiveCompletion.boards) var id: String
        @Argument(help: "The output's type name.") var output: String
        @Argument(help: "The output as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = (try boardID(id), try jsonPayload(payload)) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let delivery = try await client.emit(
                        from: try boardID(id), typeName: output, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(delivery) }
                    print("\(output) from \(id) ran \(delivery.delivered) flow(s)")
                }
            }
        }
    }

    struct Action: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "action", abstract: "Send an action to every board subscribed to its name (sendAction).")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The action name.") var name: String
        @Argument(help: "The action as JSON (default {}).") var payload: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try jsonPayload(payload) } }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    let delivery = try await client.action(name, payload: try jsonPayload(payload), scope: options.scope, timeout: options.deadline)
                    if options.json { return try options.printJSON(delivery) }
                    print("action \(name) delivered to \(delivery.delivered) board(s)")
                }
            }
        }
    }

    struct Dispatch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dispatch", abstract: "Dispatch a Flux action to a store; prints its sequence number once applied.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The store name.", completion: LiveCompletion.stores) var store: String
        @Argument(help: "The action name.") var action: String
        @Argument(help: "The action as JSON (default {}).") var payload: String?
        @Option(help: "An idempotency key: a retry with the same id is not applied twice (default: a new one, printed when the outcome is unknown).")
        var id: String?
        @Flag(
            help:
                "Send it again with the same id, until --timeout, while its outcome is unknown or its store is not reachable (outcomeUnknown, timeout, boardNotRunning, noSuchStore, unreachable, storageFailed, busy): applied at most once."
        )
        var retries = false

        /// What a retry with the same id may follow: the action was not applied, or may have been
        /// and the id makes sure it is applied at most once.
        static let retryable: Set<BusError.Code> = [.outcomeUnknown, .timeout, .boardNotRunning, .noSuchStore, .unreachable, .storageFailed, .busy]

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws {
            try options.validated {
                _ = try jsonPayload(payload)
                if let id { try HeaderCodec.checkDispatchID(id) }
            }
        }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    // Always an id: when the outcome is unknown, a retry with it is applied at most once.
                    let dispatchID = id ?? UUID().uuidString
                    let ack: DispatchAck
                    let deadline = ContinuousClock.now.advanced(by: options.deadline)
                    do {
                        var attempt = 0
                        while true {
                            attempt += 1
                            // With retries, no attempt takes the whole deadline (5 s at most), so that one is left for the next.
                            let left = ContinuousClock.now.duration(to: deadline)
                            do {
                                ack = try await client.dispatch(
                                    store: store, action: action, payload: try jsonPayload(payload), dispatchID: dispatchID, scope: options.scope,
                                    timeout: retries ? max(.milliseconds(100), min(left, .seconds(5))) : options.deadline)
                                break
                            } catch let error as BusError where retries && Self.retryable.contains(error.code) {
                                guard ContinuousClock.now.duration(to: deadline) > .milliseconds(300) else { throw error }
                                FileHandle.standardError.write(
                                    Data("busctl: \(error.code.name) (attempt \(attempt)); sending it again with id \(dispatchID)\n".utf8))
                                try await Task.sleep(for: .milliseconds(200))
                            }
                        }
                    } catch let error as BusError where [.outcomeUnknown, .timeout].contains(error.code) {
                        throw BusError(
                            error.code, "\(error.message); retry with the same dispatch id (--id \(dispatchID)): it is applied at most once")
                    }
                    if options.json { return try options.printJSON(ack) }
                    print("\(action) \(ack.applied ? "applied" : "already applied") to \(store) as change \(ack.sequence)")
                }
            }
        }
    }

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

    struct Metrics: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "metrics",
            abstract: "Print the motherboard's metrics in the Prometheus text format (what `--metrics-listen` serves at /metrics).")
        @OptionGroup var options: GlobalOptions

        func run() async throws {
            try await options.withClient { client in
                let metrics = try await client.metrics(timeout: options.deadline)
                if options.json { return try options.printJSON(metrics) }
                print(metrics.text, terminator: "")
            }
        }
    }

    struct Wait: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "wait", abstract: "Wait until a board is live, or with no id until every always-on board is.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The board id.", completion: LiveCompletion.boards) var id: String?

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { try options.validated { _ = try id.map(boardID) } }

        /// The broker too is waited for, within the same timeout; what is still waited for is said
        /// on stderr as it changes.
        func run() async throws {
            let deadline = ContinuousClock.now.advanced(by: options.deadline)
            try await options.withClient(waitingForBroker: deadline) { client in
                let left = max(.zero, ContinuousClock.now.duration(to: deadline))
                if let id {
                    let info = try await client.waitForBoard(try boardID(id), scope: options.scope, timeout: left)
                    if options.json { return try options.printJSON(info) }
                    print("\(info.id) is running (pid \(info.pid))")
                } else {
                    let list = try await client.waitForFleet(timeout: left) { waiting in
                        let names = waiting.map(\.rawValue).joined(separator: ", ")
                        FileHandle.standardError.write(Data("busctl: waiting for \(waiting.count) board(s): \(names)\n".utf8))
                    }
                    if options.json { return try options.printJSON(list) }
                    print("fleet ready: \(list.boards.count) board(s) running")
                }
            }
        }
    }
}

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
        for (action, payload) in store.actions.sorted(by: { $0.key < $1.key }) { print("    dispatch \(action)  \(payload.summary)") }
        for (query, shapes) in (store.queries ?? [:]).sorted(by: { $0.key < $1.key }) {
            print("    query \(query)  \(shapes.request.summary) → \(shapes.reply.summary)")
        }
    }
}

/// A list for people: comma-separated, or "-" when empty.
func listed(_ items: [String]) -> String {
    items.isEmpty ? "-" : items.joined(separator: ", ")
}
