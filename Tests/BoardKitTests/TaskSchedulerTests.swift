import Foundation
import Synchronization
import Testing

@testable import BoardKit

/// The execution modes of BlockTaskBoard, in one process (the multi-process tests run them
/// through the broker too).
@Suite("Task scheduling and the plugin launcher")
struct TaskSchedulerTests {
    /// Records finished job tags in order.
    final class Finished: Sendable {
        private let tags = Mutex<[String]>([])
        func add(_ tag: String) { tags.withLock { $0.append(tag) } }
        var all: [String] { tags.withLock { $0 } }
    }

    func job(_ tag: String, _ millis: Int, _ finished: Finished) -> TaskScheduler.Job {
        {
            try await Task.sleep(for: .milliseconds(millis))
            try Task.checkCancellation()
            finished.add(tag)
        }
    }

    /// A job that finishes only once `ready` holds (or 10 s have passed), whatever the machine's
    /// load: the tests order jobs by what they wait for, not by how long they sleep.
    func job(_ tag: String, _ finished: Finished, after ready: @escaping @Sendable () -> Bool) -> TaskScheduler.Job {
        {
            let deadline = ContinuousClock.now.advanced(by: .seconds(10))
            while !ready() && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            try Task.checkCancellation()
            finished.add(tag)
        }
    }

    /// Opened once by the test; jobs wait on it.
    final class Gate: Sendable {
        private let opened = Atomic<Bool>(false)
        func open() { opened.store(true, ordering: .releasing) }
        var isOpen: Bool { opened.load(ordering: .acquiring) }
    }

    func settle(_ finished: Finished, count: Int) async {
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while finished.all.count < count && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        try? await Task.sleep(for: .milliseconds(100))
    }

    @Test func queueRunsOneAtATimeInOrder() async throws {
        let scheduler = TaskScheduler(mode: .queue, queueLimit: 8)
        let finished = Finished()
        for (tag, millis) in [("a", 150), ("b", 50), ("c", 1)] {
            try await scheduler.submit(job(tag, millis, finished)) { _ in }
        }
        await settle(finished, count: 3)
        #expect(finished.all == ["a", "b", "c"])
    }

    @Test func defaultRunsEverythingAtOnce() async throws {
        let scheduler = TaskScheduler(mode: .default, queueLimit: 8)
        let finished = Finished()
        // "slow" finishes only after "fast": both must run at once.
        try await scheduler.submit(job("slow", finished) { finished.all.contains("fast") }) { _ in }
        try await scheduler.submit(job("fast", 1, finished)) { _ in }
        await settle(finished, count: 2)
        #expect(finished.all == ["fast", "slow"])
    }

    @Test func latestCancelsTheRunningTask() async throws {
        let scheduler = TaskScheduler(mode: .latest, queueLimit: 8)
        let finished = Finished()
        let gate = Gate()
        try await scheduler.submit(job("first", finished) { gate.isOpen }) { _ in }
        try await scheduler.submit(job("second", 1, finished)) { _ in }
        gate.open()
        await settle(finished, count: 1)
        #expect(finished.all == ["second"])
    }

    @Test func onlyRefusesWhileBusy() async throws {
        let scheduler = TaskScheduler(mode: .only, queueLimit: 8)
        let finished = Finished()
        let gate = Gate()
        try await scheduler.submit(job("first", finished) { gate.isOpen }) { _ in }
        await #expect(throws: BusError.self) { try await scheduler.submit(self.job("second", 1, finished)) { _ in } }
        gate.open()
        await settle(finished, count: 1)
        #expect(finished.all == ["first"])
        try await scheduler.submit(job("third", 1, finished)) { _ in }
        await settle(finished, count: 2)
        #expect(finished.all == ["first", "third"])
    }

    @Test func concurrentKeepsAtMostMaxRunning() async throws {
        let scheduler = TaskScheduler(mode: .concurrent(max: 2), queueLimit: 1)
        let finished = Finished()
        let gate = Gate()
        try await scheduler.submit(job("a", finished) { gate.isOpen }) { _ in }
        try await scheduler.submit(job("b", finished) { gate.isOpen }) { _ in }
        try await scheduler.submit(job("c", 1, finished)) { _ in }
        await #expect(throws: BusError.self) { try await scheduler.submit(self.job("d", 1, finished)) { _ in } }
        gate.open()
        await settle(finished, count: 3)
        #expect(finished.all.count == 3)
        #expect(finished.all.first != "c")
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
