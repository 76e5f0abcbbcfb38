import BusCore
import Foundation
import Logging
import Synchronization

/// Starts board processes from the manifest and stops exactly the ones it started.
///
/// Each board gets `BOARDBUS_ADDRESS`, `BOARDBUS_RUNTIME_DIR`, `BOARDBUS_BOARD_ID` and
/// `BOARDBUS_SCOPE` in its environment, its output in `<runtime>/logs/<id>.log` and a pid file in
/// `<runtime>/pids/<id>.pid` (`<id>@<scope>` outside the root scope), so `scripts/fleet` and tests
/// can find it.
public final class BoardLauncher: Sendable {
    private struct Child: @unchecked Sendable {
        let id: BoardID
        let process: Process
    }

    private let address: BusAddress
    private let binaryDirectory: String
    private let logger: Logger
    private let children = Mutex<[Int32: Child]>([:])
    private let onExit: @Sendable (Int32, String) -> Void

    public init(address: BusAddress, binaryDirectory: String, logger: Logger, onExit: @escaping @Sendable (Int32, String) -> Void) {
        self.address = address
        self.binaryDirectory = binaryDirectory
        self.logger = logger
        self.onExit = onExit
    }

    var pidDirectory: String { "\(address.runtimeDirectory)/pids" }
    var logDirectory: String { "\(address.runtimeDirectory)/logs" }

    /// Starts one board's process and returns its pid.
    @discardableResult
    public func start(_ board: FleetManifest.Board) throws -> Int32 {
        let fileManager = FileManager.default
        try fileManager.createDirectory(atPath: pidDirectory, withIntermediateDirectories: true)
        try fileManager.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
        let executable = board.executable.hasPrefix("/") ? board.executable : "\(binaryDirectory)/\(board.executable)"
        guard fileManager.isExecutableFile(atPath: executable) else {
            throw BusError(.badArgument, "board '\(board.id)': no executable at \(executable)")
        }
        let stem = BoardLauncher.fileStem(board)
        let logPath = "\(logDirectory)/\(stem).log"
        if !fileManager.fileExists(atPath: logPath) { _ = fileManager.createFile(atPath: logPath, contents: nil) }
        guard let log = FileHandle(forWritingAtPath: logPath) else {
            throw BusError(.transport, "cannot open log file \(logPath)")
        }
        log.seekToEndOfFile()

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = board.arguments
        var environment = ProcessInfo.processInfo.environment
        environment["BOARDBUS_ADDRESS"] = address.endpoint
        environment["BOARDBUS_RUNTIME_DIR"] = address.runtimeDirectory
        environment["BOARDBUS_BOARD_ID"] = board.id.rawValue
        environment["BOARDBUS_SCOPE"] = board.scope
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        let id = board.id
        let pidFile = "\(pidDirectory)/\(stem).pid"
        process.terminationHandler = { [weak self] finished in
            let status = finished.terminationReason == .uncaughtSignal
                ? "signal \(finished.terminationStatus)" : "exit \(finished.terminationStatus)"
            self?.finished(pid: finished.processIdentifier, id: id, pidFile: pidFile, status: status)
        }
        try process.runWithDefaultSignalMask()
        try? log.close()
        let pid = process.processIdentifier
        children.withLock { $0[pid] = Child(id: id, process: process) }
        try "\(pid)\n".write(toFile: pidFile, atomically: true, encoding: .utf8)
        logger.info("started board", metadata: ["board": "\(id)", "pid": "\(pid)", "log": "\(logPath)"])
        return pid
    }

    /// The name of a board's pid and log files: `<id>` in the root scope, `<id>@<scope>` elsewhere.
    public static func fileStem(_ board: FleetManifest.Board) -> String {
        board.scope.isEmpty ? board.id.rawValue : "\(board.id)@\(board.scope)"
    }

    private func finished(pid: Int32, id: BoardID, pidFile: String, status: String) {
        let removed = children.withLock { $0.removeValue(forKey: pid) }
        guard removed != nil else { return }
        try? FileManager.default.removeItem(atPath: pidFile)
        logger.info("board process ended", metadata: ["board": "\(id)", "pid": "\(pid)", "status": "\(status)"])
        onExit(pid, status)
    }

    /// The pids of the processes still running.
    public var runningPIDs: [Int32] {
        children.withLock { Array($0.keys) }
    }

    /// Sends SIGTERM to every child, waits up to `gracePeriod`, then SIGKILLs what is left.
    public func stopAll(gracePeriod: Duration = .seconds(3)) async {
        let pids = runningPIDs
        for pid in pids { kill(pid, SIGTERM) }
        let deadline = ContinuousClock.now.advanced(by: gracePeriod)
        while !runningPIDs.isEmpty && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        let stubborn = children.withLock { $0 }
        for (pid, child) in stubborn {
            logger.warning("board ignored SIGTERM; killing", metadata: ["board": "\(child.id)", "pid": "\(pid)"])
            kill(pid, SIGKILL)
            child.process.waitUntilExit()
        }
        // Wait briefly for termination handlers so pid files are gone when we return.
        let settle = ContinuousClock.now.advanced(by: .seconds(1))
        while !runningPIDs.isEmpty && ContinuousClock.now < settle {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
