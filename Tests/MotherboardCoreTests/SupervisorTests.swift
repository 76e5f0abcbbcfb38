import BoardKitTesting
import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon

/// The supervisor's decisions on their own, with a clock the test moves.
@Suite("Supervisor")
struct SupervisorTests {
    let svc = ScopedName(scope: "", name: "svc")
    let start = ContinuousClock.now

    func entry(_ restart: FleetManifest.RestartPolicy, limit: FleetManifest.RestartLimit = .init(count: 3, windowSeconds: 60)) -> FleetManifest.Board
    {
        .init(id: "svc", executable: "Svc", start: .always, restart: restart, restartLimit: limit)
    }

    @Test func backOffDoublesFrom100MillisecondsUpTo30Seconds() {
        #expect(
            (0...12).map { Supervisor.backoff(afterRestarts: $0) } == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600),
                .milliseconds(3200), .milliseconds(6400), .milliseconds(12800), .milliseconds(25600),
                .seconds(30), .seconds(30), .seconds(30), .seconds(30),
            ])
        #expect(Supervisor.backoff(afterRestarts: 10_000) == .seconds(30))
    }

    @Test func aCrashIsRestartedAfterItsBackOffWithItsWaitingWorkKept() {
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 10, secret: "s"), as: svc, now: start)
        #expect(supervisor.offlineState(of: svc) == .starting)
        let input = HeldInput(envelope: Envelope(header: EnvelopeHeader(kind: .activate, target: "svc")), client: nil, since: start)
        #expect(supervisor.enqueue(input, for: svc, limit: 1) == .queued)
        #expect(supervisor.enqueue(input, for: svc, limit: 1) == .full)
        let exit = supervisor.processExited(pid: 10, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
        #expect(exit == .restarts(svc, after: .milliseconds(100)))
        #expect(supervisor.offlineState(of: svc) == .restarting)
        #expect(supervisor.dueRestarts(now: start + .milliseconds(99)).isEmpty)
        #expect(supervisor.dueRestarts(now: start + .milliseconds(100)) == [svc])
        supervisor.started(LaunchedProcess(pid: 11, secret: "t"), as: svc, now: start + .milliseconds(100))
        let registered = supervisor.endStart(svc)
        #expect(registered?.pid == 11 && registered?.secret == "t" && registered?.queue.count == 1)
        #expect(supervisor.records[svc] == .init(restartTimes: [start], restarts: 1, lastExit: "signal 9"))
        // The old pid is forgotten: a second report of its end changes nothing.
        #expect(supervisor.processExited(pid: 10, status: "exit 0", clean: true, entry: entry(.always), canRestart: true, now: start) == .unknown)
    }

    /// The broker dropped the board before it heard its process end, and started a new one on
    /// demand (an at-least-once activation to deliver again): the old process's end, reported
    /// after, restarts nothing and leaves the new start as it is (it reset it to a pending
    /// restart, so the new process's registration was refused and a third was started).
    @Test func theEndOfAProcessANewerOneReplacedRestartsNothing() {
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 10, secret: "s"), as: svc, now: start)
        _ = supervisor.endStart(svc)
        supervisor.started(LaunchedProcess(pid: 11, secret: "t"), as: svc, now: start + .milliseconds(5))
        let exit = supervisor.processExited(pid: 10, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
        #expect(exit == .stays(svc, wasStarting: false))
        #expect(supervisor.starting[svc]?.pid == 11)
        #expect(supervisor.records[svc]?.restarts ?? 0 == 0 && supervisor.records[svc]?.lastExit == "signal 9")
        // Its own end is a crash like any other.
        #expect(
            supervisor.processExited(pid: 11, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
                == .restarts(svc, after: .milliseconds(100)))
    }

    @Test func theRestartLimitCountsOnlyRestartsInsideItsWindow() {
        var supervisor = Supervisor()
        let limited = entry(.always, limit: .init(count: 2, windowSeconds: 10))
        var now = start
        var pid: Int32 = 100
        func crash() -> Supervisor.Exit {
            supervisor.started(LaunchedProcess(pid: pid, secret: nil), as: svc, now: now)
            defer { pid += 1 }
            return supervisor.processExited(pid: pid, status: "exit 1", clean: false, entry: limited, canRestart: true, now: now)
        }
        #expect(crash() == .restarts(svc, after: .milliseconds(100)))
        now = now + .seconds(1)
        #expect(crash() == .restarts(svc, after: .milliseconds(200)))
        // Both restarts are older than the window now: the count starts again.
        now = now + .seconds(11)
        #expect(crash() == .restarts(svc, after: .milliseconds(100)))
        #expect(crash() == .restarts(svc, after: .milliseconds(200)))
        #expect(crash() == .limitReached(svc))
        // The broker fails the work that waited for it; the board then shows as failed.
        #expect(supervisor.endStart(svc) != nil)
        #expect(supervisor.hasFailed(svc) && supervisor.offlineState(of: svc) == .failed)
        #expect(supervisor.records[svc]?.restarts == 4)
    }

    @Test func policiesCompletionAndAProducerlessBrokerDecideWhatStaysDown() {
        for (policy, clean, restarts) in [
            (FleetManifest.RestartPolicy.no, false, false), (.no, true, false), (.onFailure, true, false),
            (.onFailure, false, true), (.always, true, true), (.always, false, true),
        ] {
            #expect(Supervisor.policyRestarts(policy, clean: clean) == restarts, "\(policy) clean: \(clean)")
        }
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 1, secret: nil), as: svc, now: start)
        // Ended before it registered, and not restarted: its waiting work must be failed.
        #expect(
            supervisor.processExited(pid: 1, status: "exit 0", clean: true, entry: entry(.onFailure), canRestart: true, now: start)
                == .stays(svc, wasStarting: true))
        supervisor.started(LaunchedProcess(pid: 2, secret: nil), as: svc, now: start)
        _ = supervisor.endStart(svc)
        supervisor.completed(svc)
        #expect(
            supervisor.processExited(pid: 2, status: "exit 0", clean: true, entry: entry(.always), canRestart: true, now: start)
                == .stays(svc, wasStarting: false))
        supervisor.started(LaunchedProcess(pid: 3, secret: nil), as: svc, now: start)
        _ = supervisor.endStart(svc)
        #expect(
            supervisor.processExited(pid: 3, status: "signal 9", clean: false, entry: entry(.always), canRestart: false, now: start)
                == .stays(svc, wasStarting: false))
        #expect(supervisor.offlineState(of: svc) == .stopped)
    }

    @Test func startsThatNeverRegisterAndAdoptedProcessesThatEndAreFound() {
        var supervisor = Supervisor()
        let other = ScopedName(scope: "edge", name: "svc")
        supervisor.started(LaunchedProcess(pid: 5, secret: nil), as: svc, now: start)
        supervisor.adopted(LaunchedProcess(pid: 6, secret: "kept"), as: other, now: start + .seconds(3))
        #expect(supervisor.overdueStarts(now: start + .seconds(4), timeout: .seconds(2)) == [svc])
        #expect(supervisor.overdueStarts(now: start + .seconds(6), timeout: .seconds(2)) == [svc, other])
        #expect(supervisor.endedAdoptedProcesses(isRunning: { $0 != 6 }) == [6])
        #expect(
            supervisor.processExited(pid: 6, status: "gone", clean: false, entry: nil, canRestart: true, now: start)
                == .stays(other, wasStarting: true))
        #expect(supervisor.endedAdoptedProcesses(isRunning: { _ in false }).isEmpty)
    }
}

