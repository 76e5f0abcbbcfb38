import BusCore
import Foundation

extension Motherboard {
    /// Where a message routed in place goes, and what it is.
    package struct InPlaceRoute: Sendable, Hashable {
        package let peer: PeerID
        package let kind: MessageKind
    }

    /// Routes a command or a reply, the bulk of the traffic, from its header as received (the
    /// start of its one frame):
    /// reads the fixed fields and the names in place, writes the new correlation id into the
    /// frame, and returns the peer to send the frames on to, otherwise unchanged. No envelope is
    /// built, no string copied but the target's name, the payload not touched.
    ///
    /// Returns nil (and changes nothing) for any other message; when routing would change more
    /// than the correlation id (a board's command that does not already name it as source and
    /// scope, a reply that does not name its board as source and no target) or does something
    /// else (a reply to an action is counted, not relayed); when the broker must answer (an
    /// unknown target, a late or forged reply, a message the admission gate refuses); or when a
    /// string is not ASCII.
    /// The caller then parses the message and hands it to `receive`, which routes it the same way.
    package func routeInPlace(
        _ header: UnsafeMutableRawBufferPointer, from peer: PeerID, now: ContinuousClock.Instant, principal: String? = nil
    ) -> InPlaceRoute? {
        var route: InPlaceRoute?
        _ = routeInPlace(header, from: peer, now: now, principal: principal) { route = InPlaceRoute(peer: $0, kind: $1) }
        return route
    }

    /// ``routeInPlace(_:from:now:principal:)`` handing the route to `forward` (the peer to send
    /// the frame on to, and the message's kind) rather than returning it: the broker's loop sends
    /// from there, without a route to copy and destroy per message. Returns whether it routed.
    /// `payloadBytes`: the size of the payload after the header, for the reply registry's count of
    /// a client's large requests in flight.
    package func routeInPlace(
        _ header: UnsafeMutableRawBufferPointer, from peer: PeerID, now: ContinuousClock.Instant, principal: String?, payloadBytes: Int = 0,
        forward: (_ peer: PeerID, _ kind: MessageKind) -> Void
    ) -> Bool {
        // While a monitor is attached, everything takes the parsed path, where monitors look.
        guard monitors.isEmpty else { return false }
        // A remote principal's messages are asked of the access policy, on the parsed path.
        guard principal == nil else { return false }
        let bytes = UnsafeRawBufferPointer(header)
        guard let layout = try? HeaderLayout(bytes), layout.stringsAreASCII(in: bytes), layout.onBehalfOf == nil else { return false }
        guard layout.kind == .command || layout.kind == .reply || layout.kind == .error else { return false }
        let sender = registry.board(for: peer)
        // A gateway's boards are named in each message: the parsed path finds which.
        if sender == nil, registry.isGateway(peer) { return false }
        // Refused at the gate: the parsed path answers why.
        guard
            admit(layout.kind, hasContentType: layout.contentType != nil, from: peer, sender: sender, target: { Self.string(bytes, layout.target) })
                == nil
        else { return false }
        let destination: PeerID?
        switch layout.kind {
        case .command: destination = commandInPlace(layout, header, from: peer, sender: sender, payloadBytes: payloadBytes, now: now)
        default: destination = replyInPlace(layout, header, from: peer, sender: sender, now: now)
        }
        guard let destination else { return false }
        forward(destination, layout.kind)
        return true
    }

    /// `command` and `deliver`, for a header that needs no rewriting but its correlation id.
    private func commandInPlace(
        _ layout: HeaderLayout, _ header: UnsafeMutableRawBufferPointer, from peer: PeerID, sender: LiveBoard?, payloadBytes: Int,
        now: ContinuousClock.Instant
    ) -> PeerID? {
        let bytes = UnsafeRawBufferPointer(header)
        // A board speaks as itself, a client as no board: in place only when the header already
        // says so.
        if let sender {
            guard Self.bytes(bytes, layout.source, equal: sender.id.rawValue), Self.bytes(bytes, layout.scope, equal: sender.scope.name) else {
                return nil
            }
        } else if !layout.source.isEmpty {
            return nil
        }
        guard
            let target = registry.board(
                scope: UnsafeRawBufferPointer(rebasing: bytes[layout.scope]), id: UnsafeRawBufferPointer(rebasing: bytes[layout.target]))
        else { return nil }
        // Refused by the reply registry: the parsed path answers why.
        guard
            let correlationID = forwardingCorrelationID(
                flags: layout.flags, correlationID: layout.correlationID, timeoutMilliseconds: layout.timeoutMilliseconds,
                to: target.name, at: target.peer, client: peer, clientIsBoard: sender != nil, bytes: payloadBytes, now: now)
        else { return nil }
        sender?.lastSeen = now
        target.commandsHandled += 1
        (sender?.metrics ?? metrics.clients).received(.command)
        target.metrics.sent(.command)
        HeaderLayout.setCorrelationID(correlationID, in: header)
        return target.peer
    }

    /// `relayReply` and `finish`, for a reply that already names its board as source and no target.
    private func replyInPlace(
        _ layout: HeaderLayout, _ header: UnsafeMutableRawBufferPointer, from peer: PeerID, sender: LiveBoard?, now: ContinuousClock.Instant
    ) -> PeerID? {
        guard let sender,
            let request = replies.takeReply(
                layout.correlationID, from: peer,
                accept: { request in
                    request.action == nil && layout.target.isEmpty
                        && Self.bytes(UnsafeRawBufferPointer(header), layout.source, equal: request.board.name)
                })
        else { return nil }
        sender.lastSeen = now
        HeaderLayout.setCorrelationID(request.clientCorrelationID, in: header)
        sender.metrics.received(layout.kind)
        if let roundTrip = request.nanosecondsSinceForwarded(at: FixedInstant(now)) { sender.metrics.recordRoundTrip(roundTrip) }
        ((request.clientIsBoard ? registry.board(for: request.client)?.metrics : nil) ?? metrics.clients).sent(layout.kind)
        if layout.kind == .error {
            metrics.countError(code: Self.string(UnsafeRawBufferPointer(header), layout.typeName), from: request.board.name)
        }
        return request.client
    }

    /// An ASCII field (checked by the caller) as a string.
    private static func string(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> String {
        String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    private static func bytes(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, equal text: String) -> Bool {
        text.hasUTF8(UnsafeRawBufferPointer(rebasing: bytes[range]))
    }
}
