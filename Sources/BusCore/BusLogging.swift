import FoundationEssentials
import Logging
import Synchronization

/// Logging set-up shared by the broker, boards and tools: swift-log to standard error, with the
/// level taken from `$BOARDBUS_LOG` (trace, debug, info, notice, warning, error, critical).
public enum BusLogging {
    /// Installs the stderr handler once per process. Later calls do nothing (swift-log allows one bootstrap).
    public static func bootstrap(environment: [String: String] = ProcessInfo.processInfo.environment) {
        once.bootstrap(level: level(environment))
    }

    /// BoardBus's handler for one logger: standard error, at `$BOARDBUS_LOG`'s level (info by
    /// default). For a `Logger(label:factory:)` that must not depend on the process's logging system.
    public static func handler(label: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> any LogHandler {
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level(environment)
        return handler
    }

    static func level(_ environment: [String: String]) -> Logger.Level {
        environment["BOARDBUS_LOG"].flatMap { Logger.Level(rawValue: $0.lowercased()) } ?? .info
    }

    private static let once = Once()

    private final class Once: Sendable {
        private let installed = Mutex(false)

        func bootstrap(level: Logger.Level) {
            installed.withLock { installed in
                guard !installed else { return }
                installed = true
                LoggingSystem.bootstrap { label in
                    var handler = StreamLogHandler.standardError(label: label)
                    handler.logLevel = level
                    return handler
                }
            }
        }
    }
}