/// The launcher at shutdown: what ends then is being stopped, and nothing new starts.
@Suite("Board launcher")
struct BoardLauncherTests {
    /// A launcher whose runtime and state are in `directory`, that reports process ends to no one.
    static func launcher(in directory: String) -> BoardLauncher {
        BoardLauncher(
            address: BusAddress(runtimeDirectory: directory), stateDirectory: "\(directory)/state", binaryDirectory: "/bin",
            logger: Logger(label: "test")
        ) { _, _, _ in }
    }

    @Test func nothingStartsOnceTheFleetIsStopping() async throws {
        try await withTemporaryDirectory("launcher") { directory in
            let launcher = Self.launcher(in: directory)
            let board = FleetManifest.Board(id: "demo.sleeper", executable: "/bin/true")
            await launcher.stopAll(gracePeriod: .zero)
            let error = try #require(throws: BusError.self) { try launcher.start(board) }
            #expect(error.code == .boardNotRunning && error.message.contains("stopping"))
            #expect(launcher.runningPIDs.isEmpty)
        }
    }

    /// The end of a board's earlier process is handled after it happened: by then the board may
    /// run again, and the earlier process's end must leave the new one's pid and secret files
    /// (without them a broker started again neither adopts nor stops it).
    @Test func anEarlierProcessThatEndsLeavesTheLaterOnesFiles() async throws {
        try await withTemporaryDirectory("launcher") { directory in
            let launcher = Self.launcher(in: directory)
            let board = FleetManifest.Board(id: "demo.sleeper", executable: "/bin/sleep", arguments: ["30"])
            let earlier = try launcher.start(board)
            let later = try launcher.start(board)
            let pidFile = "\(directory)/pids/demo.sleeper.pid"
            kill(earlier.pid, SIGKILL)
            let handled = await eventually(timeout: .seconds(10)) { !launcher.runningPIDs.contains(earlier.pid) }
            #expect(handled, "the earlier process's end was not handled")
            let named = try? String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(named == "\(later.pid)")
            #expect(FileManager.default.fileExists(atPath: "\(directory)/pids/demo.sleeper.secret"))
            await launcher.stopAll(gracePeriod: .seconds(1))
            // The later one's own end removes them.
            #expect(!FileManager.default.fileExists(atPath: pidFile))
        }
    }

