import FoundationEssentials

/// Reads what `busctl monitor --output` wrote, from chunks of any size: one JSON object a line,
/// a ``MonitorEvent`` or `{"dropped":N}`. A line that is neither, that is longer than
/// ``maximumLineBytes`` or whose time no clock shows is a `badArgument` naming `source:line`.
public struct MonitorCaptureReader {
    /// The longest line read (a monitor line holds at most a 64 KiB excerpt).
    public static let maximumLineBytes = 1 << 20

    public let source: String
    private var pending = Data()
    private var start: Data.Index
    private var number = 0

    public init(source: String) {
        self.source = source
        start = pending.startIndex
    }

    /// Reads the lines `chunk` completes (`nil` at the end of the file, which ends a last line
    /// without a newline), giving each to `each` until it returns false; false then.
    public mutating func read(_ chunk: Data?, _ each: (MonitorPush) throws -> Bool) throws -> Bool {
        let ended = chunk == nil
        if let chunk, !chunk.isEmpty {
            // What is left of the last chunk, then this one: each byte is moved once per chunk.
            pending = pending[start...] + chunk
            start = pending.startIndex
        }
        while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) ?? (ended && start < pending.endIndex ? pending.endIndex : nil) {
            number += 1
            let line = pending[start..<newline]
            start = min(newline + 1, pending.endIndex)
            guard !line.isEmpty else { continue }
            if try !each(try Self.push(line: Data(line), at: "\(source):\(number)")) { return false }
        }
        if pending.endIndex - start > Self.maximumLineBytes {
            throw BusError(.badArgument, "\(source):\(number + 1): a line longer than \(Self.maximumLineBytes) bytes is not a monitor line")
        }
        return true
    }

    /// One line: a drop count or an event at a time a clock shows.
    static func push(line: Data, at place: String) throws -> MonitorPush {
        if let dropped = try? PayloadCodec.decode(DroppedLine.self, from: line) {
            return MonitorPush(dropped: dropped.dropped, event: nil)
        }
        guard let event = try? PayloadCodec.decode(MonitorEvent.self, from: line) else {
            throw BusError(.badArgument, "\(place): not a monitor line")
        }
        guard MonitorEvent.isShowableTime(event.time) else {
            throw BusError(.badArgument, "\(place): time \(event.time) is not a time a monitor wrote")
        }
        return MonitorPush(event: event)
    }

    /// The line written for a push: `{"dropped":N}`, or the event with sorted keys.
    public static func line(_ push: MonitorPush) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let value: Data? = push.event.map { try? encoder.encode($0) } ?? (try? encoder.encode(DroppedLine(dropped: push.dropped)))
        return value ?? Data("{}".utf8)
    }

    struct DroppedLine: Codable {
        var dropped: Int
    }
}
