import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Testing

/// Running the fleet under a service manager: the notify protocol (with a datagram socket
/// standing in for systemd) and log files that rotate without holes.
@Suite("Operations", .serialized, .timeLimit(.minutes(3)))
struct OperationsIntegrationTests {
    /// A datagram socket where a service manager would listen for `sd_notify` messages.
    final class NotifySocket {
        let path: String
        let descriptor: Int32

        init(path: String) throws {
            self.path = path
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { buffer in
                for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard descriptor >= 0, bound == 0 else { throw BusError(.transport, "cannot bind \(path)") }
        }

        deinit { close(descriptor) }

        /// The next datagram, or nil after `timeout` milliseconds without one.
        func receive(timeoutMilliseconds: Int32) -> String? {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, timeoutMilliseconds) == 1 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            return count > 0 ? String(decoding: buffer.prefix(count), as: UTF8.self) : nil
        }

        /// Datagrams until one contains `text` (returned with those before it), or `timeout` passes.
        func receive(until text: String, timeout: Duration) -> [String] {
            let deadline = ContinuousClock.now.advanced(by: timeout)
            var received: [String] = []
            while ContinuousClock.now < deadline {
                guard let message = receive(timeoutMilliseconds: 200) else { continue }
                received.append(message)
                if message.contains(text) { break }
            }
            return received
        }
    }

    /// `READY=1` comes once every always-on board is registered (never before), with a `STATUS=`;
    /// `WATCHDOG=1` comes at half of `WATCHDOG_USEC`; `STOPPING=1` on SIGTERM.
    @Test func theBrokerSpeaksTheNotifyProtocol() async throws {
        try await withTemporaryDirectory("notify") { directory in
            let systemd = try NotifySocket(path: "\(directory)/notify.sock")
            let environment = ["NOTIFY_SOCKET": systemd.path, "WATCHDOG_USEC": "300000"]
            try await TestFleet.with(manifest: exampleManifest, waitForFleet: false, brokerEnvironment: environment) { fleet in
                let beforeReady = systemd.receive(until: "READY=1", timeout: .seconds(60))
                let ready = try #require(beforeReady.last)
                #expect(ready.contains("READY=1") && ready.contains("STATUS=fleet ready: 3 always-on board(s) running"), "\(beforeReady)")
                #expect(!beforeReady.dropLast().contains { $0.contains("READY=1") })
                // Ready means live: every always-on board answers at once.
                let list = try await fleet.withClient { try await $0.list(timeout: .seconds(5)) }
                #expect(list.waitingFor.isEmpty && list.boards.count == 3)
                // Pings keep coming from the running loop (every ~150 ms).
                var pings = 0
                let deadline = ContinuousClock.now.advanced(by: .seconds(5))
                while pings < 3, ContinuousClock.now < deadline {
                    if systemd.receive(timeoutMilliseconds: 500)?.contains("WATCHDOG=1") == true { pings += 1 }
                }
                #expect(pings == 3)
                // The service manager's stop: SIGTERM.
                kill(fleet.brokerPID, SIGTERM)
                let stopping = systemd.receive(until: "STOPPING=1", timeout: .seconds(20))
                #expect(stopping.last?.contains("STOPPING=1") == true, "\(stopping)")
            }
        }
    }

