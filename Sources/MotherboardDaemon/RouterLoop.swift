import BusCore
import MotherboardCore
import BusZeroMQ
import CBoardBusAcceptGuard
import Foundation
import Synchronization
import Logging
import ServiceLifecycle

// The routing loop's side of the daemon: the transport the motherboard sends through, the loop
// handler that feeds it, and what other threads hand it (process exits, starts).
/// Sends the broker's envelopes on the ROUTER socket, prefixed with the peer's routing id. Large
/// messages toward a peer that does not read them are refused past its backlog budget, as if its
/// queue were full.
final class RouterTransport: MotherboardTransport {
    private let socket: ZMQSocket
    let backlog: ConnectionBacklog

    init(socket: ZMQSocket, backlogBudget: Int = MotherboardSettings().maximumUnreadBytesPerPeer) {
        self.socket = socket
        backlog = ConnectionBacklog(budget: backlogBudget)
    }

    /// The peer of the last send that failed because the peer is gone (not merely full).
    private var lastGone: PeerID?

    func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
        guard backlog.mayQueue(envelope.payload.count, to: peer) else {
            answerInstead(kind: envelope.header.kind, correlationID: envelope.header.correlationID, to: peer)
            return false
        }
        return sent(try? socket.send(envelope, routingID: peer.bytes), to: peer)
    }

    /// Sends the message being handled on to `peer` as it is (`header` is its header, as routed).
    func forwardReceived(to peer: PeerID, payloadBytes: Int, kind: MessageKind, header: UnsafeRawBufferPointer) -> Bool {
        guard backlog.mayQueue(payloadBytes, to: peer) else {
            answerInstead(kind: kind, correlationID: HeaderLayout.correlationID(in: header), to: peer)
            return false
        }
        return sent(try? socket.forwardReceived(to: peer), to: peer)
    }

    /// An answer refused because its peer does not read: a small `busy` error goes in its place,
    /// so that the request still ends with an answer (when it is read) rather than a timeout.
    private func answerInstead(kind: MessageKind, correlationID: UInt64, to peer: PeerID) {
        guard kind == .reply || kind == .error, correlationID != 0 else { return }
        let error = BusError(
            .busy, "the answer was dropped: \(backlog.queuedBytes(to: peer)) bytes of earlier answers to this connection wait unread")
        _ = sent(try? socket.send(Envelope.error(error, correlationID: correlationID), routingID: peer.bytes), to: peer)
    }

    private func sent(_ result: ZMQSocket.SendResult?, to peer: PeerID) -> Bool {
        if result == .peerUnreachable {
            lastGone = peer
            backlog.forget(peer)
        }
        return result == .sent
    }

    func isConnected(_ peer: PeerID) -> Bool {
        lastGone != peer
    }

    func isBacklogged(_ peer: PeerID) -> Bool {
        backlog.isStalled(peer)
    }
}

/// Feeds the ROUTER's messages and ticks to the motherboard, on the socket's thread.
final class RouterLoopHandler: SocketLoopHandler {
    private let motherboard: Motherboard
    private let transport: RouterTransport
    private let clock = ContinuousClock()
    private var heap = HeapTrim()
    private let notifier: SystemdNotifier?

    private let gate: ConnectionGate?
    private let allowList: AllowListFile?
    private let policy: PolicyFile?
    /// Whether any endpoint takes remote peers (tcp, the ZAP handler): else no message has a
    /// principal, and none is asked for.
    private let hasRemotePeers: Bool
    private var ticks = 0
    /// Which peers' connections closed: what the broker keeps for them goes (once a second).
    private let connections = PeerConnections()
    /// Connections a message of a removed key came on since the last tick, with the key.
    private var revokedConnections: [(descriptor: Int32, key: ConnectionKey)] = []

    init(
        motherboard: Motherboard, transport: RouterTransport, notifier: SystemdNotifier? = nil, gate: ConnectionGate? = nil,
        allowList: AllowListFile? = nil, policy: PolicyFile? = nil, hasRemotePeers: Bool = true
    ) {
        self.hasRemotePeers = hasRemotePeers
        self.motherboard = motherboard
        self.transport = transport
        self.notifier = notifier
        self.gate = gate
        self.allowList = allowList
        self.policy = policy
    }

