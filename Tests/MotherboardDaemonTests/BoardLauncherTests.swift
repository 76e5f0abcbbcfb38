import BoardKitTesting
import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon

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
