import BusCore
import Foundation

extension Motherboard {
    /// `monitor`: starts or renews the sender's monitor.
    func startMonitor(_ envelope: Envelope, from peer: PeerID, principal: String?, now: ContinuousClock.Instant) throws {
        let request = try PayloadCodec.decode(MonitorRequest.self, from: envelope.payload)
        try request.validate()
        // A scope the fleet does not have is refused, as for any other request naming it.
        for scope in request.filter.scopes where scope != MonitorEvent.rootScope {
            if let noScope = noScopeError(Scope(scope)) { throw noScope }
        }
        if !monitors.contains(peer) {
            logger.info("monitor attached", metadata: ["peer": "\(label(peer))", "monitors": "\(monitors.count + 1)"])
        }
        monitors.renew(peer, request, principal: principal, now: now)
        // Answered past the monitors: no monitor shows the monitor protocol itself.
        if envelope.header.flags.contains(.replyExpected) {
            _ = transportSend(envelope.reply(payload: PayloadCodec.encodeOrEmpty(Delivery(delivered: 0))), to: peer)
        }
    }

    /// How a connection is shown: its board id, or `:` and its routing id in hex.
    func label(_ peer: PeerID) -> String {
        if let board = registry.board(for: peer) { return board.id.rawValue }
        return ":\(peer)"
    }

    /// A message the broker sends (routed on, or its own answer), shown to the monitors that
    /// select it. `forwardedFrom` is the connection it came from, when the broker routes it on.
    /// `clientCorrelationID` is the id its sender knows a forwarded request by (its answer is
    /// shown under the same one).
    func observeSent(_ envelope: Envelope, to peer: PeerID, forwardedFrom sender: PeerID?, roundTrip: Duration?, clientCorrelationID: UInt64? = nil) {
        let header = envelope.header
        guard let kind = MonitorEvent.kindName(header.kind) else { return }
        let source = !header.source.isEmpty ? header.source : sender.map(label) ?? "motherboard"
        observe(
            envelope, kind: kind, source: source, target: receiver(at: peer, envelope)?.id.rawValue ?? label(peer),
            roundTrip: roundTrip,
            correlationID: clientCorrelationID ?? header.correlationID)
    }

    /// A message that ends at the broker (an output, a control request, a registration…); not
    /// the monitors' own requests.
    func observeReceived(_ envelope: Envelope, from peer: PeerID) {
        let header = envelope.header
        guard let kind = MonitorEvent.kindName(header.kind), header.kind != .control || header.typeName != ControlOperation.monitor else { return }
        let source = sender(of: peer, envelope)?.id.rawValue ?? (header.source.isEmpty ? label(peer) : header.source)
        observe(envelope, kind: kind, source: source, target: "motherboard", roundTrip: nil, correlationID: header.correlationID)
    }

    private func observe(_ envelope: Envelope, kind: String, source: String, target: String, roundTrip: Duration?, correlationID: UInt64) {
        let header = envelope.header
        let scope = header.scope.isRoot ? MonitorEvent.rootScope : header.scope.name
        let trace = header.trace?.traceID
        let isStore = header.kind == .dispatch || header.kind == .store
        var base: MonitorEvent?
        for (peer, monitor) in monitors.monitors
        where monitor.request.filter.matches(kind: kind, scope: scope, source: source, target: target, type: header.typeName, trace: trace) {
            // A remote principal's monitor sees what the access policy lets it see.
            var payloadAllowed = true
            if let principal = monitor.principal {
                let seen = access.monitorSees(principal, scope: header.scope, boards: (source, target))
                guard seen.sees else { continue }
                payloadAllowed = seen.payload
            }
            guard monitors.hasWindow(peer) else {
                monitors.drop(peer)
                continue
            }
            if base == nil {
                base = MonitorEvent(
                    time: Date().timeIntervalSince1970, scope: scope, kind: kind, source: source, target: target, type: header.typeName,
                    correlationID: correlationID, payloadBytes: envelope.payload.count,
                    error: header.kind == .error ? header.typeName : nil,
                    roundTripMicroseconds: roundTrip.map { Int($0.wholeMicroseconds) },
                    trace: trace, span: header.trace?.spanIDText, dispatchID: header.dispatchID, store: isStore ? header.target : nil,
                    traceState: header.traceState)
            }
            var event = base!
            if monitor.request.payloadBytes > 0, payloadAllowed {
                let excerpt = MonitorEvent.excerpt(envelope.payload, limit: monitor.request.payloadBytes)
                event.payload = excerpt.text
                event.payloadCut = excerpt.cut
            }
            push(MonitorPush(dropped: monitor.dropped, event: event), to: peer)
        }
    }

    private func push(_ push: MonitorPush, to peer: PeerID) {
        let header = EnvelopeHeader(kind: .control, typeName: MonitorPush.typeName)
        if transportSend(Envelope(header: header, payload: push.encodedJSON()), to: peer) {
            monitors.pushed(peer)
        } else if !isConnected(peer) {
            monitors.remove(peer)
            logger.info("monitor detached: its connection is gone", metadata: ["peer": "\(label(peer))"])
        } else {
            monitors.failed(peer, reported: push.dropped, hadEvent: push.event != nil)
        }
    }

    /// Per tick: forgets monitors past their lease, and tells the others of drops that no
    /// event has reported yet.
    func tickMonitors(now: ContinuousClock.Instant) {
        let expired = monitors.expire(now: now)
        if expired > 0 { logger.info("monitors detached: not renewed", metadata: ["count": "\(expired)"]) }
        for (peer, monitor) in monitors.monitors where monitor.dropped > 0 && monitors.hasWindow(peer) {
            push(MonitorPush(dropped: monitor.dropped, event: nil), to: peer)
        }
    }
}
