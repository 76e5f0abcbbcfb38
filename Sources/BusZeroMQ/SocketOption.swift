import BusCore
import CBoardBusZeroMQ
import Glibc

extension ZMQSocket {
    /// The libzmq socket options BoardBus sets, each with the type of its value (as swift-nio's
    /// `ChannelOption` and czmq's generated setters give them), so that no module but this one
    /// names a `ZMQ_*` constant or picks the C integer width of an option.
    package enum Option: Sendable, Equatable {
        /// `ZMQ_SNDHWM`: messages queued per peer before sends to it would block.
        case sendHighWaterMark(Int32)
        /// `ZMQ_RCVHWM`: messages queued from a peer before libzmq stops reading it.
        case receiveHighWaterMark(Int32)
        /// `ZMQ_ROUTER_MANDATORY`: a ROUTER's send to an unknown peer fails instead of vanishing.
        case routerMandatory(Bool)
        /// `ZMQ_MAXMSGSIZE`: a peer sending a larger frame is disconnected.
        case maximumMessageBytes(Int64)
        /// `ZMQ_RECONNECT_IVL`: the first wait before reconnecting.
        case reconnectInterval(Duration)
        /// `ZMQ_RECONNECT_IVL_MAX`: the longest wait between reconnection attempts.
        case maximumReconnectInterval(Duration)
        /// `ZMQ_IPC_FILTER_UID`: an `ipc://` listener accepts connections of this user only.
        case acceptIPCFromUser(UInt32)
        /// `ZMQ_LINGER`: how long unsent messages are kept at close.
        case linger(Duration)
        /// `ZMQ_CURVE_SERVER`: endpoints bound after this are CURVE servers (options are taken
        /// per endpoint when it is bound or connected).
        case curveServer(Bool)
        /// `ZMQ_CURVE_SECRETKEY` / `ZMQ_CURVE_PUBLICKEY` / `ZMQ_CURVE_SERVERKEY`, Z85 text.
        case curveSecretKey(String)
        case curvePublicKey(String)
        case curveServerKey(String)
        /// `ZMQ_ZAP_DOMAIN`: the domain ZAP requests for this socket's later endpoints carry.
        case zapDomain(String)
        /// `ZMQ_HEARTBEAT_IVL` / `ZMQ_HEARTBEAT_TIMEOUT`: ZMTP pings on each connection; one not
        /// answered in time closes it, so that a cut link is noticed without traffic. Not used:
        /// libzmq 4.3 aborts the whole process when a ping falls due on a connection whose peer
        /// hung up while the socket held as many of its messages as its receive high-water mark
        /// (zeromq/libzmq#4364), and when a connecting socket whose queue is full misses its
        /// ping's answer, reconnects, and is read again (zeromq/libzmq#3937); ``tcpLiveness``
        /// does their work.
        case heartbeatInterval(Duration)
        case heartbeatTimeout(Duration)
        /// `ZMQ_TCP_KEEPALIVE`, `ZMQ_TCP_KEEPALIVE_IDLE`, `ZMQ_TCP_KEEPALIVE_INTVL`,
        /// `ZMQ_TCP_KEEPALIVE_CNT`: the kernel's probes of an idle tcp connection, which close
        /// it when its other host is gone (whole seconds).
        case tcpKeepalive(Bool)
        case tcpKeepaliveIdle(Duration)
        case tcpKeepaliveInterval(Duration)
        case tcpKeepaliveCount(Int32)
        /// `ZMQ_TCP_MAXRT` (`TCP_USER_TIMEOUT` on Linux): the kernel closes a tcp connection
        /// whose other end has acknowledged nothing sent, or no keepalive probe, for this long.
        case tcpUserTimeout(Duration)
        /// `ZMQ_HANDSHAKE_IVL`: a connection whose ZMTP handshake (greeting, security) is not
        /// done in this time is closed (libzmq's default is 30 s).
        case handshakeInterval(Duration)
        /// `ZMQ_CONNECT_TIMEOUT`: a tcp connect that hangs (packets dropped) is retried after this.
        case connectTimeout(Duration)
        /// `ZMQ_IMMEDIATE`: queue messages only to completed connections (sends fail while there is none).
        case immediate(Bool)

        var code: Int32 {
            switch self {
            case .sendHighWaterMark: ZMQ_SNDHWM
            case .receiveHighWaterMark: ZMQ_RCVHWM
            case .routerMandatory: ZMQ_ROUTER_MANDATORY
            case .maximumMessageBytes: ZMQ_MAXMSGSIZE
            case .reconnectInterval: ZMQ_RECONNECT_IVL
            case .maximumReconnectInterval: ZMQ_RECONNECT_IVL_MAX
            case .acceptIPCFromUser: ZMQ_IPC_FILTER_UID
            case .linger: ZMQ_LINGER
            case .curveServer: ZMQ_CURVE_SERVER
            case .curveSecretKey: ZMQ_CURVE_SECRETKEY
            case .curvePublicKey: ZMQ_CURVE_PUBLICKEY
            case .curveServerKey: ZMQ_CURVE_SERVERKEY
            case .zapDomain: ZMQ_ZAP_DOMAIN
            case .heartbeatInterval: ZMQ_HEARTBEAT_IVL
            case .heartbeatTimeout: ZMQ_HEARTBEAT_TIMEOUT
            case .tcpKeepalive: ZMQ_TCP_KEEPALIVE
            case .tcpKeepaliveIdle: ZMQ_TCP_KEEPALIVE_IDLE
            case .tcpKeepaliveInterval: ZMQ_TCP_KEEPALIVE_INTVL
            case .tcpKeepaliveCount: ZMQ_TCP_KEEPALIVE_CNT
            case .tcpUserTimeout: ZMQ_TCP_MAXRT
            case .connectTimeout: ZMQ_CONNECT_TIMEOUT
            case .handshakeInterval: ZMQ_HANDSHAKE_IVL
            case .immediate: ZMQ_IMMEDIATE
            }
        }

        /// The value as libzmq reads it: an `int` for most options, an `int64_t` for the size.
        enum Value {
            case int32(Int32)
            case int64(Int64)
            case text(String)
        }

        /// How a socket notices a tcp peer that is gone, instead of ZMTP pings (see
        /// ``heartbeatInterval(_:)``), as fast: the kernel closes a connection whose other end
        /// acknowledged nothing for 3 s, data or a keepalive probe (one a second once it is idle
        /// for a second). A connecting socket then reconnects (a DEALER without `immediate`
        /// keeps its queue); a cut link's connection is gone before the link returns, so what
        /// its peer queued before the cut cannot arrive on it afterwards. As with the pings, a
        /// peer that leaves no room for 3 s (a zero window) is given up too.
        package static let tcpLiveness: [Option] = [
            .tcpKeepalive(true), .tcpKeepaliveIdle(.seconds(1)), .tcpKeepaliveInterval(.seconds(1)), .tcpKeepaliveCount(3),
            .tcpUserTimeout(.seconds(3)),
        ]

        /// The options of a ROUTER that any peer may connect to (the broker's, its Majordomo
        /// endpoint's), set before any bind: an endpoint takes the options it is bound with.
        ///
        /// No ZMTP pings (``heartbeatInterval(_:)``): with them, a peer that hangs up while the
        /// router holds a full queue of its messages makes libzmq abort the process. A peer that
        /// is gone is found without them (the broker's heartbeats, MDP's), and the kernel closes a
        /// tcp connection whose other end acknowledges nothing for 3 s (``tcpLiveness``).
        package static func peerRouter(limits: BusLimits) -> [Option] {
            [
                // Hard cap: frames far beyond the soft limit disconnect the peer inside libzmq;
                // those between the two get a typed `tooLarge` answer.
                .routerMandatory(true), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000),
                .maximumMessageBytes(Int64(limits.maximumPayloadBytes * 2 + 65_536)),
                // A connection that has not finished its handshake (greeting, CURVE) in 5 s is
                // closed: an idle peer without a key holds a descriptor for no longer.
                .handshakeInterval(.seconds(5)),
            ] + tcpLiveness
        }

