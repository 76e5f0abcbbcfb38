import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import BoardBusDemoGreeterIO
import Testing

/// Boards that die: the broker notices within 3 s and callers fail fast with a typed error.
@Suite("Failures", .serialized, .timeLimit(.minutes(3)))
struct FailureIntegrationTests {
    /// Polls the broker until `id` is gone from `list`; returns how long that took.
    func timeUntilGone(_ id: BoardID, from fleet: TestFleet) async throws -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        let gone = try await fleet.withClient { client in
            try await eventually(timeout: .seconds(10)) {
                try await !client.list(timeout: .seconds(2)).boards.contains { $0.id == id }
            }
        }
        #expect(gone, "\(id) still listed after 10 s")
        return start.duration(to: clock.now)
    }

    @Test func aKilledManifestBoardLeavesTheListAndCallsFailFast() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let pid = try #require(fleet.pid(of: GreeterIO.id))
            #expect(kill(pid, SIGKILL) == 0)
            let elapsed = try await timeUntilGone(GreeterIO.id, from: fleet)
            #expect(elapsed < .seconds(3), "took \(elapsed)")

            let call = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"x"}"#)
            #expect(call.exitCode != 0)
            #expect(call.standardError.hasPrefix("busctl: boardNotRunning:"))
            // The other boards are untouched.
            #expect(try await fleet.busctl("call", "app.dashboard", "show").exitCode == 0)
        }
    }

    @Test func aKilledExternalBoardIsFoundByHeartbeat() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            // Started by hand, not by the broker: only heartbeats and the socket tell the broker.
            let board = try await fleet.startBoard("BoardBusDemoGreeter", id: "ext.greeter")
            let listed = try await fleet.withClient { try await $0.waitForBoard("ext.greeter", timeout: .seconds(10)) }
            #expect(listed.pid == board.pid)
            #expect(kill(board.pid, SIGKILL) == 0)
            let elapsed = try await timeUntilGone("ext.greeter", from: fleet)
            #expect(elapsed < .seconds(3), "took \(elapsed)")

            let call = try await fleet.busctl("call", "ext.greeter", "greet", #"{"name":"x"}"#, "--timeout", "20")
            #expect(call.exitCode != 0)
            #expect(call.standardError.hasPrefix("busctl: noSuchBoard:"))
        }
    }

    @Test func aDuplicateIDIsRefused() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            var environment = fleet.environment
            environment["BOARDBUS_BOARD_ID"] = "demo.greeter"
            let impostor = try await ChildProcess(
                executable: "\(fleet.binaryDirectory)/BoardBusDemoGreeter", arguments: [], environment: environment,
                directory: fleet.directory, name: "impostor")
            let result = try await impostor.wait(timeout: .seconds(30))
            // One line and status 1, not a trap at the top level (SIGILL and a backtrace).
            #expect(result.exitCode == 1)
            #expect(result.standardError.hasPrefix("board demo.greeter: idInUse: "), "\(result.standardError)")
            #expect(result.standardError.split(separator: "\n").count == 1, "\(result.standardError)")
        }
    }

    /// Issue: the example Payment board (a TaskBoard run by a PluginLauncher) trapped with
    /// SIGILL when its registration was refused `idInUse`.
    @Test func aPaymentBoardWhoseIDIsTakenExitsWithOneLine() async throws {
        let manifest = #"{ "boards": [ { "id": "checkout.payment", "executable": "BoardBusDemoPayment", "start": "always" } ] }"#
        try await TestFleet.with(manifest: manifest) { fleet in
            var environment = fleet.environment
            environment["BOARDBUS_BOARD_ID"] = "checkout.payment"
            let second = try await ChildProcess(
                executable: "\(fleet.binaryDirectory)/BoardBusDemoPayment", arguments: [], environment: environment, directory: fleet.directory,
                name: "second-payment")
            let result = try await second.wait(timeout: .seconds(30))
            #expect(result.exitCode == 1)
            #expect(result.standardError.hasPrefix("board checkout.payment: idInUse: "), "\(result.standardError)")
            #expect(!result.standardError.contains("Fatal error"))
        }
    }

    /// Issue: a board that bootstraps swift-log itself before `board.run()` (as any server app,
    /// and swift-otel's bootstrap, do) trapped: "logging system can only be initialized once".
    @Test func aBoardThatOwnsSwiftLogRunsAndStopsCleanly() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            var environment = fleet.environment
            environment["BOARDBUS_BOARD_ID"] = "own.greeter"
            environment["BOARDBUS_DEMO_LOG_BACKEND"] = "own"
            let board = try await ChildProcess(
                executable: "\(fleet.binaryDirectory)/BoardBusDemoGreeter", arguments: [], environment: environment, directory: fleet.directory,
                name: "own-logging")
            try await board.waitForOutput("READY", timeout: .seconds(30))
            let call = try await fleet.busctl("call", "own.greeter", "greet", #"{"name":"Ann"}"#)
            #expect(call.exitCode == 0, "\(call.standardError)")
            #expect(board.standardError.contains("own.greeter: [BoardBusDemoGreeter] the greeter's own logging system"), "\(board.standardError)")
            #expect(await board.stop() == .terminated)
        }
    }

    @Test func stoppingTheFleetEndsEveryProcess() async throws {
        var pids: [Int32] = []
        var runtime = ""
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            pids = ["auth.login", "app.dashboard", "demo.greeter"].compactMap { fleet.pid(of: $0) }
            runtime = fleet.address.runtimeDirectory
            // A board started by hand stops on SIGTERM, without needing SIGKILL.
            let board = try await fleet.startBoard("BoardBusDemoGreeter", id: "ext.greeter")
            #expect(await board.stop() == .terminated)
        }
        #expect(pids.count == 3)
        for pid in pids {
            #expect(kill(pid, 0) != 0, "process \(pid) still runs")
        }
        #expect(!FileManager.default.fileExists(atPath: runtime))
    }
}
