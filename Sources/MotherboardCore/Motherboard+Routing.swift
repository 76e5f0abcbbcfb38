import BusCore
import Foundation

extension Motherboard {
    /// `activate` (nextToBoard) and `command` (interaction): forwarded to a live board only. When the
    /// sender expects a reply, the broker remembers the request under its own correlation id and
    /// relays the board's answer, or an error if the board dies or the deadline passes.
    func forward(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) {
        let targetName = envelope.header.target
        guard let target = registry[name: targetName] else {
            return reply(to: envelope, from: peer, error: notLiveError(targetName))
        }
        let targetID = target.id
        var header = envelope.header
        if let sender = registry.board(for: peer) {
            header.source = sender.id.rawValue
            header.scope = sender.registration.scope
        }
        if header.flags.contains(.replyExpected) {
            let timeout = header.timeoutMilliseconds > 0
                ? Duration.milliseconds(Int64(header.timeoutMilliseconds)) : settings.defaultRequestTimeout
            let correlationID = makeCorrelationID()
            pending[correlationID] = PendingRequest(
                client: peer, clientCorrelationID: header.correlationID, board: targetID,
                boardPeer: target.peer, deadline: now.advanced(by: timeout))
            header.correlationID = correlationID
        }
        if header.kind == .activate { target.activations += 1 } else { target.commandsHandled += 1 }
        send(Envelope(header: header, payload: envelope.payload), to: target.peer)
    }

    /// A board's answer to a forwarded request: relayed to the client under its own correlation id.
    func relayReply(_ envelope: Envelope, from peer: PeerID) {
        let correlationID = envelope.header.correlationID
        guard let request = pending[correlationID], request.boardPeer == peer else {
            // Late (after a timeout) or forged: nobody waits for it.
            return
        }
        pending[correlationID] = nil
        var header = envelope.header
        header.correlationID = request.clientCorrelationID
        header.source = request.board.rawValue
        header.target = ""
        send(Envelope(header: header, payload: envelope.payload), to: request.client)
    }

    /// `sendToMotherboard(output)`: every flow whose source is the sender activates its target with
    /// the output, in declaration order. An output nobody listens to is dropped and counted.
    ///
    /// A registered board always speaks as itself; an unregistered client (busctl `emit`) may name
    /// the source it emits for, to test flows.
    func routeOutput(_ envelope: Envelope, from peer: PeerID) {
        let sender = registry.board(for: peer)
        let sourceName = sender?.id.rawValue ?? envelope.header.source
        guard let source = try? BoardID(validating: sourceName) else {
            return reply(to: envelope, from: peer, error: BusError(.badArgument, "output without a valid source board id"))
        }
        var delivered = 0
        for flow in flows where flow.source == source {
            guard let target = registry[flow.target] else {
                logger.warning("flow target not running", metadata: ["flow": "\(flow)"])
                continue
            }
            let header = EnvelopeHeader(
                kind: .activate, source: source.rawValue, target: flow.target.rawValue,
                scope: sender?.registration.scope ?? "", typeName: envelope.header.typeName)
            target.activations += 1
            send(Envelope(header: header, payload: envelope.payload), to: target.peer)
            delivered += 1
        }
        if delivered == 0 {
            counters.droppedOutputs += 1
            logger.debug("output dropped: no flow", metadata: ["board": "\(source)", "type": "\(envelope.header.typeName)"])
        }
        reply(to: envelope, from: peer, with: Delivery(delivered: delivered))
    }

    /// `sendAction(action)`: delivered to every live board subscribed to the action's name.
    func deliverAction(_ envelope: Envelope, from peer: PeerID) {
        let sender = registry.board(for: peer)
        var header = envelope.header
        header.flags.remove(.replyExpected)
        header.correlationID = 0
        header.source = sender?.id.rawValue ?? ""
        header.scope = sender?.registration.scope ?? ""
        let subscribers = registry.subscribers(of: header.typeName)
        for subscriber in subscribers {
            header.target = subscriber.id.rawValue
            subscriber.actionsDelivered += 1
            send(Envelope(header: header, payload: envelope.payload), to: subscriber.peer)
        }
        reply(to: envelope, from: peer, with: Delivery(delivered: subscribers.count))
    }

    /// `complete(isDone)`: the board leaves the registry; its process then exits.
    func complete(_ envelope: Envelope, from peer: PeerID) {
        guard let board = registry.board(for: peer) else {
            return reply(to: envelope, from: peer, error: BusError(.notRegistered, "only a registered board can complete"))
        }
        let isDone = (try? PayloadCodec.decode(Completion.self, from: envelope.payload))?.isDone ?? true
        reply(to: envelope, from: peer, with: Delivery(delivered: 0))
        drop(board.id, reason: "completed (isDone: \(isDone))")
    }
}
