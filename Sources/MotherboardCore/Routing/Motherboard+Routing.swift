import BusCore
import Foundation

extension Motherboard {
    /// `command` (interaction): forwarded to the live board; to an on-demand board of the manifest
    /// that is not running, held while the broker starts it (as an activation is) and delivered
    /// with what is left of its deadline once it registers.
    func command(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, sender, now) = (inbound.peer, inbound.sender, inbound.now)
        let envelope = Self.withoutForgedSource(envelope, sender: sender)
        let name = ScopedName(scope: scope(of: envelope, sender: sender), name: envelope.header.target)
        guard let target = registry[name] else {
            if forwardUp(envelope, name: name, from: peer, sender: sender, now: now) { return }
            if let entry = manifest.board(named: name.name, scope: name.scope), entry.start == .onDemand, producer != nil {
                var header = envelope.header
                Self.stampSender(&header, as: sender)
                return hold(
                    Envelope(header: header, payload: envelope.payload), for: name, entry: entry, client: peer, principal: inbound.principal,
                    now: now)
            }
            return reply(to: envelope, from: peer, error: notLiveError(name))
        }
        target.commandsHandled += 1
        deliver(envelope, to: target, from: peer, sender: sender, now: now)
    }

    /// `activate` (nextToBoard): to the live board in the sender's scope, or, when the manifest can
    /// produce it, to a process started for it (the input waits in a bounded queue until it registers).
    func activate(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, sender) = (inbound.peer, inbound.sender)
        let name = ScopedName(scope: scope(of: envelope, sender: sender), name: envelope.header.target)
        var header = envelope.header
        header.source = sender?.id.rawValue ?? ""
        header.scope = name.scope
        // The delivery count is the broker's to set (an at-least-once redelivery), never a sender's.
        header.deliveryCount = nil
        activate(name, with: Envelope(header: header, payload: envelope.payload), client: peer, principal: inbound.principal, now: inbound.now)
    }

    /// Activates `name` with `envelope` (an `activate` message), starting its process if needed.
    /// `client` is the peer to answer, nil for activations made by flows; `principal`, the client's
    /// remote principal, if it has one (it may start the board only where the policy says).
    func activate(_ name: ScopedName, with envelope: Envelope, client: PeerID?, principal: String? = nil, now: ContinuousClock.Instant) {
        if let target = registry[name] {
            target.activations += 1
            if target.maxDeliveries != nil { return deliverAtLeastOnce(envelope, to: target, client: client) }
            return deliver(envelope, to: target, from: client, sender: nil, now: now)
        }
        if let client, forwardUp(envelope, name: name, from: client, sender: sender(of: client, envelope), now: now) { return }
        guard let entry = manifest.board(named: name.name, scope: name.scope), producer != nil else {
            logger.warning("activation of a board that is not running", metadata: ["board": "\(name)"])
            return refuseHeld(envelope, client: client, notLiveError(name))
        }
        hold(envelope, for: name, entry: entry, client: client, principal: principal, now: now)
    }

    /// Holds an input (an activation or a command) for a manifest board that is not running, in a
    /// bounded queue, starting its process unless a start is under way.
    private func hold(
        _ envelope: Envelope, for name: ScopedName, entry: FleetManifest.Board, client: PeerID?, principal: String?, now: ContinuousClock.Instant
    ) {
        // A remote principal's input starts a board only where the access policy says it may.
        if let client, let principal, let refusal = access.startForbidden(principal, name: name) {
            return reply(to: envelope, from: client, error: refusal)
        }
        let input = HeldInput(envelope: envelope, client: client, since: now)
        switch supervisor.enqueue(input, for: name, limit: settings.activationQueueLimit) {
        case .queued:
            return
        case .full:
            return refuseHeld(
                envelope, client: client, BusError(.busy, "board '\(name)' is starting and \(settings.activationQueueLimit) inputs already wait"))
        case .notStarting:
            break
        }
        if supervisor.hasFailed(name) {
            return refuseHeld(envelope, client: client, BusError(.boardNotRunning, "board '\(name)' reached its restart limit"))
        }
        do {
            supervisor.willStart(name, with: input, now: now)
            try startProcess(name, entry: entry, now: now)
            counters.onDemandStarts += 1
        } catch {
            _ = supervisor.endStart(name)
            let failure = error as? BusError ?? BusError(.boardNotRunning, "cannot start board '\(name)': \(error)")
            refuseHeld(envelope, client: client, failure)
        }
    }

    /// An input that cannot wait for its board: its sender, when it waits, gets `error`; an
    /// at-least-once activation being delivered again goes on the dead-letter list.
    func refuseHeld(_ envelope: Envelope, client: PeerID?, _ error: BusError) {
        if let client { reply(to: envelope, from: client, error: error) }
        let id = envelope.header.correlationID
        guard envelope.header.deliveryCount != nil, DeliveryLedger.isLedgerID(id) else { return }
        _ = deadLetter(id, reason: error.message)
    }

    /// A board started on demand registered: its queued inputs go to it, in order; a command
    /// with what is left of its deadline, or, when nothing is, answered `timeout` instead.
    func deliverQueuedActivations(to board: LiveBoard, now: ContinuousClock.Instant) {
        guard let start = supervisor.endStart(board.name) else { return }
        for input in start.queue {
            var envelope = input.envelope
            if envelope.header.kind == .command {
                let left = requestTimeout(milliseconds: envelope.header.timeoutMilliseconds) - input.since.duration(to: now)
                guard left > .zero else {
                    counters.timedOutRequests += 1
                    if let client = input.client {
                        reply(to: envelope, from: client, error: BusError(.timeout, "board '\(board.name)' started after the request's deadline"))
                    }
                    continue
                }
                envelope.header.timeoutMilliseconds = UInt32(clamping: max(1, left.wholeMilliseconds))
                board.commandsHandled += 1
            } else {
                board.activations += 1
                if board.maxDeliveries != nil {
                    deliverAtLeastOnce(envelope, to: board, client: input.client)
                    continue
                }
            }
            deliver(envelope, to: board, from: input.client, sender: nil, now: now)
        }
    }

    /// A start failed: everything waiting for it gets `error`.
    func failStart(_ name: ScopedName, _ error: BusError) {
        guard let start = supervisor.endStart(name) else { return }
        logger.warning("on-demand start failed", metadata: ["board": "\(name)", "error": "\(error)"])
        for input in start.queue { refuseHeld(input.envelope, client: input.client, error) }
    }

    /// Sends a request on to a live board. When its sender (`client`) expects a reply, the broker
    /// remembers the request under its own correlation id and relays the board's answer, or an
    /// error if the board dies or the deadline passes.
    func deliver(_ envelope: Envelope, to target: LiveBoard, from client: PeerID?, sender: LiveBoard?, now: ContinuousClock.Instant) {
        var header = envelope.header
        let clientCorrelationID = header.correlationID
        Self.stampSender(&header, as: sender)
        guard
            let correlationID = forwardingCorrelationID(
                flags: header.flags, correlationID: header.correlationID, timeoutMilliseconds: header.timeoutMilliseconds,
                to: target.name, at: target.peer, client: client, bytes: envelope.payload.count, now: now)
        else { return refusePending(envelope, to: target.name, from: client) }
        header.correlationID = correlationID
        if header.correlationID == 0 { header.flags.remove(.replyExpected) }
        send(Envelope(header: header, payload: envelope.payload), to: target.peer, forwardedFrom: client, clientCorrelationID: clientCorrelationID)
    }

    /// Writes a registered sender's own id and scope into `header`, whatever it said there.
    static func stampSender(_ header: inout EnvelopeHeader, as sender: LiveBoard?) {
        guard let sender else { return }
        header.source = sender.id.rawValue
        header.scope = sender.scope
    }

    /// A request from a peer that is not a registered board names no board as its source,
    /// whatever it wrote (its receiver takes `source` as the board that asked).
    static func withoutForgedSource(_ envelope: Envelope, sender: LiveBoard?) -> Envelope {
        guard sender == nil, !envelope.header.source.isEmpty else { return envelope }
        var header = envelope.header
        header.source = ""
        return Envelope(header: header, payload: envelope.payload)
    }

    /// The correlation id a request travels under to `board` (on the connection `boardPeer`: the
    /// board's, or the uplink's for a board of the parent). When its sender (`client`) waits for a
    /// reply: a new one, under which the broker remembers the request, to relay the answer, or an
    /// error if the board dies or the deadline passes. Else 0.
    /// Nil when the reply registry refuses to wait for one more answer (``refusePending(_:to:from:)``).
    func forwardingCorrelationID(
        flags: MessageFlags, correlationID: UInt64, timeoutMilliseconds: UInt32, to board: ScopedName, at boardPeer: PeerID,
        client: PeerID?, clientIsBoard: Bool? = nil, bytes: Int = 0, now: ContinuousClock.Instant
    ) -> UInt64? {
        guard let client, flags.contains(.replyExpected) else { return 0 }
        // One conversion of `now`: the deadline is added to the fixed instant.
        let now = FixedInstant(now)
        return replies.expect(
            from: client, clientCorrelationID: correlationID, board: board, boardPeer: boardPeer,
            deadline: now.advanced(by: requestTimeout(milliseconds: timeoutMilliseconds)), sentAt: now,
            clientIsBoard: clientIsBoard ?? (registry.board(for: client) != nil), bytes: bytes)
    }

    /// A request the reply registry will not wait for (its sender's or its board's share of the
    /// pending requests is spent): answered `busy`, counted, and not sent.
    func refusePending(_ envelope: Envelope, to board: ScopedName, from client: PeerID?) {
        counters.refusedPending += 1
        guard let client else { return }
        let why =
            replies.refusal(client: client, board: board) ?? replies.bytesRefusal(client: client, bytes: envelope.payload.count)
            ?? "the broker waits for as many answers as it may"
        reply(to: envelope, from: client, error: BusError(.busy, why))
    }

    /// The deadline a request carries (its header's timeout), or the default when it carries none.
    func requestTimeout(milliseconds: UInt32) -> Duration {
        milliseconds > 0 ? .milliseconds(Int64(milliseconds)) : settings.defaultRequestTimeout
    }

    /// A board's answer to a forwarded request: relayed to the client under its own correlation id.
    func relayReply(_ envelope: Envelope, _ inbound: Inbound) {
        let peer = inbound.peer
        let sender = inbound.sender
        if acknowledgeDelivery(envelope, from: sender, now: inbound.now) { return }
        // Late (after a timeout: nobody waits for it) or forged (not from the board the request
        // went to, on its connection, and on a gateway's connection, named): dropped.
        guard !(sender?.sharesConnection ?? registry.isGateway(peer)) else { return relayGatewayReply(envelope, from: peer, sender: sender) }
        guard let request = replies.takeReply(envelope.header.correlationID, from: peer) else { return }
        finish(request, .success(envelope))
    }

    /// A reply on a gateway's connection: taken only from the board it names, if that is the
    /// one the request went to.
    private func relayGatewayReply(_ envelope: Envelope, from peer: PeerID, sender: LiveBoard?) {
        guard let name = sender?.name,
            let request = replies.takeReply(envelope.header.correlationID, from: peer, accept: { $0.board == name })
        else { return }
        finish(request, .success(envelope))
    }

    /// Ends a forwarded request with the board's answer or an error: relayed to the client, or
    /// counted towards the action delivery it is part of.
    func finish(_ correlationID: UInt64, _ outcome: Result<Envelope, BusError>) {
        guard let request = replies.take(correlationID) else { return }
        finish(request, outcome)
    }

    /// Ends a request already taken out of ``replies``.
    func finish(_ request: ReplyRegistry.Request, _ outcome: Result<Envelope, BusError>) {
        if let action = request.action {
            guard let answer = try? outcome.get(), answer.header.kind == .reply else { return finishActionPart(action, acknowledged: 0) }
            // The uplink's part counts the subscribers the parent motherboard reached, the NATS
            // gateway's those of the fleet's other motherboards.
            // Their word, bounded: a count past any fleet's cannot overflow the sum.
            let count =
                links.isLink(request.boardPeer)
                ? min(max((try? PayloadCodec.decode(Delivery.self, from: answer.payload))?.delivered ?? 0, 0), 1 << 30) : 1
            return finishActionPart(action, acknowledged: count)
        }
        switch outcome {
        case .success(let answer):
            var header = answer.header
            header.correlationID = request.clientCorrelationID
            header.source = request.board.name
            header.target = ""
            let roundTrip = request.sentAt.map { $0.duration(to: .now) }
            if let roundTrip, let board = registry[request.board] { board.metrics.recordRoundTrip(roundTrip.wholeNanoseconds) }
            send(Envelope(header: header, payload: answer.payload), to: request.client, roundTrip: roundTrip)
        case .failure(let error):
            replyError(error, correlationID: request.clientCorrelationID, to: request.client)
        }
    }

    private func finishActionPart(_ id: UInt64, acknowledged: Int) {
        guard let done = replies.finishActionPart(id, acknowledged: acknowledged) else { return }
        let header = EnvelopeHeader(kind: .reply, correlationID: done.clientCorrelationID)
        send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(Delivery(delivered: done.acknowledged))), to: done.client)
    }

    /// `sendToMotherboard(output)`: every output flow of the sender's scope whose sources include
    /// the sender runs, in registration order. A guaranteed flow skips outputs of another type.
    /// An output nobody listens to is dropped and counted.
    ///
    /// A registered board always speaks as itself; an unregistered client (busctl `emit`) may name
    /// the source and scope it emits for, to test flows.
    func routeOutput(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, now) = (inbound.peer, inbound.now)
        let sender = inbound.sender
        let sourceName = sender?.id.rawValue ?? envelope.header.source
        guard BoardID.isValid(sourceName) else {
            return reply(to: envelope, from: peer, error: BusError(.badArgument, "output without a valid source board id"))
        }
        let source = ScopedName(scope: scope(of: envelope, sender: sender), name: sourceName)
        let delivered = runFlows(
            .output, from: source, typeName: envelope.header.typeName, payload: envelope.payload, trace: envelope.header.trace,
            traceState: envelope.header.traceState, now: now)
        // The fleet's other motherboards run their flows on it too (not on an output that came
        // from there, nor on one of a board served here from another host).
        if let exporter = links.exporter, peer != exporter, sender?.servedFrom == nil {
            var header = envelope.header
            header.source = source.name
            header.scope = source.scope
            header.target = ""
            header.flags.remove(.replyExpected)
            header.correlationID = 0
            send(Envelope(header: header, payload: envelope.payload), to: exporter)
        }
        if delivered == 0 {
            counters.droppedOutputs += 1
            logger.debug("output dropped: no flow", metadata: ["board": "\(source)", "type": "\(envelope.header.typeName)"])
        }
        reply(to: envelope, from: peer, with: Delivery(delivered: delivered))
    }

    /// Runs the flows of `trigger` from `source`; returns how many ran. What a flow sends carries
    /// the trace of the output (or completion) that triggered it.
    @discardableResult
    func runFlows(
        _ trigger: FlowSpec.Trigger, from source: ScopedName, typeName: String, payload: Data, trace: TraceContext?, traceState: String? = nil,
        now: ContinuousClock.Instant
    ) -> Int {
        var ran = 0
        for flow in flows.matching(scope: source.scope, source: source.name, trigger: trigger) {
            if let expected = flow.spec.outputType, expected != typeName {
                counters.ignoredByType += 1
                logger.notice(
                    "guaranteed flow ignored an output of another type",
                    metadata: [
                        "flow": "\(flow.id)", "expected": "\(expected)", "received": "\(typeName)", "board": "\(source)",
                    ])
                continue
            }
            flows.countRun(flow.id)
            ran += 1
            if let target = flow.spec.target {
                var header = EnvelopeHeader(
                    kind: .activate, source: source.name, target: target.rawValue, scope: source.scope, typeName: typeName, trace: trace)
                if let traceState { header.traceState = traceState }
                activate(
                    ScopedName(scope: source.scope, name: target.rawValue), with: Envelope(header: header, payload: payload), client: nil, now: now)
            } else if let owner = flow.owner, let board = registry[ScopedName(scope: flow.scope, name: owner.rawValue)] {
                // The flow id is field 4; it goes in the correlation id too (a flowEvent is never
                // answered) for boards built before field 4, which read it there.
                var header = EnvelopeHeader(
                    kind: .flowEvent, correlationID: flow.id.rawValue, source: source.name, target: owner.rawValue,
                    scope: source.scope, typeName: typeName, flowID: flow.id, trace: trace)
                if let traceState { header.traceState = traceState }
                send(Envelope(header: header, payload: payload), to: board.peer)
            }
        }
        return ran
    }

    /// `sendAction(action)`: bubbles from the sender's scope up through every ancestor; in each
    /// scope every live board subscribed to the action's name gets it (inner scopes first).
    ///
    /// When the sender waits, the broker waits too: each subscriber acknowledges once its handler
    /// ran, and the sender's `Delivery` counts the subscribers that did (a subscriber that dies or
    /// misses the deadline is not counted). So an acknowledged action was handled.
    ///
    /// With a NATS gateway, an action sent here goes to the fleet's other motherboards too (one
    /// more part of its delivery, counted by their subscribers); one that came from there
    /// (``exporter``) is delivered here only, from its scope if this manifest declares it, else
    /// in the root scope.
    func deliverAction(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, now) = (inbound.peer, inbound.now)
        let sender = inbound.sender
        let fromCluster = links.exporter != nil && peer == links.exporter
        var sendingScope = scope(of: envelope, sender: sender)
        if fromCluster, !scopes.contains(sendingScope) { sendingScope = .root }
        if let noScope = noScopeError(sendingScope) {
            return reply(to: envelope, from: peer, error: noScope)
        }
        if links.hasPassedHere(envelope.header.linkTrail) { return dropLoopedAction(envelope, from: peer, now: now) }
        // Each scope it reaches is a delivery of its own: a remote principal's action reaches
        // only the scopes the policy lets it send it in (the one it was sent in was judged at the gate).
        let subscribers = scopes.chain(from: sendingScope).filter { scope in
            guard let principal = inbound.principal, scope != sendingScope else { return true }
            return access.judge(principal, delivery: .action, target: ScopedName(scope: scope, name: envelope.header.typeName).description).decision
                .allowed
        }.flatMap { scope in
            registry.subscribers(of: envelope.header.typeName, in: scope).filter { $0.peer != peer }
        }
        // Past this motherboard's own scopes, the action bubbles on in the parent motherboard,
        // through at most `maximumLinkHops` motherboards.
        let goesUp =
            links.uplink != nil && links.uplink != peer && !fromCluster && (envelope.header.linkTrail?.count ?? 0) < HeaderCodec.maximumLinkHops
        let goesOut = links.exporter != nil && !fromCluster && peer != links.uplink
        let parts = subscribers.count + (goesUp ? 1 : 0) + (goesOut ? 1 : 0)
        let acknowledged = envelope.header.flags.contains(.replyExpected) && parts > 0
        let deliveryID =
            acknowledged
            ? replies.beginAction(from: peer, clientCorrelationID: envelope.header.correlationID, subscribers: parts) : 0
        let timeout = requestTimeout(milliseconds: envelope.header.timeoutMilliseconds)
        var header = envelope.header
        header.source = sender?.id.rawValue ?? ""
        header.scope = sendingScope
        for subscriber in subscribers {
            header.target = subscriber.id.rawValue
            subscriber.actionsDelivered += 1
            if acknowledged {
                header.correlationID = replies.expectActionPart(
                    deliveryID, board: subscriber.name, boardPeer: subscriber.peer, deadline: now.advanced(by: timeout))
            } else {
                header.flags.remove(.replyExpected)
                header.correlationID = 0
            }
            send(
                Envelope(header: header, payload: envelope.payload), to: subscriber.peer, forwardedFrom: peer,
                clientCorrelationID: envelope.header.correlationID)
        }
        if goesUp, let uplink = links.uplink {
            sendActionUp(header, payload: envelope.payload, deliveryID: acknowledged ? deliveryID : nil, timeout: timeout, to: uplink, now: now)
        }
        if goesOut, let exporter = links.exporter {
            sendActionPart(
                header, payload: envelope.payload, deliveryID: acknowledged ? deliveryID : nil, timeout: timeout, to: exporter, named: "nats",
                now: now)
        }
        if !acknowledged { reply(to: envelope, from: peer, with: Delivery(delivered: subscribers.count)) }
    }

    /// `complete(isDone)`: fires the board's completion flows exactly once, removes it from the
    /// registry and refuses later messages from that instance; its process then exits. Activating
    /// the id again starts a fresh instance.
    func complete(_ envelope: Envelope, _ inbound: Inbound) {
        let (peer, now) = (inbound.peer, inbound.now)
        guard let board = inbound.sender else {
            return reply(to: envelope, from: peer, error: BusError(.notRegistered, "only a registered board can complete"))
        }
        let completion = (try? PayloadCodec.decode(Completion.self, from: envelope.payload)) ?? Completion(isDone: true)
        // A gateway's connection goes on serving its other boards.
        if !board.sharesConnection { registry.retire(peer) }
        supervisor.completed(board.name)
        drop(board.name, reason: "completed (isDone: \(completion.isDone))")
        let ran = runFlows(
            .completion, from: board.name, typeName: Completion.busTypeName, payload: PayloadCodec.encodeOrEmpty(completion),
            trace: envelope.header.trace, traceState: envelope.header.traceState, now: now)
        reply(to: envelope, from: peer, with: Delivery(delivered: ran))
    }
}
