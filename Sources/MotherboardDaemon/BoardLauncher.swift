import BusCore
import MotherboardCore
import Foundation
import Logging
import Synchronization

/// Starts board processes from the manifest and stops exactly the ones it started.
///
/// Each board gets `BOARDBUS_ADDRESS`, `BOARDBUS_RUNTIME_DIR`, `BOARDBUS_STATE_DIR`,
/// `BOARDBUS_BOARD_ID`, `BOARDBUS_SCOPE` and a new `BOARDBUS_BOARD_SECRET` in its environment, its output in
/// `<runtime>/logs/<id>.log` and a pid file in `<runtime>/pids/<id>.pid` (`<id>@<scope>` outside
/// the root scope), so `scripts/fleet` and tests can find it. The secret is also kept beside the
/// pid file (`.secret`, mode 0600) so that a restarted broker can check the registration of a
/// process it adopts.
public final class BoardLauncher: Sendable {
    private struct Child: @unchecked Sendable {
        let id: BoardID
        /// Nil for a process adopted from an earlier broker (not our child).
        let process: Process?
        let pidFile: String
        var secretFile: String { Self.secretFile(pidFile) }
        static func secretFile(_ pidFile: String) -> String {
            (pidFile as NSString).deletingPathExtension + ".secret"
        }
    }

    private let address: BusAddress
    /// Where the boards keep what must survive (their stores): the broker's state directory.
    private let stateDirectory: String
    private let binaryDirectory: String
    private let logger: Logger
    private let children = Mutex<[Int32: Child]>([:])
    /// Set by ``stopAll(gracePeriod:)``: the processes that end from then on are being stopped,
    /// not failing, so their ends are not reported (nothing restarts them).
    private let stopping = Atomic<Bool>(false)
    private let onExit: @Sendable (Int32, String, Bool) -> Void
    private let logs: Logs
    /// The log writers started, by pid, until they end (with their boards).
    private let writers = Mutex<[Int32: Process]>([:])

    /// How boards' output reaches `<runtime>/logs/<stem>.log`.
    public struct Logs: Sendable {
        /// The command run beside each board to write its log (`boardbus-log-writer`, to which
        /// `--max-bytes N --keep K <path>` are added), reading the board's output from a pipe.
        /// Nil: the board writes its file itself (open for append) and only the broker's
        /// directory watch rotates it.
        public var writer: [String]?
        /// A log is rotated before it passes this size; 0: never (no writer is started).
        public var maximumBytes: Int
        public var generations: Int

        public init(writer: [String]? = nil, maximumBytes: Int = 0, generations: Int = 3) {
            self.writer = writer
            self.maximumBytes = maximumBytes
            self.generations = generations
        }
    }

    /// - Parameter onExit: called with the pid, a description of how it ended, and whether it
    ///   exited cleanly (status 0), for processes this launcher started.
    public init(
        address: BusAddress, stateDirectory: String, binaryDirectory: String, logger: Logger, logs: Logs = Logs(),
        onExit: @escaping @Sendable (Int32, String, Bool) -> Void
    ) {
        self.logs = logs
        self.address = address
        self.stateDirectory = stateDirectory
        self.binaryDirectory = binaryDirectory
        self.logger = logger
        self.onExit = onExit
    }

    var pidDirectory: String { "\(address.runtimeDirectory)/pids" }
    var logDirectory: String { "\(address.runtimeDirectory)/logs" }

