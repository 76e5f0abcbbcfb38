import BusCore
import Foundation

/// Boards on other hosts, and the uplink of a motherboard that serves scopes of a parent one.
///
/// A board connected over tcp whose link fails (no heartbeat within the liveness timeout, or its
/// connection closed under a send) is not dropped as gone: it is kept as `unreachable`, requests
/// waiting on it fail with `unreachable`, and new ones are answered so at once, until it
/// registers again (its board or uplink re-registers by itself when the link returns) or
/// ``MotherboardSettings/unreachableRetention`` passes.
///
/// On a motherboard with an uplink (`motherboard --attach`), the uplink is a peer on the in-process
/// socket that proved itself with the motherboard's uplink secret. The boards of the scopes this
/// motherboard serves (every scope of its manifest but the root) are pushed to it, and it
/// registers them with the parent. What names a scope this motherboard does not serve goes up to
/// it: commands, activations and store requests of clients, and every action once it has bubbled
/// through this motherboard's scopes.
extension Motherboard {
    /// Drops a board whose connection failed (no heartbeat, or its socket gone): a board on another
    /// host is kept as unreachable, since its link may come back.
    func dropFailed(_ board: LiveBoard, reason: String, now: ContinuousClock.Instant = .now) {
        drop(board.name, reason: reason, unreachableSince: board.remote == nil ? nil : now)
    }

    /// Forgets boards unreachable for longer than the retention.
    func forgetLongUnreachable(now: ContinuousClock.Instant) {
        for name in links.forgetUnreachable(olderThan: settings.unreachableRetention, now: now) {
            logger.info("unreachable board forgotten", metadata: ["board": "\(name)", "after": "\(settings.unreachableRetention)"])
        }
    }

    /// Whether this motherboard serves `scope` itself (rather than its parent).
    func serves(_ scope: Scope) -> Bool {
        links.uplinkSecret == nil || (!scope.isRoot && scopes.contains(scope))
    }

    /// `uplink.attach`: the uplink proves itself; the boards of the served scopes are pushed to it.
    func attachUplink(_ envelope: Envelope, from peer: PeerID) throws {
        try checkOwnGateway(envelope, from: peer, secret: links.uplinkSecret, refusal: "only this motherboard's own uplink may attach")
        links.uplink = peer
        logger.info("uplink attached", metadata: ["peer": "\(peer)"])
        // The uplink learns this motherboard's link id, to say who asks when its link comes up.
        reply(to: envelope, from: peer, with: LinkChain(ids: [links.linkID]))
        for board in registry.sorted { uplinkBoardRegistered(board) }
    }

    /// A gateway of this motherboard's own (not a board) proves itself with the secret made for it
    /// (``UplinkAttach``); nil: there is none to attach.
    private func checkOwnGateway(_ envelope: Envelope, from peer: PeerID, secret: String?, refusal: String) throws {
        let request = try PayloadCodec.decode(UplinkAttach.self, from: envelope.payload)
        guard sender(of: peer, envelope) == nil, Self.secretsMatch(secret, request.secret) else { throw BusError(.unauthorized, refusal) }
    }

    /// `export.attach`: the NATS gateway proves itself; every board here is pushed to it.
    func attachExporter(_ envelope: Envelope, from peer: PeerID) throws {
        try checkOwnGateway(
            envelope, from: peer, secret: links.exportSecret, refusal: "only this motherboard's own NATS gateway may attach as its exporter")
        links.exporter = peer
        logger.info("exporter attached", metadata: ["peer": "\(peer)"])
        reply(to: envelope, from: peer, with: Delivery(delivered: 0))
        for board in registry.sorted { exportBoardRegistered(board) }
    }

