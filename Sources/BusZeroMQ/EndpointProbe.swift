import BusCore
import CBoardBusLinux
import CBoardBusZeroMQ
import FoundationEssentials
import Glibc

/// Checks whether a broker listens on an `ipc://` endpoint before a client waits on it.
///
/// ZeroMQ connects lazily and retries forever, so a client of a dead broker would only learn of it
/// at its timeout. A plain `connect(2)` on the socket file answers at once.
package enum EndpointProbe {
    /// Throws ``BusError/Code/brokerNotRunning`` when nothing accepts connections on the path.
    /// Endpoints other than `ipc://` are not probed.
    ///
    /// With `greeting`, also waits (up to that long) for the broker to speak first, as ZeroMQ
    /// peers do on connecting: a broker that closes the connection at once instead refuses this
    /// peer (its uid filter admits its own user only), which is then said, with `unauthorized`,
    /// rather than left to a bare timeout.
    package static func checkListening(_ address: BusAddress, greeting: Duration? = nil) throws {
        if address.isTCP, greeting != nil { return try checkHandshake(address, within: .seconds(3)) }
        guard let path = address.ipcPath else { return }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: socketAddress.sun_path)
        guard path.utf8.count < capacity else {
            throw BusError(.badArgument, "socket path '\(path)' is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { buffer in
            buffer.copyBytes(from: path.utf8)
            buffer[path.utf8.count] = 0
        }
        let rc = withUnsafePointer(to: &socketAddress) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if rc != 0 {
            let code = errno
            throw BusError(
                .brokerNotRunning,
                """
                no motherboard at \(address.endpoint) (\(String(cString: strerror(code)))); start one (`motherboard --manifest FILE`, \
                or `scripts/fleet up` for the example fleet), or name the one that runs with --bus or BOARDBUS_RUNTIME_DIR
                """)
        }
        if let greeting, closedWithoutGreeting(descriptor, within: greeting) {
            var owner = stat()
            let ownerText = stat(path, &owner) == 0 ? " (the socket belongs to uid \(owner.st_uid); this process runs as uid \(getuid()))" : ""
            throw BusError(
                .unauthorized,
                "the motherboard at \(address.endpoint) closed the connection at once: it accepts peers of its own user only\(ownerText)")
        }
    }

    /// Connects to a `tcp://` broker with the client's credentials and waits for the ZMTP handshake
    /// (a socket monitor reports it): a key the broker refuses is `unauthorized`, a broker that
    /// cannot be reached `brokerNotRunning`, at once rather than at the request's deadline.
    package static func checkHandshake(_ address: BusAddress, within wait: Duration) throws {
        let credentials = try address.tcpCredentials(environment: ProcessInfo.processInfo.environment)
        let context = try ZMQContext.shared()
        let probe = try ZMQSocket(context: context, kind: .dealer)
        let events = try ZMQSocket(context: context, kind: .pair)
        defer {
            events.close()
            probe.close()
        }
        let monitorEndpoint = "inproc://boardbus-probe-\(UInt64.random(in: 0...UInt64.max))"
        let watched =
            ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
            | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_DISCONNECTED
        guard zmq_socket_monitor(probe.handle, monitorEndpoint, watched) == 0 else { throw ZMQContext.lastError("zmq_socket_monitor") }
        try events.set(.linger(.zero))
        try events.connect(monitorEndpoint)
        try probe.set(.linger(.zero), .connectTimeout(wait))
        if let credentials {
            try probe.set(
                .curveServerKey(credentials.serverKey), .curvePublicKey(credentials.client.publicKey),
                .curveSecretKey(credentials.client.secretKey ?? ""))
        }
        try probe.connect(address.endpoint)
        let end = ContinuousClock.now.advanced(by: wait)
        var retried = false
        while ContinuousClock.now < end {
            let left = ContinuousClock.now.duration(to: end)
            guard
                events.waitReadable(
                    timeoutMilliseconds: max(1, Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))),
                let frames = try events.receive(), let first = frames.first, first.count >= 2
            else { continue }
            let event = Int32(first[first.startIndex]) | Int32(first[first.startIndex + 1]) << 8
            switch event {
            case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
                return
            case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
                throw BusError(.unauthorized, "the motherboard at \(address.endpoint) refused this client's key: it is not in its allow-list")
            case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, ZMQ_EVENT_DISCONNECTED:
                throw BusError(
                    .unauthorized,
                    credentials == nil
                        ? "the motherboard at \(address.endpoint) refused a plaintext connection: it wants CURVE keys (BOARDBUS_SERVER_KEY, BOARDBUS_CLIENT_KEY)"
                        : "the CURVE handshake with \(address.endpoint) failed: is BOARDBUS_SERVER_KEY that motherboard's public key?")
            default:
                // Refused (nothing listens) or closed before the handshake.
                retried = true
                if event == ZMQ_EVENT_CONNECT_RETRIED { break }
            }
            if retried { break }
        }
        throw BusError(
            .brokerNotRunning,
            retried
                ? "no motherboard accepts connections at \(address.endpoint)"
                : "no answer from \(address.endpoint) within \(wait) (is the host reachable?)")
    }

    /// Whether the peer closed the connection before sending a byte, within `wait`.
    private static func closedWithoutGreeting(_ descriptor: Int32, within wait: Duration) -> Bool {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(clamping: wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, milliseconds) == 1 else { return false }
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT)) == 0
    }
}
