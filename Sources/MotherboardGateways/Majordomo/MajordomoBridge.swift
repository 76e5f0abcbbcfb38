import BusCore
import BusZeroMQ
import DequeModule
import Foundation
import Logging
import Synchronization

/// A Majordomo (MDP 0.2, ZeroMQ RFC 18) endpoint for the motherboard: MDP clients call boards,
/// MDP workers become boards.
///
/// It runs on a thread of its own with a ROUTER for MDP peers and two DEALERs to its motherboard's
/// in-process endpoint: one as a client (the MDP clients' requests go through it as BoardBus
/// commands), and one for every service MDP workers serve, each registered over it as a board of
/// that id that shares the connection (every message on it names its board; the commands a
/// service gets are handed to its workers as MDP `REQUEST`s).
///
/// Mapping. Client → board: service name = board id (`scope/id` outside the root scope); body
/// frame 0 = command name, frame 1 = JSON payload (optional, `{}`); `FINAL` with one frame, the
/// reply's payload, or two frames, `error` and the `BusError` JSON. Board command → worker:
/// `REQUEST` with body [command name, payload]; the worker's `FINAL` body frame 0 is the reply
/// (two frames `error`, `{"code","message"}` make an error reply); `PARTIAL`s are dropped and
/// counted (a BoardBus reply is one message). `mmi.service` (body: a service name) answers `200`
/// or `404`; `mmi.boards` the live boards as JSON; `mmi.introspect` a board's `Introspection`
/// (its commands' JSON Schemas); another `mmi.` service `501`.
///
/// Dialects. RFC 18 as written (client `REQUEST` 0x01, `PARTIAL` 0x02, `FINAL` 0x03 with the
/// service name; no empty frame), and the one majortomo 0.2.0 speaks (every message starts with
/// an empty delimiter frame; the client's `REQUEST`/`PARTIAL`/`FINAL` are 0x02/0x03/0x04, as the
/// worker's; no service frame in replies). Each peer is answered in the dialect it used. The
/// frames are read and written by ``Majordomo`` (MajordomoFrames.swift), the state machine is
/// ``MajordomoSession``; this class is its thread and sockets.
package final class MajordomoBridge: Sendable {
    package struct Settings: Sendable {
        var endpoint: String
        /// How often workers are sent a heartbeat (when nothing else was sent to them).
        var heartbeatInterval: Duration = .milliseconds(2500)
        /// A worker not heard from for this long is dropped.
        var liveness: Duration = .seconds(10)
        /// Requests waiting for a busy service's workers; more are answered `busy`.
        var queueLimit = 1_000
        /// Bytes of the requests waiting for a busy service's workers; more are answered `busy`.
        var queueByteLimit = 64 << 20
        /// Services the endpoint serves at once (each a board on the services' one connection); a
        /// `READY` for one more is answered `DISCONNECT`.
        package static let maximumServices = 2_000
        var limits: BusLimits = .default
        /// Bytes of answers that may wait unread toward one MDP client (as on the main socket).
        var maximumUnreadBytesPerPeer = BusLimits.defaultMaximumUnreadBytesPerPeer

        package init(endpoint: String, limits: BusLimits = .default) {
            self.endpoint = endpoint
            self.limits = limits
        }
    }

    let settings: Settings
    private let logger: Logger
    private let thread: HelperThread
    /// The sockets and the session: its thread's alone.
    private let parts: LoopBound<(sockets: MajordomoSockets, session: MajordomoSession)>
    /// Told the CURVE key of each tcp connection new to a peer, with its descriptor; asked
    /// whether a message's key was removed from the allow-list.
    private let keys: any ConnectionKeys

    /// Binds the MDP endpoint on `context` (the motherboard's, so that a tcp endpoint is checked
    /// by its ZAP handler: `secure` sets the CURVE server key for it) and connects to the
    /// motherboard at `localEndpoint`. `beforeBind` is handed the endpoint's socket before it binds
    /// (to watch its connections).
    init(
        settings: Settings, context: ZMQContext, localEndpoint: String, curveSecretKey: String?, logger: Logger,
        beforeBind: (ZMQSocket) throws -> Void = { _ in }, keys: any ConnectionKeys = NoConnectionKeys()
    ) throws {
        self.keys = keys
        self.settings = settings
        self.logger = logger
        let router = try ZMQSocket(context: context, kind: .router)
        let client = try ZMQSocket(context: context, kind: .dealer)
        let servicesSocket = try ZMQSocket(context: context, kind: .dealer)
        do {
            // MDP's own heartbeats find a worker that is gone.
            try router.set([.linger(.zero)] + ZMQSocket.Option.peerRouter(limits: settings.limits))
            if Self.ipcPath(settings.endpoint) != nil {
                try? router.set(.acceptIPCFromUser(getuid()))
            } else if let curveSecretKey {
                try router.set(.zapDomain("boardbus"), .curveServer(true), .curveSecretKey(curveSecretKey))
            }
            if let path = Self.ipcPath(settings.endpoint) {
                try? FileManager.default.removeItem(atPath: path)  // a stale socket of a killed broker
            }
            try beforeBind(router)
            try router.bind(settings.endpoint)
            for socket in [client, servicesSocket] {
                try socket.set(.linger(.zero), .sendHighWaterMark(100_000), .receiveHighWaterMark(100_000))
                try socket.connect(localEndpoint)
            }
        } catch {
            router.close()
            client.close()
            servicesSocket.close()
            throw error
        }
        let sockets = MajordomoSockets(
            router: router, client: client, services: servicesSocket, backlog: ConnectionBacklog(budget: settings.maximumUnreadBytesPerPeer))
        let thread = HelperThread()
        self.thread = thread
        parts = LoopBound((sockets, MajordomoSession(settings: settings, links: sockets, logger: logger)), loop: thread)
    }

    /// The socket file of an `ipc://` endpoint.
    private var ipcPath: String? { Self.ipcPath(settings.endpoint) }

    private static func ipcPath(_ endpoint: String) -> String? {
        BusAddress(runtimeDirectory: "", endpoint: endpoint).ipcPath
    }

    package func start() {
        thread.start(name: "mdp") { [self] in run() }
    }

    /// Stops the thread; the workers are told `DISCONNECT`, the services unregistered.
    package func stop() {
        thread.stop()
    }

    private func run() {
        let (sockets, session) = parts.value
        let (router, client, services) = (sockets.router, sockets.client, sockets.services)
        var lastBacklogTick = ContinuousClock.now
        thread.runLoop([
            LoopSource(handle: .socket(router)) { self.drainPeers(sockets, session, now: $0) },
            .envelopes(of: client, limits: settings.limits) { envelope, _ in session.fromMotherboard(envelope) },
            .envelopes(of: services, limits: settings.limits) { session.toServices($0, now: $1) },
        ]) { now in
            if lastBacklogTick.duration(to: now) >= .milliseconds(100) {
                lastBacklogTick = now
                sockets.backlog.tick()
            }
            session.tick(now: now)
            return true
        }
        session.close()
        router.close()
        client.close()
        services.close()
        if let path = ipcPath { try? FileManager.default.removeItem(atPath: path) }
    }

    private func drainPeers(_ sockets: MajordomoSockets, _ session: MajordomoSession, now: ContinuousClock.Instant) {
        for _ in 0..<256 {
            var descriptor: Int32 = -1
            guard let frames = try? sockets.router.receive(sourceDescriptor: &descriptor) else { return }
            // The key name of a tcp peer's connection, read with every message (a routing id may
            // move to another connection): the principal the gateway acts for.
            let user = sockets.router.lastMessageUserID
            if let user, keys.hasRevokedCurveKeys, let key = sockets.router.lastMessageProperty(ZAPHandler.curveKeyProperty),
                keys.isRevoked(curveKey: key)
            {
                // A key removed from the allow-list under a name that stays: dropped, its
                // connection closed (a removed name is refused by the broker).
                keys.closeRevoked(descriptor: descriptor, name: user, curveKey: key)
                continue
            }
            if let peer = frames.first, sockets.backlog.noteReceived(from: PeerID(peer), descriptor: descriptor), let user {
                keys.noteKey(user, curveKey: sockets.router.lastMessageProperty(ZAPHandler.curveKeyProperty), descriptor: descriptor)
            }
            session.fromPeer(frames, principal: user, now: now)
        }
    }
}