    /// A stopped process still runs (its board is not restarted over it) but is stopped (its
    /// board is frozen, not busy); the state is read after the last `)` of `/proc/PID/stat`,
    /// whatever the process's name holds.
    @Test func aStoppedProcessRunsAndIsStopped() async throws {
        try await withTemporaryDirectory("launcher") { directory in
            let launcher = Self.launcher(in: directory)
            let process = try launcher.start(FleetManifest.Board(id: "demo.sleeper", executable: "/bin/sleep", arguments: ["30"]))
            #expect(launcher.isRunning(process.pid) && !launcher.isStopped(process.pid))
            kill(process.pid, SIGSTOP)
            #expect(await eventually { launcher.isStopped(process.pid) })
            #expect(launcher.isRunning(process.pid))
            kill(process.pid, SIGCONT)
            #expect(await eventually { !launcher.isStopped(process.pid) })
            await launcher.stopAll(gracePeriod: .seconds(1))
            #expect(!launcher.isRunning(process.pid) && !launcher.isStopped(process.pid))
        }
        #expect(BoardLauncher.state(inStat: Array("42 (sleep) T 1 42 42 0".utf8)) == "T")
        #expect(BoardLauncher.state(inStat: Array("42 (a) Z b) S 1 42 42 0".utf8)) == "S")
        #expect(BoardLauncher.state(inStat: Array("42 (x) t 1".utf8)) == "t")
        // A name cut inside a multi-byte character is not UTF-8.
        #expect(BoardLauncher.state(inStat: Array("42 (caf".utf8) + [0xC3] + Array(") D 1".utf8)) == "D")
        #expect(BoardLauncher.state(inStat: Array("42 (x".utf8)) == nil)
        #expect(BoardLauncher.state(inStat: []) == nil)
    }

    /// A process whose cgroup is frozen (`docker pause`, `systemctl freeze`) reads `S` or `D`
    /// in `/proc/PID/stat`: its freezer says it is stopped, cgroup v1's or v2's.
    @Test func aFrozenCgroupIsFoundInEitherVersion() {
        let files = BoardLauncher.frozenCgroupFiles(
            inProcCgroup: "12:pids:/a\n6:freezer:/pause/x\n4:cpu,freezer:/b\n0::/system.slice/demo.service\n3:memory:/../etc\n")
        #expect(
            files.map(\.file) == [
                "/sys/fs/cgroup/freezer/pause/x/freezer.state", "/sys/fs/cgroup/freezer/b/freezer.state",
                "/sys/fs/cgroup/system.slice/demo.service/cgroup.events",
            ])
        #expect(files[0].frozen("FROZEN\n") && files[0].frozen("FREEZING\n") && !files[0].frozen("THAWED\n"))
        #expect(files[2].frozen("populated 1\nfrozen 1\n") && !files[2].frozen("populated 1\nfrozen 0\n"))
        #expect(BoardLauncher.frozenCgroupFiles(inProcCgroup: "0::/../../etc\n5:freezer:relative\n").isEmpty)
    }

    /// The same with a real cgroup v1 freezer, where this machine has one and may make a cgroup.
    @Test(.enabled(if: BoardLauncherTests.canFreeze))
    func aProcessInAFrozenCgroupIsStopped() async throws {
        let cgroup = "/sys/fs/cgroup/freezer/boardbus-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: cgroup, withIntermediateDirectories: false)
        defer { _ = rmdir(cgroup) }
        try await withTemporaryDirectory("launcher") { directory in
            let launcher = Self.launcher(in: directory)
            let process = try launcher.start(FleetManifest.Board(id: "demo.sleeper", executable: "/bin/sleep", arguments: ["30"]))
            defer {
                try? "THAWED".write(toFile: "\(cgroup)/freezer.state", atomically: false, encoding: .utf8)
                try? "\(process.pid)".write(toFile: "/sys/fs/cgroup/freezer/cgroup.procs", atomically: false, encoding: .utf8)
            }
            try "\(process.pid)".write(toFile: "\(cgroup)/cgroup.procs", atomically: false, encoding: .utf8)
            #expect(!launcher.isStopped(process.pid))
            try "FROZEN".write(toFile: "\(cgroup)/freezer.state", atomically: false, encoding: .utf8)
            #expect(await eventually { launcher.isStopped(process.pid) })
            #expect(launcher.isRunning(process.pid))
            try "THAWED".write(toFile: "\(cgroup)/freezer.state", atomically: false, encoding: .utf8)
            #expect(await eventually { !launcher.isStopped(process.pid) })
            try "\(process.pid)".write(toFile: "/sys/fs/cgroup/freezer/cgroup.procs", atomically: false, encoding: .utf8)
            await launcher.stopAll(gracePeriod: .seconds(1))
        }
    }

    /// Whether a cgroup v1 freezer can be made here (root, a writable freezer hierarchy).
    static var canFreeze: Bool {
        let probe = "/sys/fs/cgroup/freezer/boardbus-probe-\(getpid())"
        guard mkdir(probe, 0o755) == 0 else { return false }
        return rmdir(probe) == 0
    }
}
