import BusCore
import BusNATS
import Foundation
import Logging

/// What comes from the cluster: requests for this motherboard's boards and stores, their
/// answers, actions, outputs, store changes.
extension NATSSession {
    // MARK: - From the cluster

    func fromCluster(_ message: NATSMessage, now: ContinuousClock.Instant) {
        switch roles[message.subscription] {
        case .announce: heardAnnouncement(message, now: now)
        case .withdraw:
            // Only the host that announced the instance withdraws it.
            guard let gone = try? PayloadCodec.decode(NATSInstance.self, from: message.payload), let peer = peers[gone.instance],
                subjects.host(ofMembership: message.subject) == peer.announcement.host
            else { return }
            peers[gone.instance] = nil
            logger.info("a motherboard of the fleet left", metadata: ["host": "\(peer.announcement.host)"])
            for id in gatherings.keys { heardFrom(gone.instance, delivered: 0, gathering: id) }
            reconcile(now: now)
        case .hello:
            announceSoon = true
        case .inbox:
            answered(message)
        case .actions:
            actionFromCluster(message, now: now)
        case nil:
            if let (owner, store) = changeSubscriptions[message.subscription] {
                // A change of a store of another motherboard: published here as its owner's.
                var header = EnvelopeHeader(kind: .store, source: owner.name, target: store, scope: owner.scope, typeName: StoreOperation.change)
                if let type = message.headers[NATSHeader.contentType], !type.isEmpty, type.utf8.count <= 255 { header.contentType = type }
                links.sendToBroker(Envelope(header: header, payload: message.payload))
            } else if let board = outputSubscriptions[message.subscription] {
                outputFromCluster(message, board: board)
            } else {
                request(message, now: now)
            }
        }
    }

    /// An action of another motherboard: delivered here (the broker answers with how many
    /// subscribers took it; this motherboard never sends it on).
    func actionFromCluster(_ message: NATSMessage, now: ContinuousClock.Instant) {
        guard let action = subjects.action(message.subject) else { return refuse(message, BusError(.malformed, "not an action subject")) }
        handToBroker(EnvelopeHeader(kind: .action, scope: action.scope, typeName: action.name), message, now: now)
    }

    /// What came from the cluster goes to the broker on behalf of the cluster's principal; its
    /// answer is awaited (at most ``NATSGatewaySettings/maximumInFlight`` at once: past that, or
    /// when the broker cannot take it, the asker hears why at once).
    func handToBroker(_ header: EnvelopeHeader, _ message: NATSMessage, now: ContinuousClock.Instant) {
        var header = header
        header.onBehalfOf = settings.principal
        let timeout = readHeaders(message.headers, into: &header)
        // An answer goes to an inbox, never onto the fleet's own subjects, where this motherboard's
        // permissions would make it an announcement or an action: such a request is dropped.
        if let reply = message.reply, !Self.isAnswerable(reply) {
            return logger.debug("a request whose reply subject is the fleet's own dropped", metadata: ["reply": "\(reply.escapedForDisplay())"])
        }
        if let reply = message.reply {
            guard incoming.count < settings.maximumInFlight else {
                return refuse(
                    message,
                    BusError(.busy, "\(settings.host) has \(settings.maximumInFlight) requests from the cluster in flight already; try again later"))
            }
            let id = ids.make()
            header.correlationID = id
            header.flags.insert(.replyExpected)
            incoming[id] = Incoming(reply: reply, deadline: now.advanced(by: timeout), trace: header.trace, traceState: header.traceState)
        }
        let refusal: String?
        do {
            refusal = try links.toMotherboard(Envelope(header: header, payload: message.payload)) ? nil : "its queue is full"
        } catch {
            refusal = "\(error)"
        }
        guard let refusal, header.correlationID != 0, let pending = incoming.removeValue(forKey: header.correlationID) else { return }
        answerCluster(
            pending, Envelope.error(BusError(.busy, "the motherboard on \(settings.host) cannot take it now: \(refusal)"), correlationID: 0))
    }

    /// Whether an answer may go to `subject`: a request's reply subject, outside the fleets' own.
    static func isAnswerable(_ subject: String) -> Bool {
        !subject.isEmpty && !subject.hasPrefix("boardbus.") && subject != "boardbus"
    }

    /// An output of a board of another motherboard: it speaks here as that board, and this
    /// motherboard's flows from it run.
    func outputFromCluster(_ message: NATSMessage, board name: ScopedName) {
        guard remote[name]?.link.registered == true else { return }
        let tokens = message.subject.split(separator: ".", omittingEmptySubsequences: false)
        guard let last = tokens.last, let typeName = NATSSubjects.untoken(last), !typeName.isEmpty else { return }
        var header = EnvelopeHeader(kind: .output, source: name.name, scope: name.scope, typeName: typeName)
        _ = readHeaders(message.headers, into: &header)
        links.sendToBroker(Envelope(header: header, payload: message.payload))
    }

