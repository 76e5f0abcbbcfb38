import Logging
import Synchronization

/// The lines a logger was given, with their levels.
package final class RecordedLog: Sendable {
    private let lines = Mutex<[(level: Logger.Level, message: String)]>([])

    package init() {}

    package func count(of message: String, atLeast level: Logger.Level) -> Int {
        lines.withLock { $0.filter { $0.message == message && $0.level >= level }.count }
    }

    package var logger: Logger {
        Logger(label: "recorded") { _ in Handler(log: self) }
    }

    struct Handler: LogHandler {
        let log: RecordedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            log.lines.withLock { $0.append((event.level, event.message.description)) }
        }
    }
}
