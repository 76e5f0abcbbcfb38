import BoardKit
import BusCore
import Foundation

/// A real fleet for a test: a `motherboard` and its boards in a fresh `mktemp -d` runtime
/// directory, talking over real ZeroMQ `ipc://` sockets.
///
/// ```swift
/// try await TestFleet.with(manifest: json) { fleet in
///     let result = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#)
///     #expect(result.exitCode == 0)
/// }
/// ```
/// `with` always stops what it started (broker, boards, extra processes), by pid, and removes
/// the directory, whether the body passes, fails or throws.
public final class TestFleet: @unchecked Sendable {
    /// The temporary directory; the runtime directory is inside it.
    public let directory: String
    public let address: BusAddress
    /// The fleet's state directory (stores, keys): `<directory>/state`, unless the broker's
    /// environment names another (`BOARDBUS_STATE_DIR`, e.g. one that outlives this fleet).
    public let stateDirectory: String
    /// Where `motherboard`, `busctl` and the service executables are.
    public let binaryDirectory: String
    private var broker: ChildProcess
    private let manifestPath: String
    /// Set for the broker on top of the fleet's environment (e.g. `NOTIFY_SOCKET`).
    private let brokerEnvironment: [String: String]
    /// A command the broker is started under (e.g. `prlimit --nofile=256:256 --`), or none.
    private let brokerLauncher: [String]
    /// More arguments for the broker (e.g. `--listen`).
    private let brokerArguments: [String]
    private var extras: [ChildProcess] = []
    private let lock = NSLock()
    private var outputCounter = 0

    /// Starts a fleet from a manifest (JSON text), runs `body`, and stops everything.
    /// `brokerEnvironment` is set for the broker (and so its boards) on top of the fleet's own;
    /// `brokerLauncher` is a command that runs the broker (it must exec it, keeping its pid);
    /// `brokerArguments` are added to the broker's own.
    public static func with<T>(
        manifest: String, waitForFleet: Bool = true, startupTimeout: Duration = .seconds(60), brokerEnvironment: [String: String] = [:],
        brokerLauncher: [String] = [], brokerArguments: [String] = [], _ body: (TestFleet) async throws -> T
    ) async throws -> T {
        let fleet = try await TestFleet(
            manifest: manifest, startupTimeout: startupTimeout, waitForFleet: waitForFleet, brokerEnvironment: brokerEnvironment,
            brokerLauncher: brokerLauncher, brokerArguments: brokerArguments)
        return try await using(fleet, stop: { await $0.stop() }, body)
    }

    private init(
        manifest: String, startupTimeout: Duration, waitForFleet: Bool, brokerEnvironment: [String: String], brokerLauncher: [String],
        brokerArguments: [String]
    ) async throws {
        self.brokerEnvironment = brokerEnvironment
        self.brokerLauncher = brokerLauncher
        self.brokerArguments = brokerArguments
        binaryDirectory = try TestFleet.locateBinaries()
        let template = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-test-XXXXXX").path
        var buffer = Array(template.utf8CString)
        guard mkdtemp(&buffer) != nil else { throw BusError(.transport, "mkdtemp failed") }
        directory = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        address = BusAddress(runtimeDirectory: "\(directory)/run")
        stateDirectory = brokerEnvironment["BOARDBUS_STATE_DIR"] ?? "\(directory)/state"
        manifestPath = "\(directory)/fleet.json"
        try manifest.write(toFile: manifestPath, atomically: true, encoding: .utf8)
        do {
            broker = try await TestFleet.startBroker(
                binaryDirectory: binaryDirectory, manifestPath: manifestPath, address: address, directory: directory, name: "motherboard",
                environment: ["BOARDBUS_STATE_DIR": stateDirectory].merging(brokerEnvironment) { $1 }, launcher: brokerLauncher,
                arguments: brokerArguments)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        do {
            try await broker.waitForOutput("READY", timeout: startupTimeout)
            if waitForFleet {
                let result = try await busctl("wait", timeout: startupTimeout)
                guard result.exitCode == 0 else {
                    throw BusError(.timeout, "fleet not ready: \(result.standardError)")
                }
            }
        } catch {
            await stop()
            throw error
        }
    }

    private static func startBroker(
        binaryDirectory: String, manifestPath: String, address: BusAddress, directory: String, name: String, environment: [String: String],
        launcher: [String], arguments: [String]
    ) async throws -> ChildProcess {
        let command =
            launcher + [try executable("motherboard", in: binaryDirectory)]
            + ["--manifest", manifestPath, "--runtime-dir", address.runtimeDirectory, "--exit-with-parent"] + arguments
        return try await ChildProcess(
            executable: command[0], arguments: Array(command.dropFirst()),
            environment: TestFleet.environment(for: address).merging(environment) { $1 }, directory: directory, name: name)
    }

    /// Kills the broker with SIGKILL (its boards live on) and starts a new one on the same
    /// runtime directory; returns once it is READY. `whileDown` runs between the two (what others
    /// see while no broker runs).
    public func restartBrokerAfterKill(timeout: Duration = .seconds(30), whileDown: () async throws -> Void = {}) async throws {
        let old = lock.withLock { broker }
        kill(old.pid, SIGKILL)
        _ = try? await old.wait(timeout: .seconds(10))
        try await whileDown()
        let fresh = try await TestFleet.startBroker(
            binaryDirectory: binaryDirectory, manifestPath: manifestPath, address: address, directory: directory,
            name: nextOutputName("motherboard"), environment: ["BOARDBUS_STATE_DIR": stateDirectory].merging(brokerEnvironment) { $1 },
            launcher: brokerLauncher, arguments: brokerArguments)
        lock.withLock { broker = fresh }
        try await fresh.waitForOutput("READY", timeout: timeout)
    }

    /// The environment a client of this fleet needs.
    public static func environment(for address: BusAddress) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["BOARDBUS_RUNTIME_DIR"] = address.runtimeDirectory
        environment["BOARDBUS_ADDRESS"] = address.endpoint
        environment["BOARDBUS_BOARD_ID"] = nil
        return environment
    }

