import BusCore
import CZeroMQ
import Foundation
import Synchronization

/// What runs on a ``SocketLoop``'s thread. Every call happens on that thread, which owns the socket.
public protocol SocketLoopHandler: AnyObject {
    /// A whole multipart message arrived.
    func received(_ frames: [Data], on socket: ZMQSocket)
    /// Called about every tick interval, for heartbeats and deadlines.
    func tick(on socket: ZMQSocket)
    /// The loop is about to close the socket (last chance to send a goodbye).
    func stopping(on socket: ZMQSocket)
}

/// A thread that owns one ZeroMQ socket and polls it.
///
/// Other threads never touch the socket: they hand frames or closures to ``send(_:)`` and
/// ``execute(_:)``, which queue them and wake the loop through an `eventfd` that `zmq_poll`
/// watches beside the socket. The handler runs on the loop thread, so a broker can route a
/// message without any thread hop.
public final class SocketLoop: @unchecked Sendable {
    private enum Work {
        case send([Data])
        case run(@Sendable (ZMQSocket) -> Void)
    }

    private let queue = Mutex<[Work]>([])
    private let stopRequested = Atomic<Bool>(false)
    private let wakeDescriptor: Int32
    private let finished = DispatchSemaphore(value: 0)
    private let tickInterval: Duration
    private let name: String
    // Owned by the loop thread once `start` has run.
    private let socket: ZMQSocket
    private let handler: any SocketLoopHandler
    private let started = Atomic<Bool>(false)

    /// - Parameters:
    ///   - socket: a socket configured by the caller; the loop owns it from `start` on.
    ///   - handler: called on the loop thread.
    ///   - tickInterval: how often `tick` runs at least.
    public init(name: String, socket: ZMQSocket, handler: any SocketLoopHandler, tickInterval: Duration = .milliseconds(100)) throws {
        let descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard descriptor >= 0 else { throw BusError(.transport, "eventfd failed: errno \(errno)") }
        self.wakeDescriptor = descriptor
        self.name = name
        self.socket = socket
        self.handler = handler
        self.tickInterval = tickInterval
    }

    deinit {
        Glibc.close(wakeDescriptor)
    }

    /// Starts the loop thread.
    public func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Queues a message for the socket; it is sent from the loop thread.
    public func send(_ frames: [Data]) {
        enqueue(.send(frames))
    }

    /// Runs `work` on the loop thread, with the socket.
    public func execute(_ work: @escaping @Sendable (ZMQSocket) -> Void) {
        enqueue(.run(work))
    }

    /// Stops the loop, lets the handler say goodbye, closes the socket and waits for the thread.
    public func stop() {
        guard started.load(ordering: .acquiring) else {
            socket.close()
            return
        }
        if stopRequested.exchange(true, ordering: .acquiringAndReleasing) { return }
        wake()
        finished.wait()
    }

    private func enqueue(_ work: Work) {
        let wasEmpty = queue.withLock { queue in
            queue.append(work)
            return queue.count == 1
        }
        if wasEmpty { wake() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
    }

    private func run() {
        var items = [
            zmq_pollitem_t(socket: socket.pollHandle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0),
            zmq_pollitem_t(socket: nil, fd: wakeDescriptor, events: Int16(ZMQ_POLLIN), revents: 0),
        ]
        let clock = ContinuousClock()
        var nextTick = clock.now.advanced(by: tickInterval)
        while !stopRequested.load(ordering: .acquiring) {
            let remaining = clock.now.duration(to: nextTick)
            let timeout = max(0, remaining.wholeMilliseconds)
            let rc = zmq_poll(&items, 2, timeout)
            if rc < 0 && zmq_errno() != EINTR { break }
            if items[1].revents & Int16(ZMQ_POLLIN) != 0 {
                var counter: UInt64 = 0
                _ = Glibc.read(wakeDescriptor, &counter, MemoryLayout<UInt64>.size)
            }
            drainQueue()
            if items[0].revents & Int16(ZMQ_POLLIN) != 0 {
                receiveBatch()
            }
            if clock.now >= nextTick {
                handler.tick(on: socket)
                nextTick = clock.now.advanced(by: tickInterval)
            }
        }
        drainQueue()
        handler.stopping(on: socket)
        socket.close()
    }

    private func drainQueue() {
        let work = queue.withLock { queue -> [Work] in
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
        for item in work {
            switch item {
            case .send(let frames): _ = try? socket.send(frames)
            case .run(let closure): closure(socket)
            }
        }
    }

    /// Receives what is waiting, up to a batch, so queued sends and ticks are not starved.
    private func receiveBatch() {
        for _ in 0..<256 {
            guard let frames = try? socket.receive() else { return }
            handler.received(frames, on: socket)
        }
    }
}