    /// Starts one board's process with a new registration secret.
    @discardableResult
    public func start(_ board: FleetManifest.Board) throws -> LaunchedProcess {
        // Nothing new while the fleet stops: a restart or an on-demand start then would outlive
        // the SIGTERM round.
        guard !stopping.load(ordering: .acquiring) else {
            throw BusError(.boardNotRunning, "board '\(board.id)': the motherboard is stopping")
        }
        let fileManager = FileManager.default
        try fileManager.createDirectory(atPath: pidDirectory, withIntermediateDirectories: true)
        try fileManager.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
        let executable = executablePath(board)
        guard fileManager.isExecutableFile(atPath: executable) else {
            throw BusError(.badArgument, "board '\(board.id)': no executable at \(executable)")
        }
        let stem = BoardLauncher.fileStem(board)
        let logPath = "\(logDirectory)/\(stem).log"
        let log = try openLog(logPath)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = board.arguments
        var environment = ProcessInfo.processInfo.environment
        // The service manager's notify socket is the broker's alone (as sd_notify's
        // unset_environment would leave it).
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["BOARDBUS_ADDRESS"] = address.endpoint
        environment["BOARDBUS_RUNTIME_DIR"] = address.runtimeDirectory
        environment["BOARDBUS_STATE_DIR"] = stateDirectory
        environment["BOARDBUS_BOARD_ID"] = board.id.rawValue
        environment["BOARDBUS_SCOPE"] = board.scope.name
        let secret = Registration.makeSecret()
        environment["BOARDBUS_BOARD_SECRET"] = secret
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        let id = board.id
        let pidFile = "\(pidDirectory)/\(stem).pid"
        process.terminationHandler = { [weak self] finished in
            let signalled = finished.terminationReason == .uncaughtSignal
            let status = signalled ? "signal \(finished.terminationStatus)" : "exit \(finished.terminationStatus)"
            self?.finished(
                pid: finished.processIdentifier, id: id, status: status, clean: !signalled && finished.terminationStatus == 0)
        }
        try process.runWithDefaultSignalMask()
        try? log.close()
        let pid = process.processIdentifier
        // Under the children's lock, as their removal in `finished`: an earlier instance of the
        // board whose end is handled only now must not take this one's files with it.
        try children.withLock { children in
            children[pid] = Child(id: id, process: process, pidFile: pidFile)
            _ = fileManager.createFile(atPath: Child.secretFile(pidFile), contents: Data(secret.utf8), attributes: [.posixPermissions: 0o600])
            try "\(pid)\n".write(toFile: pidFile, atomically: true, encoding: .utf8)
        }
        logger.info("started board", metadata: ["board": "\(id)", "pid": "\(pid)", "log": "\(logPath)"])
        return LaunchedProcess(pid: pid, secret: secret)
    }