    /// A message came on a connection new to its peer: a tcp one names its CURVE key (its
    /// `User-Id`), so that the connection can be closed if the key is revoked.
    private func noteConnection(of peer: PeerID, on socket: ZMQSocket) {
        let descriptor = socket.lastSourceDescriptor
        guard transport.backlog.noteReceived(from: peer, descriptor: descriptor) else { return }
        connections.note(peer, descriptor: descriptor)
        guard let gate,
            let user = socket.lastReceivedProperty("User-Id"), !user.isEmpty
        else { return }
        gate.noteKey(user, curveKey: socket.lastReceivedProperty(ZAPHandler.curveKeyProperty), descriptor: descriptor)
    }

    /// Keys removed from the allow-list: their connections are closed and the boards registered
    /// over them dropped, within half a second of the file's change.
    private func revokeRemovedKeys() {
        guard let allowList, let gate else { return }
        allowList.refresh()
        let revoked = allowList.takeRevoked()
        guard !revoked.names.isEmpty || !revoked.keys.isEmpty || gate.hasRevokedCurveKeys || motherboard.access.hasRevoked
        else { return }
        // A name or key listed again (removed and put back between two reads) is no longer refused.
        let listed = allowList.listed
        gate.revoke(curveKeys: revoked.keys, listed: listed.keys)
        motherboard.allowListChanged(removed: revoked.names, listed: listed.names)
        guard !revoked.names.isEmpty || !revoked.keys.isEmpty else { return }
        let closed = gate.close(connectionsOfKeys: revoked.names, curveKeys: revoked.keys.subtracting(listed.keys))
        motherboard.logger.notice(
            "keys removed from the allow-list: their connections closed",
            metadata: [
                "keys": "\(revoked.names.sorted().joined(separator: ","))", "removedKeys": "\(revoked.keys.count)", "connections": "\(closed)",
            ])
    }

    /// Commands and replies that need only a new correlation id go on in the frame they came in.
    func intercept(from routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int, on socket: ZMQSocket) -> Bool {
        guard let routingID else { return false }
        let peer = PeerID(routingID)
        noteConnection(of: peer, on: socket)
        if transport.backlog.isStalled(peer) { return refuseStalled(peer, header: UnsafeRawBufferPointer(header)) }
        let (motherboard, transport) = (self.motherboard, self.transport)
        return motherboard.routeInPlace(header, from: peer, now: clock.now, principal: principal(on: socket), payloadBytes: payloadBytes) {
            destination, kind in
            if !transport.forwardReceived(to: destination, payloadBytes: payloadBytes, kind: kind, header: UnsafeRawBufferPointer(header)) {
                motherboard.undeliverable(kind, to: destination, correlationID: HeaderLayout.correlationID(in: UnsafeRawBufferPointer(header)))
            }
        }
    }

    /// A peer that does not read what it asked for: its requests are answered `busy` (a small
    /// answer, which the backlog lets through) and go no further. Other messages (heartbeats,
    /// answers it gives as a board) are handled as usual.
    private func refuseStalled(_ peer: PeerID, header: UnsafeRawBufferPointer) -> Bool {
        guard let correlationID = HeaderLayout.answerableCorrelationID(header) else { return false }
        motherboard.counters.refusedWhileStalled += 1
        let error = BusError(
            .busy, "\(transport.backlog.queuedBytes(to: peer)) bytes of answers to this connection wait unread; read them before asking for more"
        )
        _ = transport.send(Envelope.error(error, correlationID: correlationID), to: peer)
        return true
    }

    func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {
        guard let routingID = message.routingID else { return }
        let peer = PeerID(routingID)
        noteConnection(of: peer, on: socket)
        let principal = principal(on: socket)
        if let principal, refusedAsRevoked(principal, message, from: peer, on: socket) { return }
        guard case .success(let envelope) = message.content, envelope.header.kind == .register else {
            return motherboard.receive(message.content, from: peer, now: clock.now, principal: principal)
        }
        motherboard.receive(
            message.content, from: peer, now: clock.now, remote: Self.remotePeer(of: message, on: socket), process: socket.lastSourceProcessID,
            principal: principal)
    }

