import BusCore
import BusZeroMQ
import Foundation

/// A process started by a test, with its output in files (no pipe can fill up and block it)
/// and a hard deadline on every wait.
public final class ChildProcess: @unchecked Sendable {
    /// What a finished process left.
    public struct Result: Sendable {
        public var exitCode: Int32
        public var standardOutput: String
        public var standardError: String
    }

    public let process: Process
    let outputPath: String
    let errorPath: String

    /// Starts `executable` with `arguments`, writing its output under `directory`.
    public init(executable: String, arguments: [String], environment: [String: String], directory: String, name: String) throws {
        outputPath = "\(directory)/\(name).out"
        errorPath = "\(directory)/\(name).err"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle(forWritingAtPath: outputPath)
        process.standardError = FileHandle(forWritingAtPath: errorPath)
        try process.runWithDefaultSignalMask()
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    /// What the process has written to stdout so far.
    public var standardOutput: String {
        (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    }

    /// What the process has written to stderr so far.
    public var standardError: String {
        (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
    }

    /// Waits for the process to end; past `timeout` it is killed and `timeout` is thrown.
    public func wait(timeout: Duration) async throws -> Result {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                kill(pid, SIGKILL)
                process.waitUntilExit()
                throw BusError(.timeout, "\(process.executableURL?.lastPathComponent ?? "process") did not finish within \(timeout)")
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return Result(exitCode: process.terminationStatus, standardOutput: standardOutput, standardError: standardError)
    }

    /// Waits until stdout contains `text`, or throws `timeout` (also when the process exits first).
    public func waitForOutput(_ text: String, timeout: Duration) async throws {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !standardOutput.contains(text) {
            guard process.isRunning else {
                throw BusError(.boardNotRunning, "process exited before printing '\(text)': \(standardError)")
            }
            guard ContinuousClock.now < deadline else {
                throw BusError(.timeout, "no '\(text)' within \(timeout); stderr: \(standardError)")
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// How ``stop(grace:)`` ended a process.
    public enum Ending: Sendable, Equatable {
        /// It had already exited.
        case alreadyExited
        /// It exited after SIGTERM.
        case terminated
        /// It ignored SIGTERM for the whole grace period and was killed.
        case killed
    }

    /// SIGTERM, then SIGKILL after `grace`; returns once the process is gone.
    @discardableResult
    public func stop(grace: Duration = .seconds(5)) async -> Ending {
        guard process.isRunning else { return .alreadyExited }
        kill(pid, SIGTERM)
        let deadline = ContinuousClock.now.advanced(by: grace)
        while process.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        guard process.isRunning else { return .terminated }
        kill(pid, SIGKILL)
        process.waitUntilExit()
        return .killed
    }
}
