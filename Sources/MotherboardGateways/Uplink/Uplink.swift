import BusCore
import BusZeroMQ
import Foundation
import Logging
import Synchronization

/// Where and how a motherboard attaches to its parent.
public struct UplinkSettings: Sendable, Hashable {
    /// The parent's endpoint, `tcp://HOST:PORT`.
    public var endpoint: String
    /// The parent's public key and this side's key pair; nil only for an `--insecure` parent.
    public var credentials: CurveClientCredentials?

    public init(endpoint: String, credentials: CurveClientCredentials?) throws {
        guard endpoint.hasPrefix("tcp://") else { throw BusError(.badArgument, "--attach takes a tcp://HOST:PORT endpoint, not '\(endpoint)'") }
        self.endpoint = endpoint
        self.credentials = credentials
    }
}

/// The link of a motherboard that serves scopes of a parent motherboard (on another host).
///
/// It runs on a thread of its own with three DEALER sockets: one to its own motherboard's
/// in-process endpoint (where it attached with the uplink secret; the boards of the served scopes are
/// pushed to it), one to the parent that every served board is registered over (as boards that
/// share it, PROTOCOL 5.1b: the parent routes to each as to any board, naming it, and the uplink
/// hands each request to its own motherboard and the answer back), and one more to the parent
/// for what goes up (clients' requests for the parent's scopes, actions bubbling on). Both
/// connections to the parent are CURVE, closed by the kernel when the link is cut, and send only
/// when connected.
/// The parent may be heard on the boards' connection before the link's own one is made: what
/// goes up meanwhile waits for it, in order, within its deadline (``HeldMessages``).
///
/// The link is up while the parent was heard from within the liveness timeout (it heartbeats each
/// registered board; the uplink pings it too, `control ping`). When it goes down, requests waiting on it fail
/// with `unreachable` and new ones are answered so at once; when it returns, every board
/// registers again by itself (the parent answers a heartbeat it does not know with
/// `notRegistered`).
package final class Uplink: Sendable {
    let settings: UplinkSettings
    private let limits: BusLimits
    private let thread: HelperThread
    /// The sockets and the session: its thread's alone.
    private let parts: LoopBound<(sockets: UplinkSockets, session: UplinkSession)>

    /// Sockets in `context` (the motherboard's, whose in-process endpoint `localEndpoint` is).
    init(settings: UplinkSettings, context: ZMQContext, localEndpoint: String, secret: String, limits: BusLimits, logger: Logger) throws {
        self.settings = settings
        self.limits = limits
        let local = try ZMQSocket(context: context, kind: .dealer)
        let link: ZMQSocket
        let served: ZMQSocket
        do {
            try local.set(.linger(.zero), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000))
            try local.connect(localEndpoint)
            link = try Self.parentSocket(context: context, settings: settings)
            do {
                served = try Self.parentSocket(context: context, settings: settings)
            } catch {
                link.close()
                throw error
            }
        } catch {
            local.close()
            throw error
        }
        let sockets = UplinkSockets(local: local, link: link, served: served, settings: settings, logger: logger)
        let thread = HelperThread()
        self.thread = thread
        parts = LoopBound((sockets, UplinkSession(endpoint: settings.endpoint, secret: secret, links: sockets, logger: logger)), loop: thread)
    }

    /// A DEALER to the parent: CURVE, a cut link's connection closed by the kernel within about
    /// 3 s (``ZMQSocket/Option/tcpLiveness``, not ZMTP pings), quick reconnects, sends only when
    /// connected.
    private static func parentSocket(context: ZMQContext, settings: UplinkSettings) throws -> ZMQSocket {
        let socket = try ZMQSocket(context: context, kind: .dealer)
        do {
            try socket.set(
                .linger(.zero), .immediate(true), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000), .connectTimeout(.seconds(1)),
                .reconnectInterval(.milliseconds(100)), .maximumReconnectInterval(.seconds(1)))
            try socket.set(ZMQSocket.Option.tcpLiveness)
            if let credentials = settings.credentials {
                try socket.set(
                    .curveServerKey(credentials.serverKey), .curvePublicKey(credentials.client.publicKey),
                    .curveSecretKey(credentials.client.secretKey ?? ""))
            }
            try socket.connect(settings.endpoint)
        } catch {
            socket.close()
            throw error
        }
        return socket
    }
    package func start() {
        thread.start(name: "uplink") { [self] in run() }
    }

    package func stop() {
        thread.stop()
    }

    private func run() {
        let (sockets, session) = parts.value
        let (local, link, served) = (sockets.local, sockets.link, sockets.served)
        // While messages wait for the link's connection (or for the parent to take more), look
        // again soon.
        thread.runLoop(
            [
                .envelopes(of: local, limits: limits) { session.fromOwnMotherboard($0, now: $1) },
                .envelopes(of: link, limits: limits) { session.fromParentLink($0, now: $1) },
                .envelopes(of: served, limits: limits) { session.forServedBoard($0, now: $1) },
            ], waitMilliseconds: { session.holdsMessages ? 5 : 100 }
        ) { now in
            session.tick(now: now)
            return true
        }
        session.close()
        local.close()
        link.close()
        served.close()
    }
}

/// The session's links over the uplink's sockets (its thread only, but for the probe's thread,
/// which logs what it found under `diagnosis`).
private final class UplinkSockets: UplinkLinks, @unchecked Sendable {
    let local: ZMQSocket
    let link: ZMQSocket
    /// The connection to the parent every served board is registered over.
    let served: ZMQSocket
    let settings: UplinkSettings
    let logger: Logger
    /// The last reason logged for the parent's silence.
    private let diagnosis = Mutex<String?>(nil)

    init(local: ZMQSocket, link: ZMQSocket, served: ZMQSocket, settings: UplinkSettings, logger: Logger) {
        self.local = local
        self.link = link
        self.served = served
        self.settings = settings
        self.logger = logger
    }

    func toLocal(_ envelope: Envelope) { _ = try? local.send(envelope) }
    func toParent(_ envelope: Envelope) throws -> Bool { try link.send(envelope) == .sent }
    func sendToBroker(_ envelope: Envelope) { _ = try? served.send(envelope) }
    /// The served boards' connection is the uplink's to close.
    func close() {}
    func forgetDiagnosis() { diagnosis.withLock { $0 = nil } }

    /// Says in the log why the parent is not heard (its key refused, nothing listening, no
    /// answer), once per reason: the link's own sockets retry quietly.
    func diagnose() {
        var probed = BusAddress(runtimeDirectory: FileManager.default.temporaryDirectory.path, endpoint: settings.endpoint)
        probed.curve = settings.credentials
        probed.insecureTCP = settings.credentials == nil
        let (address, endpoint) = (probed, settings.endpoint)
        let thread = Thread { [self] in
            let reason: String
            do {
                try EndpointProbe.checkHandshake(address, within: .seconds(3))
                reason = "the parent accepts this motherboard's key; waiting for it to answer"
            } catch {
                reason = "\(error)"
            }
            let changed = diagnosis.withLock { last in
                defer { last = reason }
                return last != reason
            }
            if changed { logger.warning("the parent motherboard is not reachable", metadata: ["endpoint": "\(endpoint)", "reason": "\(reason)"]) }
        }
        thread.name = "uplink-probe"
        thread.start()
    }

}