    /// A message of a key removed from the allow-list: its connection is closed at the next tick,
    /// once the refusal is out. A removed name is refused by the broker (false: the message goes
    /// on to it); a removed key under a name that stays is refused here, where the key is known
    /// (`unauthorized`, if the message waits for an answer).
    private func refusedAsRevoked(
        _ principal: String, _ message: borrowing ReceivedMessage, from peer: PeerID, on socket: ZMQSocket
    ) -> Bool {
        guard let gate, gate.hasRevokedCurveKeys || motherboard.access.isRevoked(principal) else { return false }
        let key = ConnectionKey(name: principal, curveKey: socket.lastReceivedProperty(ZAPHandler.curveKeyProperty))
        let keyRevoked = key.curveKey.map(gate.isRevoked(curveKey:)) == true
        guard keyRevoked || motherboard.access.isRevoked(principal) else { return false }
        let descriptor = socket.lastSourceDescriptor
        if !revokedConnections.contains(where: { $0.descriptor == descriptor }) { revokedConnections.append((descriptor, key)) }
        guard keyRevoked else { return false }
        if case .success(let envelope) = message.content, envelope.header.flags.contains(.replyExpected), envelope.header.correlationID != 0,
            envelope.header.kind != .reply, envelope.header.kind != .error
        {
            let error = BusError(.unauthorized, "the key this connection authenticated with was removed from the allow-list")
            _ = transport.send(Envelope.error(error, correlationID: envelope.header.correlationID), to: peer)
        }
        return true
    }

    /// The remote principal of the message being handled: the name the ZAP handler gave its
    /// connection's key (only tcp connections pass the ZAP handler; `insecure` ones included),
    /// read from libzmq for every message, so that no routing id carries it over to another
    /// connection. Nil on the ipc socket.
    func principal(on socket: ZMQSocket) -> String? {
        hasRemotePeers ? socket.lastReceivedUserID : nil
    }

    /// Where a registration's connection comes from, when it is a tcp one: the peer's address
    /// and the name its key has in the allow-list (`10.0.0.2 (edge-b)`).
    static func remotePeer(of message: ReceivedMessage, on socket: ZMQSocket) -> RemotePeer? {
        // Only tcp connections went through the ZAP handler and carry a user id; ipc ones do not.
        guard let user = socket.lastReceivedProperty("User-Id"), !user.isEmpty,
            let address = socket.lastReceivedProperty("Peer-Address")
        else { return nil }
        return RemotePeer(address: address, keyName: user)
    }

    func tick(on socket: ZMQSocket) {
        ticks += 1
        if let gate, !revokedConnections.isEmpty {
            for (descriptor, key) in revokedConnections { gate.closeRevoked(descriptor: descriptor, key: key) }
            revokedConnections.removeAll()
        }
        if ticks % 5 == 0 {
            revokeRemovedKeys()
            if let policy, policy.refresh() { motherboard.install(policy: policy.policy, source: policy.path, text: policy.text) }
        }
        transport.backlog.tick()
        if ticks % 10 == 0 {
            let closed = connections.takeClosed()
            if !closed.isEmpty { motherboard.peersLeft(closed) }
        }
        heap.trimIfWorthwhile()
        let now = clock.now
        motherboard.tick(now: now)
        if let notifier {
            let (live, expected) = motherboard.alwaysOnLive
            notifier.tick(live: live, expected: expected, now: now)
        }
    }

    func stopping(on socket: ZMQSocket) {}
}

/// Carries process exits from the launcher's threads to the motherboard on its loop thread.
final class ExitForwarder: Sendable {
    private let target = Mutex<(loop: SocketLoop, motherboard: LoopBound<Motherboard>)?>(nil)

    func connect(loop: SocketLoop, motherboard: Motherboard) {
        target.withLock { $0 = (loop, LoopBound(motherboard, loop: loop)) }
    }

    func forward(pid: Int32, status: String, clean: Bool) {
        guard let (loop, motherboard) = target.withLock({ $0 }) else { return }
        loop.execute { _ in motherboard.value.processExited(pid: pid, status: status, clean: clean, now: .now) }
    }
}

/// Starts on-demand boards with the launcher (on the loop thread; spawning takes a millisecond).
final class LauncherProducer: BoardProducer {
    private let launcher: BoardLauncher
    init(launcher: BoardLauncher) { self.launcher = launcher }
    func start(_ board: FleetManifest.Board) throws -> LaunchedProcess { try launcher.start(board) }
    func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess? { launcher.adoptRunning(board) }
    func isRunning(_ pid: Int32) -> Bool { launcher.isRunning(pid) }
    func isStopped(_ pid: Int32) -> Bool { launcher.isStopped(pid) }
    func forgetAdopted(_ pid: Int32) { launcher.forgetAdopted(pid) }
    func end(_ pid: Int32, _ how: EndSignal) { launcher.end(pid, how) }
}