    /// The environment of this fleet's clients and hand-started boards: its address and its
    /// state directory.
    public var environment: [String: String] {
        var environment = TestFleet.environment(for: address)
        environment["BOARDBUS_STATE_DIR"] = stateDirectory
        return environment
    }

    /// Runs `busctl` against this fleet and returns its exit code and output.
    public func busctl(_ arguments: String..., timeout: Duration = .seconds(30)) async throws -> ChildProcess.Result {
        try await run("busctl", arguments: arguments, timeout: timeout)
    }

    /// Runs one of the package's executables (or a program by absolute path) to completion against
    /// this fleet.
    public func run(_ executable: String, arguments: [String], timeout: Duration = .seconds(30)) async throws -> ChildProcess.Result {
        let child = try await ChildProcess(
            executable: try TestFleet.executable(executable, in: binaryDirectory), arguments: arguments,
            environment: environment, directory: directory, name: nextOutputName((executable as NSString).lastPathComponent))
        return try await child.wait(timeout: timeout)
    }

    /// Starts a board executable by hand (outside the manifest) under `id`, and waits for its READY line.
    public func startBoard(_ executable: String, id: BoardID, timeout: Duration = .seconds(30)) async throws -> ChildProcess {
        try await startBoard(path: try TestFleet.executable(executable, in: binaryDirectory), arguments: [], id: id, timeout: timeout)
    }

    /// Starts any board program (e.g. one written in another language) with this fleet's
    /// environment and `BOARDBUS_BOARD_ID`, and waits for its READY line.
    public func startBoard(path: String, arguments: [String], id: BoardID, timeout: Duration = .seconds(30)) async throws -> ChildProcess {
        var environment = environment
        environment["BOARDBUS_BOARD_ID"] = id.rawValue
        let child = try await ChildProcess(
            executable: path, arguments: arguments, environment: environment,
            directory: directory, name: nextOutputName(id.rawValue))
        lock.withLock { extras.append(child) }
        try await child.waitForOutput("READY", timeout: timeout)
        return child
    }

    /// A client connected to this fleet, closed when `body` returns.
    public func withClient<T>(_ body: (BusClient) async throws -> T) async throws -> T {
        let client = try BusClient(address: address)
        defer { client.close() }
        return try await body(client)
    }

    /// The pid the broker recorded for a board it started, from its pid file.
    public func pid(of board: BoardID, scope: Scope = .root) -> Int32? {
        let stem = scope.isRoot ? board.rawValue : "\(board)@\(scope.name)"
        let path = "\(address.runtimeDirectory)/pids/\(stem).pid"
        return (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// The broker's process id.
    public var brokerPID: Int32 { lock.withLock { broker.pid } }

    /// The broker's log so far.
    public var brokerLog: String { lock.withLock { broker.standardError } }

    /// Stops the broker (which stops its boards), the extra boards, then anything whose pid file
    /// is left; removes the directory.
    public func stop() async {
        for child in lock.withLock({ extras }) { await child.stop() }
        await lock.withLock { broker }.stop(grace: .seconds(10))
        let pidDirectory = "\(address.runtimeDirectory)/pids"
        for file in (try? FileManager.default.contentsOfDirectory(atPath: pidDirectory)) ?? [] {
            if let text = try? String(contentsOfFile: "\(pidDirectory)/\(file)", encoding: .utf8),
                let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0,
                isOurs(pid)
            {
                kill(pid, SIGKILL)
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Whether `pid` still runs one of this package's executables (a pid file may outlive its process).
    private func isOurs(_ pid: Int32) -> Bool {
        let executable = URL(fileURLWithPath: "/proc/\(pid)/exe").resolvingSymlinksInPath().path
        return executable.hasPrefix(binaryDirectory + "/")
    }

    private func nextOutputName(_ base: String) -> String {
        lock.withLock {
            outputCounter += 1
            return "\(base)-\(outputCounter)"
        }
    }

    /// The path of one of the build products (or `name` itself when it is an absolute path), or a
    /// `badArgument` that says how to get it built.
    static func executable(_ name: String, in binaryDirectory: String) throws -> String {
        let path = name.hasPrefix("/") ? name : "\(binaryDirectory)/\(name)"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw BusError(
                .badArgument,
                """
                no '\(name)' in \(binaryDirectory): a test target that uses TestFleet must depend on the \
                product that builds it (BoardBus's `motherboard` and `busctl`, or your board's executable), \
                or BOARDBUS_BIN_DIR must name the directory that has it
                """)
        }
        return path
    }

    /// Finds the build products (`motherboard`, `busctl`, the services): `$BOARDBUS_BIN_DIR`, else
    /// the directory of the running test binary.
    public static func locateBinaries() throws -> String {
        if let explicit = ProcessInfo.processInfo.environment["BOARDBUS_BIN_DIR"], !explicit.isEmpty { return explicit }
        var directory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent("motherboard").path) {
                return directory.path
            }
            directory = directory.deletingLastPathComponent()
        }
        throw BusError(
            .badArgument,
            """
            cannot find the motherboard executable beside the test binary: make the test target depend on \
            BoardBus's `motherboard` and `busctl` products (`swift build` builds them), or set BOARDBUS_BIN_DIR
            """)
    }
}
