import BusCore
import Foundation

/// How the broker sends: what a failed send means, answers and errors, the errors for targets
/// that are not live.
extension Motherboard {
    /// Sends without the consequences of ``send(_:to:)`` (a failed fan-out does not drop a board).
    func transportSend(_ envelope: Envelope, to peer: PeerID) -> Bool {
        transport.send(envelope, to: peer)
    }

    /// Whether the transport still knows the peer (false once its connection is gone).
    func isConnected(_ peer: PeerID) -> Bool {
        transport.isConnected(peer)
    }

    /// Sends a message the broker routes on (from `forwardedFrom`) or makes itself, shown to monitors;
    /// `roundTrip` is how long the board took, for an answer to a forwarded request.
    func send(
        _ envelope: Envelope, to peer: PeerID, forwardedFrom sender: PeerID? = nil, roundTrip: Duration? = nil, clientCorrelationID: UInt64? = nil
    ) {
        if !monitors.isEmpty {
            observeSent(envelope, to: peer, forwardedFrom: sender, roundTrip: roundTrip, clientCorrelationID: clientCorrelationID)
        }
        countSent(envelope.header, to: receiver(at: peer, envelope))
        if !transport.send(envelope, to: peer) { undeliverable(envelope.header.kind, to: peer, correlationID: envelope.header.correlationID) }
    }

    /// Counts a message the broker sends to `board` (nil: a client), and an error by its code.
    func countSent(_ header: EnvelopeHeader, to board: LiveBoard?) {
        (board?.metrics ?? metrics.clients).sent(header.kind)
        if header.kind == .error { metrics.countError(code: header.typeName, from: header.source.isEmpty ? "motherboard" : header.source) }
    }

    /// A message could not be handed to `peer` (its queue is full, or it is gone): counted; a
    /// board that cannot take a request is dropped. A peer that is only backlogged (alive, not
    /// reading fast enough) is kept, and the request sent to it under `correlationID` is answered
    /// `busy` at once.
    package func undeliverable(_ kind: MessageKind, to peer: PeerID, correlationID: UInt64 = 0) {
        counters.undeliverable += 1
        if transport.isBacklogged(peer) {
            if kind != .reply && kind != .error && correlationID != 0 {
                let name = registry.board(for: peer).map { "board '\($0.name)'" } ?? "the peer"
                finish(
                    correlationID,
                    .failure(
                        BusError(
                            .busy, "\(name) has not read what it was sent (\(settings.maximumUnreadBytesPerPeer >> 20) MiB wait); try again later")))
            }
            return
        }
        if let board = registry.board(for: peer), kind != .error {
            // The request that could not be handed over was not delivered: its sender may retry.
            if kind != .reply && correlationID != 0 {
                finish(correlationID, .failure(BusError(.boardNotRunning, "board '\(board.name)' is gone: its connection closed")))
            }
            dropFailed(board, reason: "its socket is gone or full")
        }
        if peer == links.uplink, !transport.isConnected(peer) { uplinkLost(peer) }
        if peer == links.exporter, !transport.isConnected(peer) { links.exporter = nil }
    }

    func reply(to request: Envelope, from peer: PeerID, error: BusError) {
        guard request.header.flags.contains(.replyExpected) else {
            logger.debug("dropped message", metadata: ["peer": "\(peer)", "error": "\(error)"])
            return
        }
        send(request.errorReply(error), to: peer)
    }

    func reply<T: BusPayload>(to request: Envelope, from peer: PeerID, with value: T) {
        guard request.header.flags.contains(.replyExpected) else { return }
        send(request.reply(payload: PayloadCodec.encodeOrEmpty(value)), to: peer)
    }

    func replyError(_ error: BusError, correlationID: UInt64, to peer: PeerID) {
        send(Envelope.error(error, correlationID: correlationID), to: peer)
    }

    func makeCorrelationID() -> UInt64 {
        replies.makeCorrelationID()
    }

    /// The scope a message acts in: a registered board's own, else the one the header names.
    func scope(of envelope: Envelope, sender: LiveBoard?) -> Scope {
        sender?.scope ?? envelope.header.scope
    }

    /// `badArgument` naming the scopes there are, when `scope` is not one of them.
    func noScopeError(_ scope: Scope) -> BusError? {
        guard !scopes.contains(scope) else { return nil }
        let known = scopes.names.map(\.description).joined(separator: ", ")
        return BusError(.badArgument, "no scope '\(scope.name.escapedForDisplay())' in this fleet (it has: \(known))")
    }

    /// The error for a target that is not live: the manifest decides between "not running" and "no such board".
    func notLiveError(_ name: ScopedName) -> BusError {
        if let lost = links.unreachable[name] {
            return BusError(.unreachable, "board '\(name)' at \(lost.board.host ?? "another host") is unreachable (its link is down)")
        }
        if let noScope = noScopeError(name.scope) { return noScope }
        if isManifestBoard(name) {
            return BusError(.boardNotRunning, "board '\(name)' is in the manifest but not running")
        }
        return BusError(.noSuchBoard, "no board '\(name)' is running and the manifest cannot start one")
    }
}
