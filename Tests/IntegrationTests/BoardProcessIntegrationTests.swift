import BoardBusDemoRecorderIO
import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Testing

/// A board process run by `runAsProcess()`: four threads, whatever it does; its timers, main
/// actor and tasks of its own on the main thread; SIGINT and SIGTERM end it with a goodbye.
@Suite("A board process", .timeLimit(.minutes(2)))
struct BoardProcessIntegrationTests {
    static let manifest = #"{ "boards": [] }"#

    @Test func aBoardProcessKeepsFourThreadsWhileItSleepsHopsToTheMainActorAndRunsTasksOfItsOwn() async throws {
        try await TestFleet.with(manifest: Self.manifest) { fleet in
            let board = try await fleet.startBoard("BoardBusDemoRecorder", id: RecorderIO.id)
            let main = "BoardBusDemoRec"  // the executable's name as the kernel keeps it (15 bytes)
            let own: Set = [main, "bus-client", "ZMQbg/IO/0", "ZMQbg/Reaper"]
            for _ in 0..<3 {
                let result = try await fleet.busctl("call", "demo.recorder", "threads", #"{"sleepMilliseconds":25}"#)
                let report = try decode(RecorderIO.ThreadReport.self, from: result)
                #expect(report.threads.count == 4 && Set(report.threads) == own, "threads: \(report.threads)")
                #expect(report.handlerThread == "bus-client")
                #expect(report.mainActorOnMainThread)
                #expect(report.detachedThread == main)
                #expect(report.detachedAssumesMainActor)
                #expect(!report.longestSleepsWoke)
                #expect(report.sleptMilliseconds.keys.sorted() == ["continuous", "nanoseconds", "suspending"])
                for (way, milliseconds) in report.sleptMilliseconds {
                    #expect(milliseconds >= 25, "the \(way) sleep ended after \(milliseconds) ms")
                }
            }
            // From outside too, once the calls are over: nothing was left behind.
            let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(board.pid)/task")
            #expect(tasks.count == 4)
        }
    }

    @Test(arguments: [SIGINT, SIGTERM])
    func aStopSignalEndsTheBoardWithAGoodbye(signal: Int32) async throws {
        try await TestFleet.with(manifest: Self.manifest) { fleet in
            let board = try await fleet.startBoard("BoardBusDemoGreeter", id: "ext.greeter")
            #expect(kill(board.pid, signal) == 0)
            let ended = try await board.wait(timeout: .seconds(10))
            #expect(ended.exitCode == 0)
            #expect(ended.standardError.contains("board stopped"))
            // It said goodbye before it exited: gone at once, not after missed heartbeats.
            let list = try await fleet.busctl("list")
            #expect(list.exitCode == 0 && !list.standardOutput.contains("ext.greeter"), "\(list.standardOutput)")
        }
    }

    @Test(arguments: [
        ("task", "a board process runs from a synchronous main, on the main thread, outside any task"),
        ("thread", "a board process starts its loop before any other thread (it has 2)"),
    ])
    func runAsProcessCalledTooLateIsRefusedWithAReason(misuse: String, reason: String) async throws {
        try await TestFleet.with(manifest: Self.manifest) { fleet in
            let result = try await fleet.run("BoardBusDemoRecorder", arguments: ["--misuse", misuse])
            #expect(result.exitCode == 1)
            #expect(result.standardError.contains("board demo.recorder: badArgument: \(reason)"), "\(result.standardError)")
        }
    }
}