    /// Where the board's standard output and error go: the write end of a pipe to a log writer
    /// started for it, or the file itself, open for append (every write goes to the end as it is
    /// then, so a log truncated by a rotation — the broker's or logrotate's copytruncate — goes
    /// on at its new end, with no hole).
    private func openLog(_ logPath: String) throws -> FileHandle {
        guard let command = logs.writer, let executable = command.first, logs.maximumBytes > 0 else {
            let descriptor = open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else {
                throw BusError(.transport, "cannot open log file \(logPath): \(String(cString: strerror(errno)))")
            }
            return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        }
        var ends: [Int32] = [-1, -1]
        // Close-on-exec at once: the write end must reach this board only, or the writer would
        // wait for another process's end too. (Boards are started from one thread.)
        guard pipe(&ends) == 0, fcntl(ends[0], F_SETFD, FD_CLOEXEC) == 0, fcntl(ends[1], F_SETFD, FD_CLOEXEC) == 0 else {
            throw BusError(.transport, "cannot make a pipe for \(logPath): \(String(cString: strerror(errno)))")
        }
        let readEnd = FileHandle(fileDescriptor: ends[0], closeOnDealloc: true)
        let writeEnd = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
        defer { try? readEnd.close() }
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: executable)
        writer.arguments = command.dropFirst() + ["--max-bytes", "\(logs.maximumBytes)", "--keep", "\(logs.generations)", logPath]
        writer.standardInput = readEnd
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        writer.terminationHandler = { [weak self] finished in
            _ = self?.writers.withLock { $0.removeValue(forKey: finished.processIdentifier) }
        }
        do {
            try writer.runWithDefaultSignalMask()
        } catch {
            throw BusError(.transport, "cannot start the log writer for \(logPath): \(error)")
        }
        writers.withLock { $0[writer.processIdentifier] = writer }
        return writeEnd
    }

    /// The name of a board's pid and log files: `<id>` in the root scope, `<id>@<scope>` elsewhere.
    public static func fileStem(_ board: FleetManifest.Board) -> String {
        board.scope.isRoot ? board.id.rawValue : "\(board.id)@\(board.scope.name)"
    }

    private func finished(pid: Int32, id: BoardID, status: String, clean: Bool) {
        guard forget(pid) != nil else { return }
        if stopping.load(ordering: .acquiring) {
            logger.info("board stopped", metadata: ["board": "\(id)", "pid": "\(pid)", "status": "\(status)"])
            return
        }
        logger.info("board process ended", metadata: ["board": "\(id)", "pid": "\(pid)", "status": "\(status)"])
        onExit(pid, status, clean)
    }

    /// Forgets the process `pid` (when `it` says so of it) and removes its pid and secret files
    /// while the pid file still names it, under the children's lock, where ``start(_:)`` writes
    /// them: the end of a process is handled after it happened (on Foundation's thread), by which
    /// time the board may run again, with files of its own under the same names.
    private func forget(_ pid: Int32, if it: (Child) -> Bool = { _ in true }) -> Child? {
        children.withLock { children in
            guard let child = children[pid], it(child) else { return nil }
            children[pid] = nil
            let named = Self.pid(inFile: child.pidFile)
            if named == nil || named == pid {
                try? FileManager.default.removeItem(atPath: child.pidFile)
                try? FileManager.default.removeItem(atPath: child.secretFile)
            }
            return child
        }
    }

    private func executablePath(_ board: FleetManifest.Board) -> String {
        board.executablePath(binaryDirectory: binaryDirectory)
    }

    /// A live process of this board left by an earlier broker of the fleet (its pid file names a
    /// process that runs the board's executable): adopted instead of started twice. Its end is
    /// noticed through heartbeats, not `onExit`.
    public func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess? {
        let pidFile = "\(pidDirectory)/\(BoardLauncher.fileStem(board)).pid"
        guard let pid = Self.pid(inFile: pidFile), pid > 0, isRunning(pid),
            URL(fileURLWithPath: "/proc/\(pid)/exe").resolvingSymlinksInPath().path
                == URL(fileURLWithPath: executablePath(board)).resolvingSymlinksInPath().path
        else { return nil }
        children.withLock { $0[pid] = Child(id: board.id, process: nil, pidFile: pidFile) }
        let secret = try? String(contentsOfFile: Child.secretFile(pidFile), encoding: .utf8)
        logger.info("adopted running board", metadata: ["board": "\(board.id)", "pid": "\(pid)"])
        return LaunchedProcess(pid: pid, secret: secret)
    }

    /// The pid a pid file names, if it can be read.
    private static func pid(inFile path: String) -> Int32? {
        (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// Whether a process is alive (and not a zombie).
    public func isRunning(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        return Self.state(of: pid) != "Z"
    }

    /// Whether a process is stopped: by a signal (`T`), a debugger (`t`), or its cgroup's freezer
    /// (`docker pause`, `systemctl freeze`), under which its state still reads `S` or `D`.
    public func isStopped(_ pid: Int32) -> Bool {
        let state = Self.state(of: pid)
        return state == "T" || state == "t" || Self.isInFrozenCgroup(pid)
    }

    /// The state letter of `/proc/PID/stat`: the byte after the name, which is in parentheses and
    /// may hold spaces, parentheses and bytes that are not UTF-8 (the kernel cuts it at 15 bytes),
    /// so the last `)` ends it. Nil when unreadable.
    static func state(of pid: Int32) -> Character? {
        guard let stat = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return nil }
        return state(inStat: Array(stat))
    }

    static func state(inStat stat: [UInt8]) -> Character? {
        guard let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        return stat[(close + 1)...].first { $0 != UInt8(ascii: " ") }.map { Character(Unicode.Scalar($0)) }
    }

    /// Whether one of the process's cgroups is frozen: cgroup v2's `cgroup.events` says
    /// `frozen 1`, or v1's freezer is not `THAWED`.
    static func isInFrozenCgroup(_ pid: Int32) -> Bool {
        guard let cgroups = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8) else { return false }
        return frozenCgroupFiles(inProcCgroup: cgroups).contains { file, frozen in
            (try? String(contentsOfFile: file, encoding: .utf8)).map(frozen) ?? false
        }
    }

    /// For each line of `/proc/PID/cgroup` that names a freezer, the file that says whether it is
    /// frozen, and how to read it.
    static func frozenCgroupFiles(inProcCgroup text: String) -> [(file: String, frozen: (String) -> Bool)] {
        text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[2].hasPrefix("/"), !fields[2].contains("..") else { return nil }
            if fields[0] == "0" && fields[1].isEmpty {
                return ("/sys/fs/cgroup\(fields[2])/cgroup.events", { $0.split(separator: "\n").contains("frozen 1") })
            }
            guard fields[1].split(separator: ",").contains("freezer") else { return nil }
            return ("/sys/fs/cgroup/freezer\(fields[2])/freezer.state", { !$0.hasPrefix("THAWED") })
        }
    }

    /// Sends a board process it started or adopted SIGABRT or SIGKILL (the watchdog's); a pid it
    /// does not know is left alone.
    public func end(_ pid: Int32, _ how: EndSignal) {
        guard children.withLock({ $0[pid] != nil }) else { return }
        kill(pid, how == .abort ? SIGABRT : SIGKILL)
    }

    /// Forgets an adopted process that is gone, removing its pid file.
    public func forgetAdopted(_ pid: Int32) {
        _ = forget(pid) { $0.process == nil }
    }

    /// The pids of the processes still running.
    public var runningPIDs: [Int32] {
        let all = children.withLock { $0 }
        for (pid, child) in all where child.process == nil && !isRunning(pid) { forgetAdopted(pid) }
        return children.withLock { Array($0.keys) }
    }

    /// Sends SIGTERM to every board process, waits up to `gracePeriod`, then SIGKILLs what is left.
    public func stopAll(gracePeriod: Duration = .seconds(3)) async {
        stopping.store(true, ordering: .releasing)
        for pid in runningPIDs { kill(pid, SIGTERM) }
        let deadline = ContinuousClock.now.advanced(by: gracePeriod)
        while !runningPIDs.isEmpty && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        let stubborn = children.withLock { $0 }
        for (pid, child) in stubborn {
            logger.warning("board ignored SIGTERM; killing", metadata: ["board": "\(child.id)", "pid": "\(pid)"])
            kill(pid, SIGKILL)
            child.process?.waitUntilExit()
        }
        // Wait briefly for termination handlers so pid files are gone when we return, and for the
        // log writers, which end once they have written what their boards left in the pipe.
        let settle = ContinuousClock.now.advanced(by: .seconds(1))
        while (!runningPIDs.isEmpty || !writers.withLock(\.isEmpty)) && ContinuousClock.now < settle {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

extension Process {
    /// Starts the process with no signal blocked in the child.
    ///
    /// `posix_spawn` gives the child the signal mask of the calling thread, and the threads of
    /// Swift's concurrency pool block most signals. A child started from one of them could
    /// never receive SIGTERM, so `stop` would always end in SIGKILL. The mask is emptied on this
    /// thread for the duration of the spawn, then restored.
    ///
    /// (Tests and tools spawn with swift-subprocess, which does this itself. The broker does not:
    /// it starts boards from its synchronous loop thread and needs the pid at once, to bind the
    /// registration secret to it, while swift-subprocess only spawns from an async task.)
    fileprivate func runWithDefaultSignalMask() throws {
        var empty = sigset_t()
        sigemptyset(&empty)
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, &empty, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try run()
    }
}
