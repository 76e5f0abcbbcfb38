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
        @Option(name: .customLong("board"), help: "Only messages from or to this board (repeatable).") var boards: [String] = []
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
            emit(text: "… \(push.dropped) messages not shown", json: Self.encode(DroppedLine(dropped: push.dropped)))
        }
        guard let event = push.event else { return true }
        emit(text: event.line, json: Self.encode(event))
        shown += 1
        return limit.map { shown < $0 } ?? true
    }

    /// The longest line `--input` reads (a monitor line holds at most a 64 KiB excerpt).
    static let maximumInputLineBytes = 1 << 20

    /// Shows the lines of a file written with `--output`, through `filter`; payloads cut again at
    /// `payloadBytes` (none when 0). The file is read as a stream, a line at a time, and reading
    /// stops at `--count`; a line that is not a monitor line, that is longer than
    /// ``maximumInputLineBytes`` or whose time no clock shows, is a `badArgument` naming it.
    func replay(path: String, filter: MonitorFilter, payloadBytes: Int) throws {
        guard let file = FileHandle(forReadingAtPath: path) else {
            throw BusError(.badArgument, "cannot read --input file \(path)")
        }
        defer { try? file.close() }
        var pending = Data()
        var start = pending.startIndex
        var number = 0
        var ended = false
        while !ended {
            let chunk = (try? file.read(upToCount: 1 << 16)) ?? nil
            if let chunk, !chunk.isEmpty {
                // What is left of the last read, then this one: each byte is moved once per read.
                pending = pending[start...] + chunk
                start = pending.startIndex
            } else {
                ended = true
            }
            while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) ?? (ended && start < pending.endIndex ? pending.endIndex : nil) {
                number += 1
                let line = pending[start..<newline]
                start = min(newline + 1, pending.endIndex)
                guard !line.isEmpty else { continue }
                if try !replay(line: Data(line), number: number, path: path, filter: filter, payloadBytes: payloadBytes) { return }
            }
            if pending.endIndex - start > Self.maximumInputLineBytes {
                throw BusError(.badArgument, "\(path):\(number + 1): a line longer than \(Self.maximumInputLineBytes) bytes is not a monitor line")
            }
        }
    }

    /// Shows one line of a `--input` file; false once the limit is reached.
    private func replay(line: Data, number: Int, path: String, filter: MonitorFilter, payloadBytes: Int) throws -> Bool {
        if let dropped = try? PayloadCodec.decode(DroppedLine.self, from: line) {
            return show(MonitorPush(dropped: dropped.dropped, event: nil))
        }
        guard var event = try? PayloadCodec.decode(MonitorEvent.self, from: line) else {
            throw BusError(.badArgument, "\(path):\(number): not a monitor line")
        }
        guard MonitorEvent.isShowableTime(event.time) else {
            throw BusError(.badArgument, "\(path):\(number): time \(event.time) is not a time a monitor wrote")
        }
        guard filter.matches(event) else { return true }
        if payloadBytes == 0 {
            event.payload = nil
            event.payloadCut = nil
        } else if let text = event.payload {
            let excerpt = MonitorEvent.excerpt(Data(text.utf8), limit: payloadBytes)
            event.payload = excerpt.text
            event.payloadCut = excerpt.cut || event.payloadCut == true
        }
        return show(MonitorPush(event: event))
    }

    func close() {
        try? file?.close()
    }

    private func emit(text: String, json line: String) {
        print(json ? line : text)
        fflushStandardOutput()
        if let file { file.write(Data((line + "\n").utf8)) }
    }

    private struct DroppedLine: Codable {
        var dropped: Int
    }

    private static func encode<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}