    /// The BoardBus fields a message's NATS headers carry; returns how long its sender waits.
    /// A field that would make the header one the codec refuses is left out (the message goes on
    /// without it), as PROTOCOL §10 says.
    func readHeaders(_ headers: [String: String], into header: inout EnvelopeHeader) -> Duration {
        var timeout = Self.defaultTimeout
        if let text = headers[NATSHeader.timeout], let milliseconds = UInt32(text), milliseconds > 0 {
            header.timeoutMilliseconds = milliseconds
            timeout = .milliseconds(Int64(milliseconds))
        }
        func keep(_ change: (inout EnvelopeHeader) -> Void) {
            var changed = header
            change(&changed)
            if (try? HeaderCodec.validatedSize(changed)) != nil { header = changed }
        }
        if let text = headers[NATSHeader.traceparent], let trace = TraceContext(traceparent: text) {
            keep { $0.trace = trace }
            // A trace state goes with its trace only.
            if let state = headers[NATSHeader.tracestate], TraceContext.isValidState(state.utf8) { keep { $0.traceState = state } }
        }
        if let type = headers[NATSHeader.contentType], !type.isEmpty { keep { $0.contentType = type } }
        if let id = headers[NATSHeader.dispatchID], !id.isEmpty { keep { $0.dispatchID = id } }
        return timeout
    }

    /// How long the sender of `header` waits (its timeout, else the default).
    static func timeout(of header: EnvelopeHeader) -> Duration {
        header.timeoutMilliseconds > 0 ? .milliseconds(Int64(header.timeoutMilliseconds)) : defaultTimeout
    }

    /// The NATS headers of a BoardBus header's fields.
    func natsHeaders(_ header: EnvelopeHeader) -> [(String, String)] {
        var headers: [(String, String)] = [(NATSHeader.via, settings.host)]
        if header.timeoutMilliseconds > 0 { headers.append((NATSHeader.timeout, "\(header.timeoutMilliseconds)")) }
        if let trace = header.trace { headers.append((NATSHeader.traceparent, trace.traceparent)) }
        if let state = header.traceState { headers.append((NATSHeader.tracestate, state)) }
        if let type = header.contentType { headers.append((NATSHeader.contentType, type)) }
        if let id = header.dispatchID { headers.append((NATSHeader.dispatchID, id)) }
        if !header.source.isEmpty { headers.append((NATSHeader.source, header.source)) }
        return headers
    }

    /// An action sent here goes to every other motherboard; when its sender waits, the answers
    /// of those that announced themselves are summed (those that do not answer in three quarters
    /// of the time count none).
    func actionToCluster(_ envelope: Envelope, now: ContinuousClock.Instant) {
        let header = envelope.header
        let subject = subjects.action(header.typeName, scope: header.scope, host: settings.host)
        let waits = header.flags.contains(.replyExpected) && header.correlationID != 0
        guard waits else {
            try? links.publish(subject, headers: natsHeaders(header), payload: envelope.payload)
            return
        }
        // Those that deliver actions answer; with none, the others still hear it.
        let answering = Set(peers.filter { $0.value.announcement.actions == true }.keys)
        guard !answering.isEmpty else {
            try? links.publish(subject, headers: natsHeaders(header), payload: envelope.payload)
            return answerAction(header.correlationID, delivered: 0)
        }
        let id = ids.make()
        let token = Self.makeToken()
        let timeout = Self.timeout(of: header)
        gatherings[id] = Gathering(
            token: token, correlationID: header.correlationID, waiting: answering, delivered: 0, deadline: now.advanced(by: timeout * 3 / 4))
        do {
            try links.publish(subject, reply: "\(inboxPrefix).\(id)-\(token)", headers: natsHeaders(header), payload: envelope.payload)
        } catch {
            gatherings[id] = nil
            answerAction(header.correlationID, delivered: 0)
        }
    }

    /// Motherboard `instance` answered (or left) for the action gathered under `id`.
    func heardFrom(_ instance: String, delivered: Int, gathering id: UInt64) {
        guard var gathering = gatherings[id], gathering.waiting.remove(instance) != nil else { return }
        gathering.delivered = min(gathering.delivered + delivered, Self.maximumDeliveredPerPeer * Self.maximumPeers)
        if gathering.waiting.isEmpty {
            gatherings[id] = nil
            answerAction(gathering.correlationID, delivered: gathering.delivered)
        } else {
            gatherings[id] = gathering
        }
    }