/// The session's links over the bridge's sockets (its thread only).
private final class MajordomoSockets: MajordomoLinks {
    let router: ZMQSocket
    let client: ZMQSocket
    /// The connection every service is registered over, as a board that shares it.
    let services: ZMQSocket
    /// Answers waiting unread toward each MDP client: a client that never reads cannot make the
    /// motherboard hold more than the budget for it.
    let backlog: ConnectionBacklog

    init(router: ZMQSocket, client: ZMQSocket, services: ZMQSocket, backlog: ConnectionBacklog) {
        self.router = router
        self.client = client
        self.services = services
        self.backlog = backlog
    }

    package func toPeer(_ frames: [Data]) -> Bool { (try? router.send(frames)) == .sent }
    package func isStalled(_ client: Data) -> Bool { backlog.isStalled(PeerID(client)) }
    package func mayQueue(_ bytes: Int, to client: Data) -> Bool { backlog.mayQueue(bytes, to: PeerID(client)) }
    package func queuedBytes(to client: Data) -> Int { backlog.queuedBytes(to: PeerID(client)) }
    package func toMotherboard(_ envelope: Envelope) throws -> Bool { try client.send(envelope) == .sent }
    package func sendToBroker(_ envelope: Envelope) { _ = try? services.send(envelope) }
    /// The services' connection is the bridge's to close.
    package func close() {}
}
