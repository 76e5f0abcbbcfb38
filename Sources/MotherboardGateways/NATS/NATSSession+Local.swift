import BusCore
import BusNATS
import Foundation
import Logging

/// What comes from this motherboard: its boards, and the requests of its clients for boards of
/// other motherboards.
extension NATSSession {
    // MARK: - From this motherboard

    func fromOwnMotherboard(_ envelope: Envelope, now: ContinuousClock.Instant) {
        switch attachment.read(envelope) {
        case .attached:
            return logger.info("NATS gateway attached to its motherboard", metadata: ["fleet": "\(subjects.fleet)", "host": "\(settings.host)"])
        case .refused(let text):
            return logger.error("the motherboard refused its NATS gateway", metadata: ["error": "\(text)"])
        case nil:
            break
        }
        let header = envelope.header
        switch header.kind {
        case .control where header.typeName == ControlOperation.exportBoard:
            guard let registration = try? PayloadCodec.decode(Registration.self, from: envelope.payload) else { return }
            localBoards[ScopedName(scope: registration.scope, name: registration.id.rawValue)] = registration
            reconcile(now: now)
        case .control where header.typeName == ControlOperation.exportGone:
            guard let gone = try? PayloadCodec.decode(StatusRequest.self, from: envelope.payload) else { return }
            let name = ScopedName(scope: gone.scope, name: gone.id.rawValue)
            localBoards[name] = nil
            reconcile(now: now)
            // Another host's board of that id, refused while the local one held it: now at once.
            if remote[name]?.link.registered == false { remote.register(name, now: now, ids: &ids) }
        case .reply, .error:
            guard let pending = incoming.removeValue(forKey: header.correlationID) else { return }
            answerCluster(pending, envelope)
        case .action:
            actionToCluster(envelope, now: now)
        case .output:
            // Only the outputs of a board this motherboard serves to the cluster.
            guard exported[ScopedName(scope: header.scope, name: header.source)] != nil else { return }
            try? links.publish(
                subjects.output(header.source, scope: header.scope, typeName: header.typeName, host: settings.host), headers: natsHeaders(header),
                payload: envelope.payload)
        case .store where header.typeName == StoreOperation.change:
            // A change of a local store served to the cluster, by its owner here (not one that came
            // from the cluster, which would go round for ever).
            guard servedStores[ScopedName(scope: header.scope, name: header.target)] != nil,
                exported[ScopedName(scope: header.scope, name: header.source)]?.registration.stores.contains(header.target) == true
            else { return }
            var headers: [(String, String)] = []
            if let type = header.contentType { headers.append((NATSHeader.contentType, type)) }
            try? links.publish(
                subjects.changes(store: header.target, scope: header.scope, host: settings.host), headers: headers, payload: envelope.payload)
        default:
            return
        }
    }

    /// A message of the broker for a board of another motherboard: registration answers,
    /// heartbeats, and requests, sent on through NATS.
    func forServedBoard(_ envelope: Envelope, now: ContinuousClock.Instant) {
        guard let name = remote.addressee(of: envelope.header) else { return }
        switch remote.read(envelope, for: name, now: now, ids: &ids) {
        case nil, .ignored:
            return
        case .accepted:
            logger.info("board of another host registered", metadata: ["board": "\(name)", "host": "\(remote[name]?.link.registration.host ?? "")"])
        case .refused(let error, let isNews):
            if isNews { logger.warning("board of another host not registered here", metadata: ["board": "\(name)", "answer": "\(error)"]) }
        case .request:
            sendToCluster(envelope, board: name, now: now)
        }
    }

    /// A request of this motherboard for a board of another: a NATS request on its subject.
    func sendToCluster(_ envelope: Envelope, board name: ScopedName, now: ContinuousClock.Instant) {
        let header = envelope.header
        guard NATSSubjects.requestKinds.contains(header.kind) else {
            guard header.flags.contains(.replyExpected), header.correlationID != 0 else { return }
            return sendAsBoard(
                name,
                Envelope.error(BusError(.malformed, "a \(header.kind) is not sent through NATS to '\(name)'"), correlationID: header.correlationID))
        }
        let isStore = header.kind == .dispatch || header.kind == .store
        let subject =
            isStore
            ? subjects.store(header.target, scope: name.scope, kind: header.kind, typeName: header.typeName)
            : subjects.board(name.name, scope: name.scope, kind: header.kind, typeName: header.typeName)
        let headers = natsHeaders(header)
        var reply: (id: UInt64, subject: String)?
        if header.flags.contains(.replyExpected), header.correlationID != 0 {
            let id = ids.make()
            let token = Self.makeToken()
            reply = (id, "\(inboxPrefix).\(id)-\(token)")
            outgoing[id] = Outgoing(
                token: token, board: name, correlationID: header.correlationID, deadline: now.advanced(by: Self.timeout(of: header)),
                epoch: links.disconnections)
        }
        do {
            try links.publish(subject, reply: reply?.subject, headers: headers, payload: envelope.payload)
        } catch {
            if let id = reply?.id, let pending = outgoing.removeValue(forKey: id) {
                let failure =
                    (error as? BusError).flatMap { $0.code == .tooLarge ? $0 : nil }
                    ?? BusError(.unreachable, "cannot send to the NATS cluster: \(error)")
                sendAsBoard(name, Envelope.error(failure, correlationID: pending.correlationID))
            }
        }
    }

    /// To the broker, as board `name`.
    func sendAsBoard(_ name: ScopedName, _ envelope: Envelope) {
        var envelope = envelope
        envelope.header.source = name.name
        envelope.header.scope = name.scope
        links.sendToBroker(envelope)
    }
}
