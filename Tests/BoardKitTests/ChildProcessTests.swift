import BoardKitTesting
import BusCore
import Foundation
import Testing

/// The test kit's own promises: every wait on a child process ends on time, and what it starts
/// it stops.
@Suite("Child processes", .timeLimit(.minutes(1)))
struct ChildProcessTests {
    func start(_ script: String, in directory: String) async throws -> ChildProcess {
        try await ChildProcess(executable: "/bin/sh", arguments: ["-c", script], environment: [:], directory: directory, name: "child")
    }

    @Test func aWaitPastItsTimeoutKillsTheProcessAndSaysSo() async throws {
        try await withTemporaryDirectory("child") { directory in
            let child = try await start("exec sleep 30", in: directory)
            let started = ContinuousClock.now
            let error = await #expect(throws: BusError.self) { try await child.wait(timeout: .milliseconds(300)) }
            #expect(error?.code == .timeout)
            #expect(started.duration(to: .now) < .seconds(10), "the 30 s process did not hold the wait")
            #expect(!child.isRunning && kill(child.pid, 0) != 0)
        }
    }

    @Test func aProcessThatIgnoresSIGTERMIsKilledAfterItsGrace() async throws {
        try await withTemporaryDirectory("child") { directory in
            let child = try await start("trap '' TERM; echo READY; while :; do sleep 0.1; done", in: directory)
            try await child.waitForOutput("READY", timeout: .seconds(10))
            #expect(await child.stop(grace: .milliseconds(300)) == .killed)
            #expect(!child.isRunning)
            let polite = try await start("echo READY; exec sleep 30", in: directory)
            try await polite.waitForOutput("READY", timeout: .seconds(10))
            #expect(await polite.stop(grace: .seconds(10)) == .terminated)
        }
    }

    @Test func exitCodesAndOutputAreReported() async throws {
        try await withTemporaryDirectory("child") { directory in
            let result = try await start("echo out; echo err >&2; exit 3", in: directory).wait(timeout: .seconds(10))
            #expect(result.exitCode == 3 && result.standardOutput == "out\n" && result.standardError == "err\n")
            let missing = await #expect(throws: (any Error).self) {
                try await ChildProcess(executable: "/nonexistent/x", arguments: [], environment: [:], directory: directory, name: "missing")
            }
            #expect(missing != nil)
        }
    }
}
