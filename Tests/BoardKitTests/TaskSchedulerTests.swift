import Foundation
import Synchronization
import Testing

@testable import BoardKit

/// The execution modes of BlockTaskBoard, in one process (the multi-process tests run them
/// through the broker too). Jobs wait on gates the test opens and the test waits for the
/// scheduler to be idle: nothing here depends on how long anything takes.
@Suite("Task scheduling and the plugin launcher")
struct TaskSchedulerTests {
    /// Records job starts and ends in order, and the most jobs that ran at once.
    final class Journal: Sendable {
        private struct State {
            var events: [String] = []
            var running = 0
            var mostAtOnce = 0
        }
        private let state = Mutex(State())

        func started(_ tag: String) {
            state.withLock {
                $0.events.append("start \(tag)")
                $0.running += 1
                $0.mostAtOnce = max($0.mostAtOnce, $0.running)
            }
        }

        func ended(_ tag: String, finished: Bool) {
            state.withLock {
                $0.events.append(finished ? "end \(tag)" : "cancelled \(tag)")
                $0.running -= 1
            }
        }

        var events: [String] { state.withLock { $0.events } }
        var finished: [String] { events.filter { $0.hasPrefix("end ") }.map { String($0.dropFirst(4)) } }
        var mostAtOnce: Int { state.withLock { $0.mostAtOnce } }
    }

    /// Opened once by the test. Waiting on it ends when it opens or when the waiting task is
    /// cancelled (the iteration of an `AsyncStream` ends on cancellation).
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [AsyncStream<Void>.Continuation])>((false, []))

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.finish() }
        }

        func wait() async {
            let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
            let open = state.withLock { state in
                if !state.open { state.waiters.append(continuation) }
                return state.open
            }
            if open { return }
            for await _ in stream {}
        }
    }

    /// A job that runs until `gate` opens (at once without one), recording itself.
    func job(_ tag: String, _ journal: Journal, gate: Gate? = nil) -> TaskScheduler.Job {
        {
            journal.started(tag)
            await gate?.wait()
            let finished = !Task.isCancelled
            journal.ended(tag, finished: finished)
            try Task.checkCancellation()
        }
    }

    @Test func queueRunsOneAtATimeInOrder() async throws {
        let scheduler = TaskScheduler(mode: .queue, queueLimit: 8)
        let journal = Journal()
        let gate = Gate()
        try await scheduler.submit(job("a", journal, gate: gate)) { _ in }
        try await scheduler.submit(job("b", journal)) { _ in }
        try await scheduler.submit(job("c", journal)) { _ in }
        gate.open()
        await scheduler.untilIdle()
        #expect(journal.events == ["start a", "end a", "start b", "end b", "start c", "end c"])
        #expect(journal.mostAtOnce == 1)
    }

    @Test func defaultRunsEverythingAtOnce() async throws {
        let scheduler = TaskScheduler(mode: .default, queueLimit: 8)
        let journal = Journal()
        let gate = Gate()
        // "slow" ends only once the gate opens, which happens after "fast" ended: both ran at once.
        try await scheduler.submit(job("slow", journal, gate: gate)) { _ in }
        try await scheduler.submit({
            try await self.job("fast", journal)()
            gate.open()
        }) { _ in }
        await scheduler.untilIdle()
        #expect(journal.finished == ["fast", "slow"])
        #expect(journal.mostAtOnce == 2)
    }

    @Test func latestCancelsTheRunningTask() async throws {
        let scheduler = TaskScheduler(mode: .latest, queueLimit: 8)
        let journal = Journal()
        let failures = Mutex<[String]>([])
        try await scheduler.submit(job("first", journal, gate: Gate())) { error in
            failures.withLock { $0.append("\(type(of: error))") }
        }
        try await scheduler.submit(job("second", journal)) { _ in }
        await scheduler.untilIdle()
        #expect(journal.finished == ["second"])
        #expect(journal.events.contains("cancelled first"))
        #expect(failures.withLock { $0 } == ["CancellationError"])
    }

    @Test func onlyRefusesWhileBusy() async throws {
        let scheduler = TaskScheduler(mode: .only, queueLimit: 8)
        let journal = Journal()
        let gate = Gate()
        try await scheduler.submit(job("first", journal, gate: gate)) { _ in }
        let refusal = await #expect(throws: BusError.self) { try await scheduler.submit(self.job("second", journal)) { _ in } }
        #expect(refusal?.code == .busy)
        gate.open()
        await scheduler.untilIdle()
        try await scheduler.submit(job("third", journal)) { _ in }
        await scheduler.untilIdle()
        #expect(journal.finished == ["first", "third"])
    }

    @Test func concurrentKeepsAtMostMaxRunning() async throws {
        let scheduler = TaskScheduler(mode: .concurrent(max: 2), queueLimit: 1)
        let journal = Journal()
        let gate = Gate()
        try await scheduler.submit(job("a", journal, gate: gate)) { _ in }
        try await scheduler.submit(job("b", journal, gate: gate)) { _ in }
        try await scheduler.submit(job("c", journal)) { _ in }
        let refusal = await #expect(throws: BusError.self) { try await scheduler.submit(self.job("d", journal)) { _ in } }
        #expect(refusal?.code == .busy)
        gate.open()
        await scheduler.untilIdle()
        #expect(Set(journal.finished) == ["a", "b", "c"])
        #expect(journal.events.firstIndex(of: "start c")! > journal.events.firstIndex { $0 == "end a" || $0 == "end b" }!)
        #expect(journal.mostAtOnce == 2)
    }

    struct Module: ModulePlugin {
        let identifier: String
        func install(into board: inout Board) {
            board.onAction(named: identifier) { _, _ in }
        }
    }

    @Test func installingAPluginTwiceIsAnError() throws {
        var launcher = PluginLauncher(id: "demo.launcher", environment: [:])
        try launcher.install(Module(identifier: "one"))
        try launcher.install(Module(identifier: "two"))
        let error = try #require(throws: BusError.self) { try launcher.install(Module(identifier: "one")) }
        #expect(error.message.contains("already installed"))
        #expect(launcher.plugins == ["one", "two"])
    }
}
