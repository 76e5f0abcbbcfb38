import BusCore
import CBoardBusLinux
import Dispatch
import FoundationEssentials
import Glibc
import HeapModule
import Synchronization

#if compiler(>=6.3) && compiler(<6.4)
    @_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency
#endif

/// What runs a board process: ``run(stopSignals:_:)``.
///
/// By default the first task of a process starts libdispatch's worker pool: threads that come
/// and go with the load, and a manager thread with a one-second timer that stays for the life of
/// the process. A board process runs its handlers on its socket's thread already, so everything
/// else it does (its service group, timers, the main actor, tasks without a preference) can run
/// on the main thread, which would otherwise only wait: the process keeps four threads (main, the
/// socket loop, libzmq's I/O and reaper) and sleeps when idle. The main thread also takes the
/// stop signals, from a `signalfd`, instead of libdispatch's signal sources. Like an event loop,
/// it must not block: a task that blocks holds up every other task without a preference.
///
/// Swift 6.3 lets a process give concurrency its own main and default executors (the
/// `ExecutorFactory` of the "custom main and global executors" pitch, still behind an SPI). With
/// another compiler, where that interface may differ, the process keeps Swift's default
/// executors (libdispatch's main queue on the main thread, as an async `main` has it) and the
/// service group traps the signals itself: the same board, on more threads.
enum ProcessExecutor {
    /// Runs `body` as the process's first task, then exits with the status it returns. `body`
    /// gets the stop signals that arrive, or nil when the service group must trap them itself.
    /// Must be called from a synchronous `main`, on the main thread, before any other thread or
    /// task exists (the stop signals are blocked in the threads made after).
    static func run(stopSignals: [Int32], _ body: @escaping @Sendable (AsyncStream<Int32>?) async -> Int32) throws -> Never {
        guard boardbus_is_main_thread() == 1, withUnsafeCurrentTask(body: { $0 == nil }) else {
            throw BusError(.badArgument, "a board process runs from a synchronous main, on the main thread, outside any task")
        }
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 1
        guard threads == 1 else {
            throw BusError(
                .badArgument,
                "a board process starts its loop before any other thread (it has \(threads)): SIGTERM would reach one that does not block it")
        }
        #if compiler(>=6.3) && compiler(<6.4)
            exit(try ProcessLoop.shared.run(stopSignals: stopSignals, body))
        #else
            Task { exit(await body(nil)) }
            dispatchMain()
        #endif
    }
}