        var value: Value {
            switch self {
            case .sendHighWaterMark(let count), .receiveHighWaterMark(let count): .int32(count)
            case .routerMandatory(let on), .curveServer(let on), .immediate(let on): .int32(on ? 1 : 0)
            case .curveSecretKey(let text), .curvePublicKey(let text), .curveServerKey(let text), .zapDomain(let text): .text(text)
            case .heartbeatInterval(let interval), .heartbeatTimeout(let interval), .connectTimeout(let interval),
                .handshakeInterval(let interval):
                .int32(Int32(clamping: interval.wholeMilliseconds))
            case .maximumMessageBytes(let bytes): .int64(bytes)
            case .reconnectInterval(let interval), .maximumReconnectInterval(let interval), .linger(let interval):
                .int32(Int32(clamping: interval.wholeMilliseconds))
            case .acceptIPCFromUser(let uid): .int32(Int32(bitPattern: uid))
            case .tcpKeepalive(let on): .int32(on ? 1 : 0)
            case .tcpKeepaliveIdle(let interval), .tcpKeepaliveInterval(let interval):
                .int32(Int32(clamping: max(1, interval.components.seconds)))
            case .tcpKeepaliveCount(let count): .int32(count)
            case .tcpUserTimeout(let timeout): .int32(Int32(clamping: timeout.wholeMilliseconds))
            }
        }
    }

    /// Sets socket options, in order; the first libzmq refuses is thrown with its name.
    package func set(_ options: Option...) throws {
        try set(options)
    }

    /// Sets socket options, in order; the first libzmq refuses is thrown with its name.
    package func set(_ options: [Option]) throws {
        for option in options { try set(option) }
    }

    private func set(_ option: Option) throws {
        let rc: Int32
        switch option.value {
        case .int32(var value): rc = zmq_setsockopt(handle, option.code, &value, MemoryLayout<Int32>.size)
        case .int64(var value): rc = zmq_setsockopt(handle, option.code, &value, MemoryLayout<Int64>.size)
        case .text(let text):
            rc = text.withCString { zmq_setsockopt(handle, option.code, $0, strlen($0)) }
        }
        // Never a key in an error message.
        guard rc == 0 else { throw ZMQContext.lastError("zmq_setsockopt(\(option.code == ZMQ_CURVE_SECRETKEY ? "curveSecretKey" : "\(option)"))") }
    }
}
