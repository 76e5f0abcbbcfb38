import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Testing

/// At-least-once activations between real processes: a board written in Python from PROTOCOL.md
/// (`Python/delivery_board.py`) logs each activation it is handed with its delivery count.
@Suite("At-least-once activations", .serialized, .timeLimit(.minutes(3)))
struct DeliveryIntegrationTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/delivery_board.py").path

    /// The board `py.pay`, on demand, at least once, 3 deliveries; its log and poison marker in
    /// `directory`; `extra`, more of its manifest entry.
    static func manifest(_ directory: String, extra: String = "") -> String {
        """
        { "boards": [ { "id": "py.pay", "executable": "/usr/bin/python3", "arguments": ["\(script)", "\(directory)/deliveries.log", "\(directory)/poison"],
                        "start": "on-demand", "delivery": "at-least-once", "maxDeliveries": 3, "backoff": [0.2]\(extra) } ] }
        """
    }

    /// A board whose loop is stuck (its handler sleeps, its process runs) is busy until its
    /// watchdog (3 s here): then the broker sends its process SIGABRT, and the activation it held
    /// goes to the next instance. Issue: such a board was `busy` for ever, the work never redelivered.
    @Test func aBoardStuckPastItsWatchdogIsEndedAndItsWorkDeliveredAgain() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestFleet.with(manifest: Self.manifest(directory, extra: #", "watchdogSeconds": 3"#)) { fleet in
            let held = try await fleet.busctl("activate", "py.pay", #""hold""#, "--timeout", "40", timeout: .seconds(60))
            #expect(held.exitCode == 0, "\(held.standardError)")
            #expect(Self.log(directory) == [#""hold" 1"#, #""hold" 2"#])
            #expect(fleet.brokerLog.contains("watchdog: board stuck, its process sent SIGABRT"), "\(fleet.brokerLog.suffix(2_000))")
        }
    }

    static func log(_ directory: String) -> [String] {
        ((try? String(contentsOfFile: "\(directory)/deliveries.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Issue: an activation accepted by a board that was then killed was never delivered again.
    /// Now it goes to the restarted board with delivery count 2, and its sender gets the answer.
    @Test func anActivationHeldByAKilledBoardIsDeliveredAgainToTheNextInstance() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestFleet.with(manifest: Self.manifest(directory)) { fleet in
            async let activated = fleet.busctl("activate", "py.pay", #""hold""#, "--timeout", "40", timeout: .seconds(60))
            #expect(try await eventually(timeout: .seconds(20)) { Self.log(directory) == [#""hold" 1"#] }, "\(Self.log(directory))")
            let pid = try #require(fleet.pid(of: "py.pay"))
            #expect(kill(pid, SIGKILL) == 0)
            let result = try await activated
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(Self.log(directory) == [#""hold" 1"#, #""hold" 2"#])
            #expect(fleet.pid(of: "py.pay") != pid)
            #expect(fleet.brokerLog.contains("activation delivered again"))
        }
    }

    /// A handler's error is not an acknowledgement: a transient one (`handlerFailed`) is delivered
    /// again after the manifest's backoff (0.2 s here) and its sender gets the answer that
    /// finally came; one the board gives up with (`rejected`) is a dead letter at once, its sender
    /// told the board's error. Issue: both were acknowledged, and the job silently lost.
    @Test func aFailedActivationIsDeliveredAgainAndOneGivenUpIsADeadLetter() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestFleet.with(manifest: Self.manifest(directory)) { fleet in
            let flaky = try await fleet.busctl("activate", "py.pay", #""flaky""#, "--timeout", "40", timeout: .seconds(60))
            #expect(flaky.exitCode == 0, "\(flaky.standardError)")
            #expect(Self.log(directory) == [#""flaky" 1"#, #""flaky" 2"#, #""flaky" 3"#])
            #expect(fleet.brokerLog.contains("delivered again after its backoff"))

            let refused = try await fleet.busctl("activate", "py.pay", #""refuse""#, "--timeout", "40", timeout: .seconds(60))
            #expect(refused.exitCode == 1 && refused.standardError.contains("rejected: no such job"), "\(refused.standardError)")
            #expect(Self.log(directory).last == #""refuse" 1"#)
            let list = try decode(DeadLetterList.self, from: try await fleet.busctl("dead-letters", "--json"))
            #expect(list.letters.map(\.reason) == ["its board gave it up (rejected: no such job)"], "\(list)")
            let id = try #require(list.letters.first?.id)
            let shown = try await fleet.busctl("dead-letters", "--show", "\(id)")
            #expect(shown.standardOutput.contains(#"payload:     "refuse""#), "\(shown.standardOutput)")
            #expect(shown.standardOutput.contains("last error:  rejected: no such job"), "\(shown.standardOutput)")
            #expect(try await fleet.busctl("dead-letters", "--drop", "\(id)").exitCode == 0)
            #expect(try decode(DeadLetterList.self, from: try await fleet.busctl("dead-letters", "--json")).letters.isEmpty)
        }
    }

    /// A poison input kills every instance it is handed to: after 3 deliveries it is a dead letter
    /// (its sender told so), `busctl dead-letters` lists it, and `--replay` delivers it again.
    @Test func aPoisonInputIsDeadLetteredAndReplayed() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        FileManager.default.createFile(atPath: "\(directory)/poison", contents: Data())
        try await TestFleet.with(manifest: Self.manifest(directory)) { fleet in
            let poisoned = try await fleet.busctl("activate", "py.pay", #""poison""#, "--timeout", "40", timeout: .seconds(60))
            #expect(poisoned.exitCode == 1 && poisoned.standardError.contains("ended 3 time(s) while holding it"), "\(poisoned.standardError)")
            #expect(Self.log(directory) == [#""poison" 1"#, #""poison" 2"#, #""poison" 3"#])
            let list = try decode(DeadLetterList.self, from: try await fleet.busctl("dead-letters", "--json"))
            let letter = try #require(list.letters.first)
            #expect(list.letters.count == 1 && letter.board == "py.pay" && letter.attempts == 3, "\(list)")
            #expect(try await fleet.busctl("dead-letters").standardOutput.contains("DELIVERIES"))

            try FileManager.default.removeItem(atPath: "\(directory)/poison")
            let replayed = try await fleet.busctl("dead-letters", "--replay", "\(letter.id)")
            #expect(replayed.exitCode == 0 && replayed.standardOutput.contains("delivered again"), "\(replayed.standardError)")
            #expect(try await eventually(timeout: .seconds(20)) { Self.log(directory).last == #""poison" 1"# && Self.log(directory).count == 4 })
            #expect(try decode(DeadLetterList.self, from: try await fleet.busctl("dead-letters", "--json")).letters.isEmpty)
        }
    }

    /// An activation a board holds unanswered when the broker is killed is delivered again by
    /// the next broker (its journal in the state directory), to the same board process; once
    /// answered it is not delivered a third time by a broker after that.
    @Test func anActivationHeldWhenTheBrokerIsKilledIsDeliveredByTheNextBroker() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var board: Int32 = 0
        try await TestFleet.with(manifest: Self.manifest(directory)) { fleet in
            let first = try await fleet.busctl("activate", "py.pay", #""keep""#, "--timeout", "2")
            #expect(first.exitCode == 1 && first.standardError.contains("timeout"), "\(first.standardError)")
            // Under load the board may start after the sender gave up: the activation waited for it.
            #expect(try await eventually(timeout: .seconds(20)) { Self.log(directory) == [#""keep" 1"#] }, "\(Self.log(directory))")
            let pid = try #require(fleet.pid(of: "py.pay"))
            board = pid

            try await fleet.restartBrokerAfterKill()
            #expect(
                try await eventually(timeout: .seconds(20)) { Self.log(directory) == [#""keep" 1"#, #""keep" 2"#] },
                "\(Self.log(directory)) \(fleet.brokerLog.suffix(2000))")
            #expect(fleet.pid(of: "py.pay") == pid)
            #expect(fleet.brokerLog.contains("at-least-once activations restored"))

            // Answered (the board logs before it answers: wait for the broker to have the
            // answer, which it journals): the broker after the next one has nothing to deliver.
            let journal = "\(fleet.stateDirectory)/deliveries.log"
            #expect(
                try await eventually(timeout: .seconds(10)) {
                    ((try? String(contentsOfFile: journal, encoding: .utf8)) ?? "").contains(#""op":"remove""#)
                })
            try await fleet.restartBrokerAfterKill()
            let waited = try await fleet.busctl("wait", "py.pay", "--timeout", "20")
            #expect(waited.exitCode == 0, "\(waited.standardError)")
            let list = try decode(DeadLetterList.self, from: try await fleet.busctl("dead-letters", "--json"))
            #expect(list.letters.isEmpty)
            #expect(Self.log(directory).count == 2, "\(Self.log(directory))")
            #expect(!fleet.brokerLog.contains("at-least-once activations restored"))
        }
        // The on-demand board the first broker started is the last broker's to stop (adopted): it
        // does not outlive the fleet.
        #expect(try await eventually(timeout: .seconds(10)) { kill(board, 0) != 0 }, "board process \(board) outlived the fleet")
        if kill(board, 0) == 0 { kill(board, SIGKILL) }
    }

    /// A board that takes an activation (`delivery.taken`) and works on it longer than the
    /// liveness timeout is neither delivered it again nor declared gone; its sender gets the
    /// answer. Taken and then killed, it is not delivered again: its sender learns outcomeUnknown.
    @Test func aTakenActivationOutlivesTheLivenessTimeoutAndIsNeverDeliveredTwice() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestFleet.with(manifest: Self.manifest(directory)) { fleet in
            let long = try await fleet.busctl("activate", "py.pay", #""long""#, "--timeout", "20", timeout: .seconds(30))
            #expect(long.exitCode == 0, "\(long.standardError)")
            #expect(Self.log(directory) == [#""long" 1"#])
            #expect(
                !fleet.brokerLog.contains("activation delivered again") && !fleet.brokerLog.contains("board dropped"),
                "\(fleet.brokerLog.suffix(2000))")

            async let killed = fleet.busctl("activate", "py.pay", #""long""#, "--timeout", "20", timeout: .seconds(30))
            #expect(try await eventually(timeout: .seconds(10)) { Self.log(directory).count == 2 })
            // Taken before its 4 s of work: the kill comes after it.
            try await Task.sleep(for: .milliseconds(500))
            let pid = try #require(fleet.pid(of: "py.pay"))
            #expect(kill(pid, SIGKILL) == 0)
            let result = try await killed
            #expect(result.exitCode == 1 && result.standardError.contains("outcomeUnknown"), "\(result.standardError)")
            try await Task.sleep(for: .seconds(1))
            #expect(Self.log(directory).count == 2, "\(Self.log(directory))")
        }
    }

    func temporaryDirectory() throws -> String {
        var template = Array("\(NSTemporaryDirectory())/boardbus-delivery-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw BusError(.transport, "mkdtemp failed") }
        return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
