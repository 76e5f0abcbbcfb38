import ArgumentParser
import BoardKit
import BusCore
import Foundation

extension Busctl {
    struct Monitor: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "monitor",
            abstract: "Show the messages the motherboard routes, as it routes them (or read them back from a file).",
            discussion: """
                Filters combine: --board (either end; repeatable), --scope ("/" for the root), --kind (\
                \(MonitorEvent.kindNames.joined(separator: ", "))), --type, --trace. When the monitor falls \
                behind, the motherboard drops lines and says how many.
                """)
        @OptionGroup var options: GlobalOptions
        @Option(name: .customLong("board"), help: "Only messages from or to this board (repeatable).", completion: LiveCompletion.boards)
        var boards: [String] = []
        @Option(name: .customLong("kind"), help: "Only messages of this kind (repeatable).") var kinds: [String] = []
        @Option(name: .customLong("type"), help: "Only this type, command, action or operation name (repeatable).") var types: [String] = []
        @Option(name: .customLong("trace"), help: "Only messages of this trace id (repeatable).") var traces: [String] = []
        @Flag(help: "Show each payload (cut at --cut bytes).") var payload = false
        @Option(parsing: .unconditional, help: "With --payload, bytes of each payload to show (default 200).") var cut: String = "200"
        @Option(help: "Also write what is shown, one JSON object a line, to this file.") var output: String?
        @Option(help: "Show the lines of a file written with --output instead of the motherboard's traffic.") var input: String?
        @Option(parsing: .unconditional, help: "Stop after this many messages.") var count: String?
        @Option(name: .customLong("for"), parsing: .unconditional, help: "Stop after this many seconds.") var duration: String?
        @Option(parsing: .unconditional, help: "Messages the motherboard may send ahead of what this monitor has read (default 1000).")
        var window: String = "\(MonitorRequest.defaultWindow)"

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws { _ = try options.validated { try monitorRequest() } }

        private func monitorRequest() throws -> MonitorRequest {
            for board in boards { _ = try boardID(board) }
            let scopes = options.scopeOption.map { [$0.isEmpty || $0 == "/" ? MonitorEvent.rootScope : $0] } ?? []
            let request = MonitorRequest(
                filter: MonitorFilter(boards: boards, scopes: scopes, kinds: kinds, types: types, traces: traces),
                payloadBytes: payload ? try busctl.count(cut, option: "--cut", maximum: MonitorRequest.maximumPayloadBytes) : 0,
                window: try busctl.count(window, option: "--window", maximum: 100_000))
            try request.validate()
            _ = try count.map { try busctl.count($0, option: "--count") }
            _ = try duration.map { try seconds($0, option: "--for", maximum: GlobalOptions.maximumTimeoutSeconds) }
            return request
        }

        func run() async throws {
            let request = try options.validated { try monitorRequest() }
            let limit = try options.validated { try count.map { try busctl.count($0, option: "--count") } }
            let stopAfter = try options.validated {
                try duration.map { try seconds($0, option: "--for", maximum: GlobalOptions.maximumTimeoutSeconds) }
            }
            let printer = try options.validated { try MonitorPrinter(json: options.json, outputPath: output, limit: limit) }
            defer { printer.close() }
            if let input {
                return try options.validated { try printer.replay(path: input, filter: request.filter, payloadBytes: request.payloadBytes) }
            }
            try await options.withClient { client in
                let stream = try await client.monitor(request, timeout: options.deadline)
                FileHandle.standardError.write(Data("Monitoring the bus at \(client.address.endpoint); Ctrl-C stops.\n".utf8))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await push in stream where !printer.show(push) { return }
                    }
                    if let stopAfter { group.addTask { try await Task.sleep(for: stopAfter) } }
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
    }
}

/// Prints monitor lines (text or JSON) and writes them to a file; counts them against a limit.
final class MonitorPrinter: @unchecked Sendable {
    private let json: Bool
    private let file: FileHandle?
    private let limit: Int?
    private var shown = 0

    init(json: Bool, outputPath: String?, limit: Int?) throws {
        self.json = json
        self.limit = limit
        if let outputPath {
            guard FileManager.default.createFile(atPath: outputPath, contents: nil), let handle = FileHandle(forWritingAtPath: outputPath) else {
                throw BusError(.badArgument, "cannot write --output file \(outputPath)")
            }
            file = handle
        } else {
            file = nil
        }
    }

    /// Shows one push; false once the limit is reached.
    func show(_ push: MonitorPush) -> Bool {
        if push.dropped > 0 {
            emit(text: "… \(push.dropped) messages not shown", json: Self.encode(MonitorPush(dropped: push.dropped, event: nil)))
        }
        guard let event = push.event else { return true }
        emit(text: event.line, json: Self.encode(MonitorPush(event: event)))
        shown += 1
        return limit.map { shown < $0 } ?? true
    }

    /// Shows the lines of a file written with `--output`, through `filter`; payloads cut again at
    /// `payloadBytes` (none when 0). The file is read as a stream and reading stops at `--count`;
    /// a line ``MonitorCaptureReader`` refuses is a `badArgument` naming it.
    func replay(path: String, filter: MonitorFilter, payloadBytes: Int) throws {
        guard let file = FileHandle(forReadingAtPath: path) else {
            throw BusError(.badArgument, "cannot read --input file \(path)")
        }
        defer { try? file.close() }
        var reader = MonitorCaptureReader(source: path)
        var more = true
        while more {
            let chunk = ((try? file.read(upToCount: 1 << 16)) ?? nil).flatMap { $0.isEmpty ? nil : $0 }
            more = try reader.read(chunk) { push in show(Self.cut(push, filter: filter, payloadBytes: payloadBytes)) } && chunk != nil
        }
    }

    /// A push read from a file as a monitor asking with `filter` and `payloadBytes` is sent it:
    /// nothing when its event does not match, its payload cut again.
    private static func cut(_ push: MonitorPush, filter: MonitorFilter, payloadBytes: Int) -> MonitorPush {
        guard var event = push.event else { return push }
        guard filter.matches(event) else { return MonitorPush(event: nil) }
        if payloadBytes == 0 {
            event.payload = nil
            event.payloadCut = nil
        } else if let text = event.payload {
            let excerpt = MonitorEvent.excerpt(Data(text.utf8), limit: payloadBytes)
            event.payload = excerpt.text
            event.payloadCut = excerpt.cut || event.payloadCut == true
        }
        return MonitorPush(event: event)
    }

    func close() {
        try? file?.close()
    }

    private func emit(text: String, json line: String) {
        print(json ? line : text)
        fflushStandardOutput()
        if let file { file.write(Data((line + "\n").utf8)) }
    }

    private static func encode(_ push: MonitorPush) -> String {
        String(decoding: MonitorCaptureReader.line(push), as: UTF8.self)
    }
}