    func answerAction(_ correlationID: UInt64, delivered: Int) {
        let header = EnvelopeHeader(kind: .reply, correlationID: correlationID)
        _ = try? links.toMotherboard(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(Delivery(delivered: delivered))))
    }

    /// A request for a board (or store) served here: handed to the broker as a client's.
    func request(_ message: NATSMessage, now: ContinuousClock.Instant) {
        guard let request = subjects.request(message.subject) else {
            return refuse(message, BusError(.malformed, "'\(message.subject)' is not a BoardBus request subject"))
        }
        // Only what this motherboard serves to the cluster (a board that just left is refused).
        let served =
            request.isStore
            ? servedStores[ScopedName(scope: request.scope, name: request.name)] != nil
            : exported[ScopedName(scope: request.scope, name: request.name)] != nil
        guard served else {
            let name = ScopedName(scope: request.scope, name: request.name)
            return refuse(message, BusError(request.isStore ? .noSuchStore : .noSuchBoard, "'\(name)' is not served by \(settings.host)"))
        }
        if request.kind == .store, [StoreOperation.subscribe, StoreOperation.renew, StoreOperation.unsubscribe].contains(request.typeName) {
            return refuse(
                message,
                BusError(
                    .badArgument,
                    "a store's changes are published on \(subjects.changes(store: request.name, scope: request.scope, host: settings.host)): subscribe there, and ask 'state' for a snapshot"
                ))
        }
        handToBroker(EnvelopeHeader(kind: request.kind, target: request.name, scope: request.scope, typeName: request.typeName), message, now: now)
    }

    func refuse(_ message: NATSMessage, _ error: BusError) {
        guard let reply = message.reply, Self.isAnswerable(reply) else { return }
        answerCluster(Incoming(reply: reply, deadline: .now, trace: nil, traceState: nil), Envelope.error(error, correlationID: 0))
    }

    /// The broker's answer to a request from the cluster goes to the requester's inbox.
    func answerCluster(_ pending: Incoming, _ answer: Envelope) {
        guard let reply = pending.reply else { return }
        var headers: [(String, String)] = [(NATSHeader.instance, instance)]
        if answer.header.kind == .error {
            headers.append((NATSHeader.status, answer.carriedError?.code.name ?? answer.header.typeName))
        } else {
            headers.append((NATSHeader.status, "ok"))
        }
        if let type = answer.header.contentType { headers.append((NATSHeader.contentType, type)) }
        if let trace = answer.header.trace ?? pending.trace { headers.append((NATSHeader.traceparent, trace.traceparent)) }
        if let state = answer.header.traceState ?? pending.traceState { headers.append((NATSHeader.tracestate, state)) }
        do {
            try links.publish(reply, headers: headers, payload: answer.payload)
        } catch let error as BusError where error.code == .tooLarge && answer.header.kind != .error {
            // The requester hears why at once rather than waiting out its deadline.
            let refusal = BusError(.tooLarge, "the answer is \(answer.payload.count) bytes: \(error.message)")
            answerCluster(pending, Envelope.error(refusal, correlationID: answer.header.correlationID))
        } catch {
            logger.debug("answer to the cluster not sent", metadata: ["error": "\(error)"])
        }
    }

    /// An answer on this motherboard's inbox: to the board request it sent.
    func answered(_ message: NATSMessage) {
        // `<number>-<token>`: an answer whose token is not the request's is nobody's.
        guard let last = message.subject.split(separator: ".").last, let dash = last.firstIndex(of: "-"),
            let number = UInt64(last[..<dash])
        else { return }
        let token = last[last.index(after: dash)...]
        if let gathering = gatherings[number] {
            guard gathering.token == token else { return }
            // Nobody subscribes to actions: none will answer.
            if message.isNoResponders {
                gatherings[number] = nil
                return answerAction(gathering.correlationID, delivered: gathering.delivered)
            }
            // An answer to an action: how many subscribers its motherboard reached.
            guard let from = message.headers[NATSHeader.instance] else { return }
            let delivered = (try? PayloadCodec.decode(Delivery.self, from: message.payload))?.delivered ?? 0
            return heardFrom(from, delivered: min(max(0, delivered), Self.maximumDeliveredPerPeer), gathering: number)
        }
        guard let pending = outgoing[number], pending.token == token else { return }
        outgoing[number] = nil
        let answer: Envelope
        if message.isNoResponders {
            answer = Envelope.error(
                BusError(.unreachable, "no motherboard of the NATS cluster serves '\(pending.board)' now"), correlationID: pending.correlationID)
        } else if let status = message.headers[NATSHeader.status], status != "ok" {
            var error = Envelope(
                header: EnvelopeHeader(kind: .error, correlationID: pending.correlationID, typeName: status), payload: message.payload)
            if error.carriedError == nil {
                error = Envelope.error(BusError(BusError.Code(name: status), status), correlationID: pending.correlationID)
            }
            answer = error
        } else {
            var reply = Envelope(header: EnvelopeHeader(kind: .reply, correlationID: pending.correlationID), payload: message.payload)
            if let type = message.headers[NATSHeader.contentType], !type.isEmpty, type.utf8.count <= 255 { reply.header.contentType = type }
            if let text = message.headers[NATSHeader.traceparent] { reply.header.trace = TraceContext(traceparent: text) }
            answer = reply
        }
        sendAsBoard(pending.board, answer)
    }
}