#if compiler(>=6.3) && compiler(<6.4)
    /// The jobs of the process's main and default executors, run on the main thread.
    final class ProcessLoop: @unchecked Sendable {
        private struct Timed: Comparable {
            let deadline: UInt64
            let order: UInt64
            let job: UnownedJob
            let main: Bool

            static func < (left: Timed, right: Timed) -> Bool { (left.deadline, left.order) < (right.deadline, right.order) }
            static func == (left: Timed, right: Timed) -> Bool { (left.deadline, left.order) == (right.deadline, right.order) }
        }

        private struct Queues {
            var now: [(job: UnownedJob, main: Bool)] = []
            var later = Heap<Timed>()
            var order: UInt64 = 0
            var stopped = false
        }

        static let shared = ProcessLoop()

        private let queues = Mutex(Queues())
        /// Written by whoever queues a job from another thread, so that the loop's `poll` wakes.
        private let wakeDescriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        /// The stop signals, once `run` has blocked them (-1 before).
        private let signalDescriptor = Atomic<Int32>(-1)
        private let signals = AsyncStream<Int32>.makeStream()
        fileprivate let main = ProcessMainExecutor()
        fileprivate let global = ProcessGlobalExecutor()

        private init() {}

        func run(stopSignals: [Int32], _ body: @escaping @Sendable (AsyncStream<Int32>?) async -> Int32) throws -> Int32 {
            var mask = sigset_t()
            sigemptyset(&mask)
            for signal in stopSignals { sigaddset(&mask, signal) }
            // Blocked before any other thread exists, so that every thread inherits the mask and the
            // signals wait in the signalfd instead of ending the process.
            pthread_sigmask(SIG_BLOCK, &mask, nil)
            let descriptor = signalfd(-1, &mask, Int32(SFD_NONBLOCK | SFD_CLOEXEC))
            guard descriptor >= 0, wakeDescriptor >= 0 else { throw BusError(.transport, "signalfd or eventfd failed: errno \(errno)") }
            defer { Glibc.close(descriptor) }
            signalDescriptor.store(descriptor, ordering: .releasing)
            _createExecutors(factory: ProcessExecutors.self)
            let status = Mutex<Int32?>(nil)
            let signals = self.signals.stream
            Task {
                let code = await body(signals)
                status.withLock { $0 = code }
            }
            try main.runUntil { status.withLock { $0 } != nil }
            return status.withLock { $0 } ?? 0
        }

        func take(_ job: UnownedJob, main: Bool, after delay: Duration? = nil) {
            let first = queues.withLock { queues -> Bool in
                guard let delay else {
                    queues.now.append((job, main))
                    return queues.now.count == 1
                }
                queues.order &+= 1
                let earliest = queues.later.min?.deadline ?? .max
                // On CLOCK_MONOTONIC, which stops while the machine is suspended: a `ContinuousClock`
                // sleep across a suspend ends late (never early, which `CLOCK_BOOTTIME` would do to
                // a `SuspendingClock` sleep). Saturated: a deadline past the clock's range (a sleep
                // of UInt64.max ns) is never.
                let (sum, overflow) = monotonicNanoseconds().addingReportingOverflow(Self.nanoseconds(delay))
                let deadline = overflow ? UInt64.max : sum
                queues.later.insert(Timed(deadline: deadline, order: queues.order, job: job, main: main))
                return deadline < earliest
            }
            if first { wake() }
        }

        func stop() {
            queues.withLock { $0.stopped = true }
            wake()
        }

        /// Runs jobs until `condition` holds after one (or `stop()`).
        func runUntil(_ condition: () -> Bool) {
            queues.withLock { $0.stopped = false }
            while true {
                runDue()
                if condition() { return }
                let (stopped, deadline) = queues.withLock { queues -> (Bool, UInt64?) in
                    (queues.stopped, queues.now.isEmpty ? (queues.later.min?.deadline ?? .max) : nil)
                }
                if stopped { return }
                for signal in waitForWork(until: deadline) { self.signals.continuation.yield(signal) }
            }
        }

        private func wake() {
            var one: UInt64 = 1
            _ = Glibc.write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
        }

        /// Runs the jobs queued so far and the timed ones that are due.
        private func runDue() {
            let now = monotonicNanoseconds()
            let jobs = queues.withLock { queues -> [(job: UnownedJob, main: Bool)] in
                var jobs: [(job: UnownedJob, main: Bool)] = []
                swap(&jobs, &queues.now)
                while let timed = queues.later.min, timed.deadline <= now {
                    queues.later.removeMin()
                    jobs.append((timed.job, timed.main))
                }
                return jobs
            }
            for (job, main) in jobs {
                if main {
                    job.runSynchronously(on: self.main.asUnownedSerialExecutor())
                } else {
                    job.runSynchronously(on: global.asUnownedTaskExecutor())
                }
            }
        }

        /// Sleeps in `poll` until a job is queued, `deadline` (nil: do not sleep; .max: no timer) or a
        /// stop signal; returns the signals that arrived.
        private func waitForWork(until deadline: UInt64?) -> [Int32] {
            let signals = signalDescriptor.load(ordering: .acquiring)
            var descriptors = [pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0), pollfd(fd: signals, events: Int16(POLLIN), revents: 0)]
            // Milliseconds rounded up, so that a timer never fires early.
            var timeout: Int32 = 0
            if let deadline {
                let left = deadline - min(deadline, monotonicNanoseconds())
                timeout = deadline == .max ? -1 : Int32(clamping: left / 1_000_000 + (left % 1_000_000 == 0 ? 0 : 1))
            }
            guard poll(&descriptors, 2, timeout) > 0 else { return [] }
            var counter: UInt64 = 0
            if descriptors[0].revents != 0 { _ = Glibc.read(wakeDescriptor, &counter, MemoryLayout<UInt64>.size) }
            var arrived: [Int32] = []
            var info = signalfd_siginfo()
            while descriptors[1].revents != 0, Glibc.read(signals, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size
            {
                arrived.append(Int32(info.ssi_signo))
            }
            return arrived
        }

        /// A delay in whole nanoseconds, negative ones as none, past UInt64's range as `.max`.
        private static func nanoseconds(_ delay: Duration) -> UInt64 {
            let (seconds, attoseconds) = delay.components
            guard seconds >= 0, attoseconds >= 0 else { return 0 }
            let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
            let (total, carry) = whole.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
            return overflow || carry ? .max : total
        }

    }

    /// A clock's duration as `Duration`: the stdlib clocks that schedule on an executor (continuous
    /// and suspending, through `Task.sleep`) count in it; the loop's monotonic clock stands for both.
    private func delay<D: DurationProtocol>(_ duration: D) -> Duration {
        guard let duration = duration as? Duration else {
            preconditionFailure("the process executor schedules for clocks that count in Duration, not \(D.self)")
        }
        return duration
    }

    /// The main actor's executor: its jobs run on the main thread, in the loop.
    final class ProcessMainExecutor: MainExecutor, SchedulingExecutor {
        func enqueue(_ job: consuming ExecutorJob) { ProcessLoop.shared.take(UnownedJob(job), main: true) }
        func enqueue<C: Clock>(_ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C) {
            ProcessLoop.shared.take(UnownedJob(job), main: true, after: BoardKit.delay(delay))
        }
        /// Whatever runs on the main thread during the loop runs one job at a time with the main
        /// actor's jobs, so the main thread is the main actor's (as on libdispatch's main queue):
        /// `MainActor.assumeIsolated` holds there, in a task without an actor too.
        func isIsolatingCurrentContext() -> Bool? { boardbus_is_main_thread() == 1 }
        func checkIsolated() { precondition(boardbus_is_main_thread() == 1, "the main actor runs on the main thread; this is another") }
        func run() throws { ProcessLoop.shared.runUntil { false } }
        func runUntil(_ condition: () -> Bool) throws { ProcessLoop.shared.runUntil(condition) }
        func stop() { ProcessLoop.shared.stop() }
    }

    /// The default executor: where tasks without a preference, and timers, run.
    final class ProcessGlobalExecutor: TaskExecutor, SchedulingExecutor {
        func enqueue(_ job: consuming ExecutorJob) { ProcessLoop.shared.take(UnownedJob(job), main: false) }
        func enqueue<C: Clock>(_ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C) {
            ProcessLoop.shared.take(UnownedJob(job), main: false, after: BoardKit.delay(delay))
        }
    }

    private struct ProcessExecutors: ExecutorFactory {
        static var mainExecutor: any MainExecutor { ProcessLoop.shared.main }
        static var defaultExecutor: any TaskExecutor { ProcessLoop.shared.global }
    }
#endif
