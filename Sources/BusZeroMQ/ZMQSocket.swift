import BusCore
import CZeroMQ
import Foundation

/// One libzmq socket. Not thread-safe: it belongs to one thread (a ``SocketLoop``), and only that
/// thread touches it after it has been handed over.
public final class ZMQSocket {
    /// The socket types BoardBus uses.
    public enum Kind: Sendable {
        case router, dealer

        var rawValue: Int32 {
            switch self {
            case .router: ZMQ_ROUTER
            case .dealer: ZMQ_DEALER
            }
        }
    }

    /// The outcome of a non-blocking send.
    public enum SendResult: Sendable, Equatable {
        case sent
        /// The peer's queue is full (high-water mark) or, on a ROUTER, the peer is gone.
        case wouldBlock
        case peerUnreachable
    }

    private var handle: UnsafeMutableRawPointer?
    /// One heap-allocated message reused for every receive (a `zmq_msg_t` must not move).
    private let message: UnsafeMutablePointer<zmq_msg_t>

    public init(context: ZMQContext, kind: Kind) throws {
        guard let handle = zmq_socket(context.handle, kind.rawValue) else {
            throw ZMQContext.lastError("zmq_socket")
        }
        self.handle = handle
        self.message = .allocate(capacity: 1)
        zmq_msg_init(message)
        try setOption(ZMQ_LINGER, Int32(0))
    }

    deinit {
        close()
        zmq_msg_close(message)
        message.deallocate()
    }

    /// Sets an integer socket option.
    public func setOption(_ option: Int32, _ value: Int32) throws {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size) == 0 else {
            throw ZMQContext.lastError("zmq_setsockopt(\(option))")
        }
    }

    /// Sets a 64-bit integer socket option.
    public func setOption(_ option: Int32, _ value: Int64) throws {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int64>.size) == 0 else {
            throw ZMQContext.lastError("zmq_setsockopt(\(option))")
        }
    }

    public func bind(_ endpoint: String) throws {
        guard zmq_bind(handle, endpoint) == 0 else { throw ZMQContext.lastError("zmq_bind(\(endpoint))") }
    }

    public func connect(_ endpoint: String) throws {
        guard zmq_connect(handle, endpoint) == 0 else { throw ZMQContext.lastError("zmq_connect(\(endpoint))") }
    }

    /// Sends a multipart message without blocking.
    @discardableResult
    public func send(_ frames: [Data]) throws -> SendResult {
        for (index, frame) in frames.enumerated() {
            let more = index < frames.count - 1
            let result = try send(frame: frame, more: more)
            // Only the first frame can fail with EAGAIN/EHOSTUNREACH; later parts are queued atomically.
            if result != .sent { return result }
        }
        return .sent
    }

    private func send(frame: Data, more: Bool) throws -> SendResult {
        let flags = ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)
        let rc = frame.withUnsafeBytes { buffer in
            zmq_send(handle, buffer.baseAddress, buffer.count, flags)
        }
        if rc >= 0 { return .sent }
        switch zmq_errno() {
        case EAGAIN: return .wouldBlock
        case EHOSTUNREACH: return .peerUnreachable
        default: throw ZMQContext.lastError("zmq_send")
        }
    }

    /// Receives one whole multipart message without blocking; nil when none is waiting.
    public func receive() throws -> [Data]? {
        var frames: [Data] = []
        while true {
            let rc = zmq_msg_recv(message, handle, frames.isEmpty ? ZMQ_DONTWAIT : 0)
            if rc < 0 {
                let error = zmq_errno()
                if error == EAGAIN && frames.isEmpty { return nil }
                if error == EINTR { continue }
                throw ZMQContext.lastError("zmq_msg_recv")
            }
            frames.append(Data(bytes: zmq_msg_data(message), count: zmq_msg_size(message)))
            if zmq_msg_more(message) == 0 { return frames }
        }
    }

    /// Waits until a message can be received, up to `timeoutMilliseconds` (-1: forever).
    /// For callers that own the socket on a thread of their own (e.g. a benchmark client).
    public func waitReadable(timeoutMilliseconds: Int) -> Bool {
        var item = zmq_pollitem_t(socket: handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0)
        return zmq_poll(&item, 1, timeoutMilliseconds) > 0
    }

    /// The raw handle, for `zmq_poll` inside this module.
    var pollHandle: UnsafeMutableRawPointer? { handle }

    /// Closes the socket; later calls do nothing.
    public func close() {
        if let handle {
            zmq_close(handle)
            self.handle = nil
        }
    }
}
