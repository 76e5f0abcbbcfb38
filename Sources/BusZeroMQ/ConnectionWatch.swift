import BusCore
import CBoardBusZeroMQ
import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// Watches the connections that sockets accept, through libzmq's socket monitor, on a thread of
/// its own: each accepted connection with its descriptor (which the handler may refuse), each
/// connection that ends, and each handshake that failed.
///
/// libzmq has no per-connection limit, and its ipc listener aborts the process when `accept()`
/// fails with `EMFILE`: a process that lets peers connect must count them and close the excess
/// itself. A refused connection is shut down (`shutdown(2)` on its descriptor), which libzmq sees
/// as the peer closing it: it is closed on libzmq's I/O thread, and its end reported like any other.
package final class ConnectionWatch: @unchecked Sendable {
    package enum Event: Sendable {
        /// A connection was accepted on `endpoint` (the bound one, e.g. `tcp://127.0.0.1:7400`).
        case accepted(endpoint: String, descriptor: Int32)
        /// A connection could not be accepted on `endpoint` (no descriptor for it, or it went away
        /// before it was accepted).
        case acceptFailed(endpoint: String)
        /// A connection ended (its descriptor is closed next).
        case disconnected(descriptor: Int32)
        /// A connection's handshake failed (a peer without CURVE, another server key, or one
        /// that sent no greeting in time).
        case handshakeFailed(endpoint: String)
    }

    /// The monitors' sockets: used on the watch's thread only, once it runs.
    private let monitors: [ZMQSocket]
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)

    /// Starts monitoring `sockets` (each on the thread that owns it, before that thread uses it:
    /// this is the only call on them) and handling their events on a new thread.
    /// - Parameter handler: called for every event, in order; for `accepted`, returns whether to
    ///   keep the connection (false: it is shut down at once).
    package init(context: ZMQContext, sockets: [ZMQSocket], handler: @escaping @Sendable (Event) -> Bool) throws {
        var made: [ZMQSocket] = []
        do {
            for socket in sockets {
                let endpoint = "inproc://boardbus-connections-\(UInt64.random(in: 0...UInt64.max))"
                let watched =
                    ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                guard zmq_socket_monitor(socket.handle, endpoint, watched) == 0 else { throw ZMQContext.lastError("zmq_socket_monitor") }
                let pair = try ZMQSocket(context: context, kind: .pair)
                made.append(pair)
                try pair.set(.linger(.zero))
                try pair.connect(endpoint)
            }
        } catch {
            for pair in made { pair.close() }
            throw error
        }
        monitors = made
        startThread(named: "connections") { [self] in
            while running.load(ordering: .acquiring) {
                let ready = ZMQSocket.poll(monitors, timeoutMilliseconds: 100)
                for (index, isReady) in ready.enumerated() where isReady {
                    while let frames = try? monitors[index].receive() {
                        guard let event = Self.event(frames) else { continue }
                        if !handler(event), case .accepted(_, let descriptor) = event {
                            _ = shutdown(descriptor, Int32(SHUT_RDWR))
                        }
                    }
                }
            }
            for pair in monitors { pair.close() }
            finished.signal()
        }
    }

    /// Reads a monitor message (libzmq 4.x: a 6-byte frame, the event number and its value in
    /// host byte order, then the endpoint); nil for events not watched.
    static func event(_ frames: [Data]) -> Event? {
        guard frames.count >= 2, frames[0].count >= 6 else { return nil }
        let number = frames[0].withUnsafeBytes { $0.loadUnaligned(as: UInt16.self) }
        let value = frames[0].withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 2, as: Int32.self) }
        let endpoint = String(decoding: frames[1], as: UTF8.self)
        switch Int32(number) {
        case ZMQ_EVENT_ACCEPTED: return .accepted(endpoint: endpoint, descriptor: value)
        case ZMQ_EVENT_ACCEPT_FAILED: return .acceptFailed(endpoint: endpoint)
        case ZMQ_EVENT_DISCONNECTED: return .disconnected(descriptor: value)
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: return .handshakeFailed(endpoint: endpoint)
        default: return nil
        }
    }

    /// Stops the thread and closes the monitors' sockets (before the context is terminated).
    package func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }
}
