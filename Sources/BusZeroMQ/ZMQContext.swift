import BusCore
import CBoardBusZeroMQ
import Glibc
import Synchronization

/// A libzmq context. The context itself is thread-safe; its sockets are not.
package final class ZMQContext: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer

    /// Makes a context with `ioThreads` I/O threads (one is enough for Unix-domain sockets; each
    /// connection stays on one of them) and room for `maximumSockets` sockets (libzmq's default
    /// is 1 023).
    package init(maximumSockets: Int32? = nil, ioThreads: Int32 = 1) throws {
        guard let handle = zmq_ctx_new() else { throw ZMQContext.lastError("zmq_ctx_new") }
        zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads)
        if let maximumSockets { zmq_ctx_set(handle, ZMQ_MAX_SOCKETS, maximumSockets) }
        self.handle = handle
    }

    /// The process's shared context, made on first use and never terminated. As the ZeroMQ guide
    /// advises, a process needs one context: every connection made from it shares its I/O thread,
    /// which then wakes once for the messages of all of them.
    package static func shared() throws -> ZMQContext {
        try sharedContext.withLock { context in
            if let context { return context }
            let made = try ZMQContext()
            context = made
            return made
        }
    }

    private static let sharedContext = Mutex<ZMQContext?>(nil)

    /// Terminates the context. Every socket must be closed first (they all use linger 0, so this
    /// returns at once).
    package func terminate() {
        while zmq_ctx_term(handle) == -1 && zmq_errno() == EINTR {}
    }

    /// The libzmq version, e.g. "4.3.4".
    package static var libraryVersion: String {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }

    static func lastError(_ call: String) -> BusError {
        let code = zmq_errno()
        let text = String(cString: zmq_strerror(code))
        return BusError(.transport, "\(call) failed: \(text) (errno \(code))")
    }
}

/// The version of the libzmq this process runs on.
package enum ZMQVersion {
    /// e.g. "4.3.4".
    package static var string: String { ZMQContext.libraryVersion }
}