    /// Issue: with a 1 MiB limit, a board writing 40 MiB/s grew its logs to 160 MiB (the check
    /// ran once a second), and rotating on every write still let a faster board go further. A
    /// board's output now goes through its log writer, which rotates before a file passes the
    /// limit: a board writing as fast as it can (32 MiB, 32 times the limit) never takes its logs
    /// past 4 files of the limit, and the newest files hold its last lines.
    @Test func aBoardWritingAsFastAsItCanNeverTakesItsLogsPastFourTimesTheLimit() async throws {
        let writer = """
            import os
            line = b'x' * 65535 + b'\\n'
            for n in range(512):
                os.write(1, line)
            os.write(1, b'last line\\n')

            """
        let manifest = """
            { "boards": [ { "id": "demo.chatty", "executable": "/usr/bin/python3", "arguments": ["-c", \(String(decoding: try JSONEncoder().encode(writer), as: UTF8.self))], "start": "always" } ] }
            """
        let limit = 1 << 20
        try await TestFleet.with(manifest: manifest, waitForFleet: false, brokerEnvironment: ["BOARDBUS_LOG_MAX_BYTES": "\(limit)"]) { fleet in
            let logs = "\(fleet.address.runtimeDirectory)/logs"
            func total() -> Int {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: logs)) ?? []
                return names.filter { $0.hasPrefix("demo.chatty") }.reduce(0) { sum, name in
                    sum + ((try? FileManager.default.attributesOfItem(atPath: "\(logs)/\(name)")[.size] as? Int) ?? 0)
                }
            }
            var largest = 0
            var samples = 0
            let ended = try await eventually(timeout: .seconds(120), checkingEvery: .milliseconds(1)) {
                largest = max(largest, total())
                samples += 1
                return fleet.brokerLog.contains("demo.chatty")
                    && fleet.brokerLog.contains("ended (exit 0) before it registered")
            }
            #expect(ended, "\(fleet.brokerLog.suffix(2000))")
            // The writer has written what was left in the pipe once the log ends with the last line.
            #expect(
                try await eventually {
                    String(decoding: FileManager.default.contents(atPath: "\(logs)/demo.chatty.log") ?? Data(), as: UTF8.self)
                        .hasSuffix("last line\n")
                })
            largest = max(largest, total())
            #expect(FileManager.default.fileExists(atPath: "\(logs)/demo.chatty.log.3"))
            #expect(!FileManager.default.fileExists(atPath: "\(logs)/demo.chatty.log.4"))
            #expect(largest <= 4 * limit, "the logs reached \(largest) bytes with a limit of \(limit)")
            print("logs of a board writing 128 MiB as fast as it can: at most \(largest) bytes (\(samples) samples) with a limit of \(limit)")
        }
    }

    /// A board whose log writer is killed ends at its next write (SIGPIPE, as a program piped
    /// into a dead `tee` does) instead of running on with its output lost; the broker restarts it
    /// with a new writer (under its restart policy), and its log goes on.
    @Test func aBoardWhoseLogWriterIsKilledIsRestartedWithANewOne() async throws {
        try await TestFleet.with(manifest: supervisedManifest) { fleet in
            let log = "\(fleet.address.runtimeDirectory)/logs/demo.greeter.log"
            /// The broker's child that writes the greeter's log.
            func writerPID() -> Int32? {
                let children =
                    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(fleet.brokerPID)/task"))?.flatMap { task in
                        ((try? String(contentsOfFile: "/proc/\(fleet.brokerPID)/task/\(task)/children", encoding: .utf8)) ?? "")
                            .split(separator: " ").compactMap { Int32($0) }
                    } ?? []
                return children.first { pid in
                    let command = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
                    return String(decoding: command, as: UTF8.self).split(separator: "\0").last.map(String.init) == log
                }
            }
            let writer = try #require(writerPID())
            let board = try #require(fleet.pid(of: "demo.greeter"))
            #expect(kill(writer, SIGKILL) == 0)
            // A refused command is a line in the greeter's log: its write meets a closed pipe.
            _ = try await fleet.busctl("call", "demo.greeter", "probeBeforeRestart", "{}")
            let restarted = try await eventually(timeout: .seconds(20)) {
                let status = try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json"))
                return status.pid != board && status.state == .running
            }
            #expect(restarted)
            let status = try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json"))
            #expect(status.lastExit?.contains("signal \(SIGPIPE)") == true, "\(status.lastExit ?? "nil")")
            #expect(try #require(writerPID()) != writer)
            _ = try await fleet.busctl("call", "demo.greeter", "probeAfterRestart", "{}")
            #expect(
                try await eventually {
                    String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self).contains("probeAfterRestart")
                })
        }
    }

    /// Both log writers — the small `boardbus-log-writer` the broker prefers and `motherboard
    /// log-writer` where that one is missing — keep a log the same way, and a command line that
    /// cannot be meant is refused (exit 2) rather than guessed.
    @Test func bothLogWritersKeepALogTheSameWay() async throws {
        let binaries = try TestFleet.locateBinaries()
        try await withTemporaryDirectory("log-writers") { directory in
            let input = "\(directory)/input"
            let lines = (0..<2000).map { "line \($0) \(String(repeating: "é", count: $0 % 40))\n" }.joined()
            try lines.write(toFile: input, atomically: true, encoding: .utf8)
            func run(_ command: [String], log: String?) async throws -> Int32 {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: command[0])
                process.arguments = Array(command.dropFirst()) + (log.map { ["--max-bytes", "4096", "--keep", "2", "\(directory)/\($0)"] } ?? [])
                process.standardInput = FileHandle(forReadingAtPath: input)
                process.standardError = FileHandle.nullDevice
                try process.run()
                #expect(try await eventually { !process.isRunning }, "\(command) did not end at the end of its input")
                if process.isRunning { process.terminate() }
                return process.terminationStatus
            }
            #expect(try await run(["\(binaries)/boardbus-log-writer"], log: "small.log") == 0)
            #expect(try await run(["\(binaries)/motherboard", "log-writer"], log: "large.log") == 0)
            for suffix in ["", ".1", ".2"] {
                let small = FileManager.default.contents(atPath: "\(directory)/small.log\(suffix)")
                let large = FileManager.default.contents(atPath: "\(directory)/large.log\(suffix)")
                #expect(small != nil && small == large, "small.log\(suffix) and large.log\(suffix) differ")
                #expect((small?.count ?? 0) <= 4096)
            }
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/small.log.3"))
            let together = ["small.log.2", "small.log.1", "small.log"].compactMap { FileManager.default.contents(atPath: "\(directory)/\($0)") }
                .reduce(Data(), +)
            #expect(Data(lines.utf8).suffix(together.count) == together, "the kept files are not the end of what was written")
            for wrong in [["--max-bytes", "100", "x.log"], ["--max-bytes", "4096"], ["--max-bytes", "4096", "--keep", "0", "x.log"], ["x.log"]] {
                #expect(try await run(["\(binaries)/boardbus-log-writer"] + wrong, log: nil) == 2, "\(wrong) was accepted")
            }
        }
    }

    /// A board's log past the size limit goes on in a new file, the old one kept as `.1`; since
    /// the log writer cuts after the last whole line that fits, `.1` ends with a whole line and
    /// the current log stays under the limit.
    @Test func logsRotateAtTheirLimitWithoutHoles() async throws {
        try await TestFleet.with(manifest: exampleManifest, brokerEnvironment: ["BOARDBUS_LOG_MAX_BYTES": "4096"]) { fleet in
            let log = "\(fleet.address.runtimeDirectory)/logs/demo.greeter.log"
            try await fleet.withClient { client in
                // Each refused command is one warning line in the greeter's log.
                func refusals(_ count: Int) async {
                    for _ in 0..<count { _ = try? await client.call("demo.greeter", command: "nosuch", payload: Data("{}".utf8)) }
                }
                await refusals(40)
                #expect(try await eventually { FileManager.default.fileExists(atPath: "\(log).1") })
                await refusals(5)
                #expect(try await eventually { (try? Data(contentsOf: URL(fileURLWithPath: log)))?.isEmpty == false })
            }
            for path in [log, "\(log).1"] {
                let data = try Data(contentsOf: URL(fileURLWithPath: path))
                #expect(!data.contains(0), "\(path) has a hole of zeros")
                #expect(String(decoding: data, as: UTF8.self).contains("refused command"))
            }
            let size = try #require(try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int)
            #expect(size <= 4096)
            let previous = try Data(contentsOf: URL(fileURLWithPath: "\(log).1"))
            #expect(previous.count <= 4096 && previous.last == UInt8(ascii: "\n"))
        }
    }

    /// `busctl wait` started before the broker waits for it too (it said `brokerNotRunning` at
    /// once), and says what it waits for while it waits.
    @Test func busctlWaitWaitsForTheBrokerAndSaysForWhat() async throws {
        let binaries = try TestFleet.locateBinaries()
        try await withTemporaryDirectory("wait") { directory in
            let manifest = #"{"boards": [{"id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always"}]}"#
            try manifest.write(toFile: "\(directory)/fleet.json", atomically: true, encoding: .utf8)
            var environment = ProcessInfo.processInfo.environment
            environment["BOARDBUS_RUNTIME_DIR"] = "\(directory)/run"
            environment["BOARDBUS_STATE_DIR"] = "\(directory)/state"
            let wait = try await ChildProcess(
                executable: "\(binaries)/busctl", arguments: ["wait", "--timeout", "60"], environment: environment, directory: directory,
                name: "busctl-wait")
            #expect(try await eventually { wait.standardError.contains("waiting for the motherboard") }, "\(wait.standardError)")
            #expect(wait.isRunning)
            let broker = try await ChildProcess(
                executable: "\(binaries)/motherboard", arguments: ["--manifest", "\(directory)/fleet.json", "--exit-with-parent"],
                environment: environment, directory: directory, name: "motherboard")
            let result = try await wait.wait(timeout: .seconds(60))
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(result.standardOutput.contains("fleet ready: 1 board(s) running"))
            _ = await broker.stop()
        }
    }

    /// A metrics address the broker cannot serve (in use, not this host's, not an IP) stops it at
    /// once with one line naming the reason, before any board starts.
    @Test func aMetricsAddressTheBrokerCannotServeIsRefusedAtStart() async throws {
        let binaries = try TestFleet.locateBinaries()
        try await withTemporaryDirectory("metrics-address") { directory in
            // A port this test holds.
            let (holder, port) = try boundLoopbackSocket()
            defer { close(holder) }
            #expect(listen(holder, 1) == 0)
            for (listen, reason) in [
                ("127.0.0.1:\(port)", "Address already in use"), ("localhost:9464", "not HOST:PORT with an IP address"),
                ("127.0.0.1:99999", "not HOST:PORT"),
            ] {
                let result = try await ChildProcess(
                    executable: "\(binaries)/motherboard", arguments: ["--runtime-dir", "\(directory)/run", "--metrics-listen", listen],
                    environment: ProcessInfo.processInfo.environment, directory: directory, name: "motherboard"
                ).wait(timeout: .seconds(30))
                #expect(result.exitCode == 1, "\(listen)")
                #expect(
                    result.standardError.contains("motherboard: badArgument: ") && result.standardError.contains(reason), "\(result.standardError)")
            }
        }
    }

    /// `--io-threads` gives the broker's connections more libzmq I/O threads: a fleet on two
    /// serves calls from several clients, and a count out of 1…16 is refused at start.
    @Test func theBrokerRunsOnMoreThanOneIOThreadAndRefusesACountOutOfRange() async throws {
        let manifest = #"{"boards": [{"id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always"}]}"#
        try await TestFleet.with(manifest: manifest, brokerArguments: ["--io-threads", "2"]) { fleet in
            let names = try ioThreadNames(of: fleet.brokerPID)
            #expect(names.sorted() == ["ZMQbg/IO/0", "ZMQbg/IO/1"], "\(names)")
            for sequence in 1...3 {
                let result = try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":\#(sequence)}"#)
                #expect(result.exitCode == 0 && result.standardOutput.contains("\(sequence)"), "\(result.standardError)")
            }
        }
        let binaries = try TestFleet.locateBinaries()
        try await withTemporaryDirectory("io-threads") { directory in
            for count in ["0", "17", "-1"] {
                let result = try await ChildProcess(
                    executable: "\(binaries)/motherboard", arguments: ["--runtime-dir", "\(directory)/run", "--io-threads=\(count)"],
                    environment: ProcessInfo.processInfo.environment, directory: directory, name: "motherboard"
                ).wait(timeout: .seconds(30))
                #expect(result.exitCode == 1, "\(count)")
                #expect(result.standardError.contains("--io-threads must be 1 to 16, not \(count)"), "\(result.standardError)")
            }
        }
    }

    /// The names of a process's libzmq I/O threads (`ZMQbg/IO/N`).
    private func ioThreadNames(of pid: Int32) throws -> [String] {
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        return tasks.compactMap { try? String(contentsOfFile: "/proc/\(pid)/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { $0.hasPrefix("ZMQbg/IO/") }
    }
}
