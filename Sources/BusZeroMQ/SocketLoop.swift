import BusCore
import CBoardBusLinux
import CBoardBusZeroMQ
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

/// What runs on a ``SocketLoop``'s thread. Every call happens on that thread, which owns the socket.
package protocol SocketLoopHandler: AnyObject {
    /// A whole multipart message arrived: an envelope, or frames that are not one.
    func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket)
    /// Called about every tick interval, for heartbeats and deadlines.
    func tick(on socket: ZMQSocket)
    /// The loop is about to close the socket (last chance to send a goodbye).
    func stopping(on socket: ZMQSocket)
    /// Offered each message of a header and a payload before it is parsed, as
    /// ``ZMQSocket/receive(limits:intercept:)`` describes; true when it has dealt with it. By
    /// default false: every message is parsed and passed to ``received(_:on:)``.
    func intercept(from routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int, on socket: ZMQSocket) -> Bool
}

extension SocketLoopHandler {
    package func intercept(from routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int, on socket: ZMQSocket) -> Bool {
        false
    }
}

/// A thread that owns one ZeroMQ socket and polls it, and a task executor that runs on it.
///
/// Other threads never touch the socket: they hand frames or closures to ``send(_:)`` and
/// ``execute(_:)``, which queue them and wake the loop through an `eventfd` that `poll`
/// watches beside the socket and a periodic `timerfd` for the ticks. The handler runs on the loop
/// thread, so a broker can route a message without any thread hop.
///
/// The loop is also a `TaskExecutor`: tasks that prefer it (`withTaskExecutorPreference`) run on
/// the socket's thread, so a reply resumes its waiting task, and that task's next send goes
/// out, without waking another thread. As with an event loop, such tasks must not block.
package final class SocketLoop: TaskExecutor, @unchecked Sendable {
    private enum Work {
        case send(Envelope, validatedHeaderBytes: Int?)
        case run(@Sendable (ZMQSocket) -> Void)
        case job(UnownedJob)
    }

    private enum Phase: Int {
        case created, running, stopping, finished
    }

    private let queue = Mutex<[Work]>([])
    private let phase = Atomic<Int>(Phase.created.rawValue)
    /// `pthread_self()` of the loop thread, 0 before it starts.
    private let loopThread = Atomic<UInt>(0)
    private let wakeDescriptor: Int32
    /// A periodic timer (`timerfd`) that wakes the loop for ticks, so that `poll` itself never
    /// has a timeout to arm and cancel on every sleep.
    private let tickDescriptor: Int32
    /// libzmq's notification descriptor of the socket (`ZMQ_FD`).
    private let socketDescriptor: Int32
    private let finished = DispatchSemaphore(value: 0)
    private let tickInterval: Duration
    private let limits: BusLimits
    package let name: String
    // Owned by the loop thread once `start` has run.
    private let socket: ZMQSocket
    private let handler: any SocketLoopHandler
    /// The queue's second buffer: each drain swaps it with the queue, so that neither is
    /// reallocated. Touched only on the loop thread.
    @exclusivity(unchecked) private var draining: [Work] = []
    /// Jobs the loop thread itself queued (a task its reply resumed, the usual case): no lock,
    /// and no look at the shared queue after every message. Touched only on the loop thread.
    @exclusivity(unchecked) private var localJobs: [UnownedJob] = []
    @exclusivity(unchecked) private var runningJobs: [UnownedJob] = []
    /// Whether the shared queue may hold work, read without its lock after every message (set
    /// under the lock by whoever queues; a stale false only defers the work to the next turn).
    private let sharedQueued = Atomic<Bool>(false)

    /// - Parameters:
    ///   - socket: a socket configured by the caller; the loop owns it from `start` on.
    ///   - handler: called on the loop thread.
    ///   - tickInterval: how often `tick` runs at least.
    ///   - limits: the sizes of message the handler accepts; larger ones reach it as malformed.
    package init(
        name: String, socket: ZMQSocket, handler: any SocketLoopHandler, tickInterval: Duration = .milliseconds(100),
        limits: BusLimits = .default
    ) throws {
        self.socketDescriptor = try socket.notificationDescriptor()
        let descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard descriptor >= 0 else { throw BusError(.transport, "eventfd failed: errno \(errno)") }
        let timer = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard timer >= 0 else {
            Glibc.close(descriptor)
            throw BusError(.transport, "timerfd_create failed: errno \(errno)")
        }
        self.wakeDescriptor = descriptor
        self.tickDescriptor = timer
        self.name = name
        self.socket = socket
        self.handler = handler
        self.tickInterval = tickInterval
        self.limits = limits
    }

    deinit {
        Glibc.close(wakeDescriptor)
        Glibc.close(tickDescriptor)
    }

    /// Starts the loop thread.
    package func start() {
        guard phase.compareExchange(expected: Phase.created.rawValue, desired: Phase.running.rawValue, ordering: .acquiringAndReleasing).exchanged
        else { return }
        startThread(named: name) { [self] in
            loopThread.store(UInt(pthread_self()), ordering: .releasing)
            run()
            finished.signal()
        }
    }

    /// Whether the caller runs on the loop thread.
    package var isOnLoopThread: Bool {
        loopThread.load(ordering: .acquiring) == UInt(pthread_self())
    }

    /// Sends an envelope from the loop thread: at once when called there, else queued.
    /// `validatedHeaderBytes`: as ``ZMQSocket/send(_:routingID:validatedHeaderBytes:)`` says.
    package func send(_ envelope: Envelope, validatedHeaderBytes: Int? = nil) {
        if isOnLoopThread {
            _ = try? socket.send(envelope, validatedHeaderBytes: validatedHeaderBytes)
        } else {
            enqueue(.send(envelope, validatedHeaderBytes: validatedHeaderBytes))
        }
    }

    /// Runs `work` on the loop thread, with the socket.
    package func execute(_ work: @escaping @Sendable (ZMQSocket) -> Void) {
        enqueue(.run(work))
    }

    /// Runs a task's job on the loop thread (the `TaskExecutor` requirement). After the loop has
    /// stopped, jobs go to the global concurrent executor so that no task is stranded.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        // On the loop thread while it runs (the phase is read there, so it cannot change under it).
        if isOnLoopThread && phase.load(ordering: .relaxed) == Phase.running.rawValue {
            localJobs.append(job)
            return
        }
        if !enqueue(.job(job)) {
            globalConcurrentExecutor.enqueue(job)
        }
    }

    /// Stops the loop, lets the handler say goodbye, closes the socket and waits for the thread.
    /// Called on the loop thread itself, it asks the loop to stop and returns at once.
    package func stop() {
        let previous = phase.exchange(Phase.stopping.rawValue, ordering: .acquiringAndReleasing)
        switch Phase(rawValue: previous) {
        case .created:
            phase.store(Phase.finished.rawValue, ordering: .releasing)
            socket.close()
        case .running:
            if isOnLoopThread { return }
            wake()
            finished.wait()
        default:
            if previous == Phase.finished.rawValue { phase.store(previous, ordering: .releasing) }
        }
    }

    /// Queues work; returns false when the loop has finished and will never run it.
    @discardableResult
    private func enqueue(_ work: Work) -> Bool {
        let (accepted, wasEmpty) = queue.withLock { queue -> (Bool, Bool) in
            guard phase.load(ordering: .acquiring) != Phase.finished.rawValue else { return (false, false) }
            queue.append(work)
            sharedQueued.store(true, ordering: .releasing)
            return (true, queue.count == 1)
        }
        // The loop drains its queue before it polls again, so work queued from the loop thread
        // needs no wake-up.
        if accepted && wasEmpty && !isOnLoopThread { wake() }
        return accepted
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
    }

    private func run() {
        // One poll(2) per sleep, without a timeout (no timer armed and cancelled on every sleep),
        // on libzmq's notification descriptor (`ZMQ_FD`), the wake-up eventfd and the tick
        // timer. The notification descriptor only says that the socket's state may have
        // changed, and a send can consume its signal, so the loop sleeps only after a receive
        // found nothing (which re-arms it) and, when it sent since, after `ZMQ_EVENTS` says no
        // message waits. That is fewer system calls per wake-up than `zmq_poll`, which polls once
        // without waiting, then again to wait, then asks for the events again.
        let descriptors = UnsafeMutablePointer<pollfd>.allocate(capacity: 3)
        defer { descriptors.deallocate() }
        for (index, descriptor) in [socketDescriptor, wakeDescriptor, tickDescriptor].enumerated() {
            descriptors[index] = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        }
        // At least a millisecond: a zero period would disarm the timer.
        let interval = max(tickInterval, .milliseconds(1))
        let period = timespec(tv_sec: Int(interval.components.seconds), tv_nsec: Int(interval.components.attoseconds / 1_000_000_000))
        var schedule = itimerspec(it_interval: period, it_value: period)
        timerfd_settime(tickDescriptor, 0, &schedule, nil)
        // Plain nanoseconds on the monotonic clock: this is checked on every turn of the loop.
        let tickNanoseconds = UInt64(period.tv_sec) * 1_000_000_000 + UInt64(period.tv_nsec)
        var nextTick = monotonicNanoseconds() + tickNanoseconds
        var readSocket = true
        while phase.load(ordering: .acquiring) == Phase.running.rawValue {
            // A batch cut short leaves messages that will not signal the descriptor again.
            let more = readSocket && !receiveBatch()
            var sent = drainQueue()
            if monotonicNanoseconds() >= nextTick {
                handler.tick(on: socket)
                nextTick = monotonicNanoseconds() + tickNanoseconds
                sent = true
            }
            if more || (sent && socket.hasIncoming) {
                readSocket = true
                continue
            }
            if !localJobs.isEmpty || queue.withLock({ !$0.isEmpty }) {
                readSocket = false
                continue
            }
            // No timeout: the tick timer wakes the loop when nothing else does.
            let rc = poll(descriptors, 3, -1)
            if rc < 0 && errno != EINTR { break }
            var counter: UInt64 = 0
            if descriptors[1].revents & Int16(POLLIN) != 0 {
                _ = Glibc.read(wakeDescriptor, &counter, MemoryLayout<UInt64>.size)
            }
            let ticked = descriptors[2].revents & Int16(POLLIN) != 0
            if ticked {
                _ = Glibc.read(tickDescriptor, &counter, MemoryLayout<UInt64>.size)
                // The timer and the clock check drift apart by a little: the timer's tick is due.
                nextTick = 0
            }
            // On a tick the socket is read too, as a safety net for a missed notification.
            readSocket = descriptors[0].revents & Int16(POLLIN) != 0 || ticked
        }
        drainQueue()
        handler.stopping(on: socket)
        socket.close()
        let strandedLocal = localJobs
        localJobs = []
        // From here on, enqueue refuses work; jobs still queued go to the global executor.
        let stranded = queue.withLock { queue -> [Work] in
            phase.store(Phase.finished.rawValue, ordering: .releasing)
            defer { queue.removeAll() }
            return queue
        }
        loopThread.store(0, ordering: .releasing)
        for job in strandedLocal { globalConcurrentExecutor.enqueue(job) }
        for case .job(let job) in stranded { globalConcurrentExecutor.enqueue(job) }
    }

    /// Runs what other threads (and tasks on this executor) queued, a bounded number of rounds so
    /// that a task that keeps queueing work cannot starve the socket.
    /// Returns whether there was any.
    @discardableResult
    private func drainQueue() -> Bool {
        for round in 0..<64 {
            let ranJobs = runLocalJobs()
            var work = draining
            draining = []
            if sharedQueued.load(ordering: .acquiring) {
                queue.withLock {
                    swap(&$0, &work)
                    sharedQueued.store(false, ordering: .relaxed)
                }
            }
            defer {
                work.removeAll(keepingCapacity: true)
                draining = work
            }
            if work.isEmpty && !ranJobs { return round > 0 }
            for item in work {
                switch item {
                case .send(let envelope, let size): _ = try? socket.send(envelope, validatedHeaderBytes: size)
                case .run(let closure): closure(socket)
                case .job(let job): job.runSynchronously(on: asUnownedTaskExecutor())
                }
            }
        }
        return true
    }

    /// Runs the jobs the loop thread queued so far (not those they queue: the next round's).
    private func runLocalJobs() -> Bool {
        guard !localJobs.isEmpty else { return false }
        var jobs = runningJobs
        runningJobs = []
        swap(&jobs, &localJobs)
        for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
        jobs.removeAll(keepingCapacity: true)
        runningJobs = jobs
        return true
    }

    /// Receives what is waiting, up to a batch, so queued work and ticks are not starved.
    /// Returns whether it stopped because nothing more waits (rather than at the batch's end).
    ///
    /// Work a message queued (a task its reply resumed) runs before the next receive, so that
    /// what it sends goes out before the receive that finds the socket empty: that receive then
    /// re-arms the notification descriptor after the sends, and the loop can sleep without
    /// asking libzmq again (one system call fewer per wake-up).
    private func receiveBatch() -> Bool {
        receiveBatch(handler: handler, socket: socket)
    }

    /// The batch, with the handler and socket as parameters: borrowed for the whole batch, where
    /// locals captured by the receive's closure were retained and released for every message.
    private func receiveBatch(handler: any SocketLoopHandler, socket: ZMQSocket) -> Bool {
        for _ in 0..<256 {
            let receipt = try? socket.receive(limits: limits) { routingID, header, payloadBytes in
                handler.intercept(from: routingID, header: header, payloadBytes: payloadBytes, on: socket)
            }
            // Consumed: the message moves to the handler, not copied and destroyed twice.
            switch consume receipt {
            case .message(let message): handler.received(message, on: socket)
            case .intercepted: break
            case .nothing, nil: return true
            }
            socket.releaseReceivedFrames()
            if !localJobs.isEmpty || sharedQueued.load(ordering: .acquiring) { drainQueue() }
        }
        return false
    }
}