    /// A board registered here: the exporter is told, unless a gateway serves it from elsewhere.
    func exportBoardRegistered(_ board: LiveBoard) {
        guard let exporter = links.exporter, board.servedFrom == nil else { return }
        var registration = board.registration
        registration.secret = nil
        registration.schemas = nil
        let header = EnvelopeHeader(kind: .control, target: board.id.rawValue, scope: board.scope, typeName: ControlOperation.exportBoard)
        send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(registration)), to: exporter)
    }

    /// A board left: the exporter is told.
    func exportBoardGone(_ board: LiveBoard) {
        guard let exporter = links.exporter, board.servedFrom == nil else { return }
        let header = EnvelopeHeader(kind: .control, target: board.id.rawValue, scope: board.scope, typeName: ControlOperation.exportGone)
        send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(StatusRequest(id: board.id, scope: board.scope))), to: exporter)
    }

    /// `link.chain`: a motherboard attaching here names itself; it is refused when it is this one
    /// or one above it (the attach would close a cycle), else told the chain above it.
    func answerLinkChain(_ envelope: Envelope, from peer: PeerID) throws {
        let asking = try PayloadCodec.decode(LinkChain.self, from: envelope.payload).ids
        if let cycle = links.cycle(in: asking) {
            logger.error("a motherboard above this one tried to attach here: refused (a cycle)", metadata: ["link": "\(cycle)"])
            throw BusError(
                .badArgument,
                cycle == links.linkID
                    ? "this motherboard would attach to itself: that makes a cycle"
                    : "the motherboard attaching is above this one: attaching here would make a cycle")
        }
        reply(to: envelope, from: peer, with: LinkChain(ids: [links.linkID] + links.ancestors))
    }

    /// A board registered: if it is in a served scope, the uplink registers it with the parent.
    func uplinkBoardRegistered(_ board: LiveBoard) {
        guard let uplink = links.uplink, !board.scope.isRoot else { return }
        var registration = board.registration
        registration.secret = nil
        let header = EnvelopeHeader(kind: .control, target: board.id.rawValue, scope: board.scope, typeName: ControlOperation.uplinkBoard)
        send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(registration)), to: uplink)
    }

    /// A board left: the uplink unregisters it from the parent.
    func uplinkBoardGone(_ board: LiveBoard) {
        guard let uplink = links.uplink, !board.scope.isRoot else { return }
        let header = EnvelopeHeader(kind: .control, target: board.id.rawValue, scope: board.scope, typeName: ControlOperation.uplinkGone)
        let gone = StatusRequest(id: board.id, scope: board.scope)
        send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(gone)), to: uplink)
    }

    /// Sends a client's request for a scope this motherboard does not serve up to the parent
    /// (through the uplink), and relays the answer as a board's. False when it stays here: no
    /// uplink, the scope is served here, the sender is a board (boards address their own scope),
    /// or this motherboard's manifest names the board (it starts it, or says it is not running).
    func forwardUp(_ envelope: Envelope, name: ScopedName, from peer: PeerID, sender: LiveBoard?, now: ContinuousClock.Instant) -> Bool {
        guard let uplink = links.uplink, peer != uplink, sender == nil, !serves(name.scope) else { return false }
        // A board of this motherboard's own manifest is answered for here, running or not.
        let isStoreRequest = envelope.header.kind == .dispatch || envelope.header.kind == .store
        if !isStoreRequest, isManifestBoard(name) { return false }
        if envelope.header.kind == .store,
            [StoreOperation.subscribe, StoreOperation.renew, StoreOperation.unsubscribe].contains(envelope.header.typeName)
        {
            reply(
                to: envelope, from: peer,
                error: BusError(.badArgument, "store '\(name)' is on the parent motherboard: watch it there (busctl --bus tcp://…)"))
            return true
        }
        var header = envelope.header
        let clientCorrelationID = header.correlationID
        header.scope = name.scope
        guard
            let correlationID = forwardingCorrelationID(
                flags: header.flags, correlationID: clientCorrelationID, timeoutMilliseconds: header.timeoutMilliseconds, to: name, at: uplink,
                client: peer, clientIsBoard: false, now: now)
        else {
            refusePending(envelope, to: name, from: peer)
            return true
        }
        header.correlationID = correlationID
        send(Envelope(header: header, payload: envelope.payload), to: uplink, forwardedFrom: peer, clientCorrelationID: clientCorrelationID)
        return true
    }

    /// An action that bubbled through this motherboard's scopes goes on in the parent's: one more
    /// part of its delivery, which the parent's count acknowledges.
    func sendActionUp(
        _ header: EnvelopeHeader, payload: Data, deliveryID: UInt64?, timeout: Duration, to uplink: PeerID, now: ContinuousClock.Instant
    ) {
        var header = header
        header.linkTrail = (header.linkTrail ?? []) + [links.linkID]
        sendActionPart(header, payload: payload, deliveryID: deliveryID, timeout: timeout, to: uplink, named: "uplink", now: now)
    }

    /// One part of an action's delivery sent to a gateway (the uplink, the NATS gateway), which
    /// answers with the subscribers it reached when the sender waits (`deliveryID`).
    func sendActionPart(
        _ header: EnvelopeHeader, payload: Data, deliveryID: UInt64?, timeout: Duration, to peer: PeerID, named name: String,
        now: ContinuousClock.Instant
    ) {
        var header = header
        header.target = ""
        if let deliveryID {
            header.flags.insert(.replyExpected)
            header.correlationID = replies.expectActionPart(
                deliveryID, board: ScopedName(scope: .root, name: name), boardPeer: peer, deadline: now.advanced(by: timeout))
        } else {
            header.flags.remove(.replyExpected)
            header.correlationID = 0
        }
        send(Envelope(header: header, payload: payload), to: peer)
    }

    /// An action that went up from here came back (motherboards attached in a cycle: to itself,
    /// A ↔ B, or longer): its subscribers here have had it, so it goes no further; answered with
    /// no delivery, counted, logged at most every 10 s.
    func dropLoopedAction(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) {
        if let dropped = links.loopedActions.note(now: now) {
            logger.error(
                "an action came back through the links: the motherboards are attached in a cycle; fix their --attach",
                metadata: ["action": "\(envelope.header.typeName.escapedForDisplay())", "dropped": "\(dropped)"])
        }
        reply(to: envelope, from: peer, with: Delivery(delivered: 0))
    }

    /// The uplink's connection is gone (its motherboard is stopping): requests waiting on it fail.
    func uplinkLost(_ peer: PeerID) {
        guard links.uplink == peer else { return }
        links.uplink = nil
        for request in replies.takeAll(sentTo: peer) {
            finish(request, .failure(BusError(.unreachable, "the link to the parent motherboard is gone")))
        }
    }

    /// What `list` and `tree` show of an unreachable board: as it was last seen, not running.
    func unreachableInfo(_ lost: UnreachableBoard) -> BoardInfo {
        var shown = info(for: lost.board, now: .now)
        shown.state = .unreachable
        shown.uptimeSeconds = 0
        return shown
    }
}
