import BusCore
import Foundation
import Subprocess
import Synchronization

#if canImport(System)
    import System
#else
    import SystemPackage
#endif

/// A process started by a test, with its output in files (no pipe can fill up and block it)
/// and a hard deadline on every wait.
///
/// Spawned and waited for by swift-subprocess: the child starts with no signal blocked (so
/// SIGTERM reaches it), and its end is an event (the kernel's pidfd) rather than something polled.
public final class ChildProcess: Sendable {
    /// What a finished process left.
    public struct Result: Sendable {
        /// The exit status, or 128 + the signal that ended it (as a shell reports it).
        public var exitCode: Int32
        public var standardOutput: String
        public var standardError: String

        /// The standard output decoded as JSON (e.g. of `busctl … --json`).
        public func decodedOutput<T: Decodable>(as type: T.Type) throws -> T {
            try JSONDecoder().decode(T.self, from: Data(standardOutput.utf8))
        }
    }

    public let pid: Int32
    /// The executable's file name, for messages.
    public let name: String
    let outputPath: String
    let errorPath: String
    /// Runs as long as the process does; its value is the exit code.
    private let termination: Task<Int32, Never>
    /// Set once the process has been reaped.
    private let exit = ExitCode()

    private final class ExitCode: Sendable {
        let code = Mutex<Int32?>(nil)
        func set(_ value: Int32) { code.withLock { $0 = value } }
        var value: Int32? { code.withLock { $0 } }
    }

    /// Starts `executable` with `arguments`, writing its output under `directory`.
    public init(executable: String, arguments: [String], environment: [String: String], directory: String, name: String) async throws {
        outputPath = "\(directory)/\(name).out"
        errorPath = "\(directory)/\(name).err"
        self.name = (executable as NSString).lastPathComponent
        let output = try FileDescriptor.open(
            FilePath(outputPath), .writeOnly, options: [.create, .truncate], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        let error: FileDescriptor
        do {
            error = try FileDescriptor.open(
                FilePath(errorPath), .writeOnly, options: [.create, .truncate], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch {
            try? output.close()
            throw error
        }
        var variables: [Environment.Key: String] = [:]
        for (key, value) in environment {
            if let key = Environment.Key(rawValue: key) { variables[key] = value }
        }
        let (spawned, reportSpawn) = AsyncStream.makeStream(of: Swift.Result<Int32, any Error>.self)
        let exit = self.exit
        // Detached: the process outlives whatever task started it, and no executor preference of
        // the caller's (a socket loop's) may be asked to run the wait.
        termination = Task.detached {
            defer { reportSpawn.finish() }
            do {
                let outcome = try await Subprocess.run(
                    .path(FilePath(executable)), arguments: Arguments(arguments), environment: .custom(variables),
                    input: .none, output: .fileDescriptor(output, closeAfterSpawningProcess: true),
                    error: .fileDescriptor(error, closeAfterSpawningProcess: true)
                ) { execution in
                    reportSpawn.yield(.success(execution.processIdentifier.value))
                }
                let code: Int32 =
                    switch outcome.terminationStatus {
                    case .exited(let code): code
                    case .signaled(let signal): 128 + signal
                    }
                exit.set(code)
                return code
            } catch {
                reportSpawn.yield(.failure(error))
                exit.set(127)
                return 127
            }
        }
        var reports = spawned.makeAsyncIterator()
        guard let first = await reports.next() else {
            throw BusError(.transport, "\(self.name) did not start")
        }
        pid = try first.get()
    }

    public var isRunning: Bool { exit.value == nil }

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
        guard let code = await ended(within: timeout) else {
            kill(pid, SIGKILL)
            _ = await termination.value
            throw BusError(.timeout, "\(name) did not finish within \(timeout)")
        }
        return Result(exitCode: code, standardOutput: standardOutput, standardError: standardError)
    }

    /// The exit code once the process has ended, or nil if it still runs after `timeout`.
    private func ended(within timeout: Duration) async -> Int32? {
        let termination = self.termination
        return await value(within: timeout) { await termination.value }
    }

    /// Waits until stdout contains `text`, or throws `timeout` (also when the process exits first).
    ///
    /// Output goes to a file, which has no event to wait on: this one wait looks at it every 10 ms.
    public func waitForOutput(_ text: String, timeout: Duration) async throws {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !standardOutput.contains(text) {
            guard isRunning else {
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
        guard isRunning else { return .alreadyExited }
        kill(pid, SIGTERM)
        if await ended(within: grace) != nil { return .terminated }
        kill(pid, SIGKILL)
        _ = await termination.value
        return .killed
    }

    /// SIGKILL, and returns once the process is gone.
    public func killAndWait() async {
        guard isRunning else { return }
        kill(pid, SIGKILL)
        _ = await termination.value
    }
}
