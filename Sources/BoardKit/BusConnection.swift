import BusCore
import BusZeroMQ
import FoundationEssentials
import Glibc

/// How a ``BusClient`` reaches the broker: in production a ZeroMQ DEALER on a thread of its own
/// (``ZeroMQConnection``); in BoardKitTesting's in-process fleet an in-memory pipe to the broker's
/// logic. The client's request matching, deadlines and subscriptions are the same over both.
package protocol BusConnection: AnyObject, Sendable {
    /// Starts delivering what arrives, and a tick about every 50 ms, to `handler`, one call at a
    /// time on the connection's own thread.
    func start(_ handler: any BusConnectionHandler)
    /// Sends without blocking (queued when called off the connection's thread). `headerBytes` is
    /// the header's ``HeaderCodec/validatedSize(_:)`` when the client has checked it; nil: the
    /// connection checks it.
    func send(_ envelope: Envelope, headerBytes: Int?)
    /// Stops delivering and closes; what is still queued may be dropped.
    func stop()
    /// Whether the caller runs on the connection's thread (which must not wait for it to stop).
    var isCurrentThread: Bool { get }
    /// Where tasks run beside the connection, so that a reply resumes them without a thread hop.
    var executor: any TaskExecutor { get }
}

/// What a ``BusConnection`` delivers to, on its thread.
package protocol BusConnectionHandler: AnyObject, Sendable {
    /// An envelope arrived (frames that are not one are dropped by the connection).
    func received(_ envelope: consuming Envelope)
    /// About every 50 ms: deadlines, heartbeats, renewals.
    func tick()
}

/// Where BoardKit reads the time: the continuous clock in production, a clock the test moves in
/// unit tests (BoardKitTesting's `ManualClock`), so that deadline and heartbeat logic is tested
/// without waiting.
public struct BusClock: Sendable {
    public let now: @Sendable () -> ContinuousClock.Instant

    public init(now: @escaping @Sendable () -> ContinuousClock.Instant) { self.now = now }

    /// The system's continuous clock.
    public static let continuous = BusClock { ContinuousClock.now }
}

/// The end of a loop that tries again after real sleeps (`Task.sleep`): `timeout` on the client's
/// clock, and on the wall clock too, so that a clock a test does not move cannot keep it going.
struct RetryDeadline {
    private let clock: BusClock
    private let end: ContinuousClock.Instant
    private let wallEnd: ContinuousClock.Instant

    init(after timeout: Duration, on clock: BusClock) {
        self.clock = clock
        end = clock.now().advanced(by: timeout)
        wallEnd = ContinuousClock.now.advanced(by: timeout)
    }

    /// What is left on the client's clock.
    var remaining: Duration { clock.now().duration(to: end) }

    /// Whether a pause of `pause` still ends before the deadline, on both clocks.
    func allows(_ pause: Duration = .zero) -> Bool {
        clock.now().advanced(by: pause) < end && ContinuousClock.now.advanced(by: pause) < wallEnd
    }
}

/// A ZeroMQ DEALER connected to the broker, owned by a ``SocketLoop`` thread.
final class ZeroMQConnection: BusConnection, @unchecked Sendable {
    private let loop: SocketLoop
    private let adapter: Adapter

    /// Forwards the loop's calls to the handler given at ``start(_:)``.
    private final class Adapter: SocketLoopHandler {
        var handler: (any BusConnectionHandler)?

        func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {
            guard let envelope = message.takeEnvelope() else { return }
            handler?.received(envelope)
        }

        func tick(on socket: ZMQSocket) { handler?.tick() }

        func stopping(on socket: ZMQSocket) {}
    }

    init(address: BusAddress, limits: BusLimits) throws {
        let socket = try ZMQSocket(context: ZMQContext.shared(), kind: .dealer)
        do {
            try socket.set(Self.options(tcp: address.isTCP))
            if address.isTCP {
                if let curve = try address.tcpCredentials(environment: ProcessInfo.processInfo.environment) {
                    try socket.set(
                        .curveServerKey(curve.serverKey), .curvePublicKey(curve.client.publicKey), .curveSecretKey(curve.client.secretKey ?? ""))
                }
            }
            try socket.connect(address.endpoint)
            adapter = Adapter()
            loop = try SocketLoop(name: "bus-client", socket: socket, handler: adapter, tickInterval: .milliseconds(50), limits: limits)
        } catch {
            socket.close()
            throw error
        }
    }

    /// The DEALER's options. To another host (tcp) the kernel closes a cut link's connection
    /// within about 3 s (``ZMQSocket/Option/tcpLiveness``; ZMTP pings could make libzmq abort a
    /// busy board whose queue is full), and a connect that hangs is retried.
    static func options(tcp: Bool) -> [ZMQSocket.Option] {
        let always: [ZMQSocket.Option] = [
            .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000),
            .reconnectInterval(.milliseconds(100)), .maximumReconnectInterval(.seconds(1)),
        ]
        return tcp ? always + ZMQSocket.Option.tcpLiveness + [.connectTimeout(.seconds(2))] : always
    }

    func start(_ handler: any BusConnectionHandler) {
        adapter.handler = handler
        loop.start()
    }

    func send(_ envelope: Envelope, headerBytes: Int?) { loop.send(envelope, validatedHeaderBytes: headerBytes) }

    func stop() {
        loop.stop()
        // Nothing reaches the handler after stop, as with the in-memory connection.
        adapter.handler = nil
    }

    var isCurrentThread: Bool { loop.isOnLoopThread }

    var executor: any TaskExecutor { loop }
}
