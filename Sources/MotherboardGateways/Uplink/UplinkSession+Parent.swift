import BusCore
import Foundation
import Logging

/// What the parent sends: answers to what went up, and requests for the served boards.
extension UplinkSession {
    // MARK: - From the parent

    /// On the link socket: answers to what went up, and the pongs.
    package func fromParentLink(_ envelope: Envelope, now: ContinuousClock.Instant) {
        lastHeard = now
        if let chainRequest, envelope.header.correlationID == chainRequest { return chainAnswered(envelope) }
        guard envelope.header.correlationID != 0, let pending = up.removeValue(forKey: envelope.header.correlationID) else { return }
        var answer = envelope
        answer.header.correlationID = pending.correlationID
        answerLocal(answer)
    }

    /// Asks the parent, once the link is up and the uplink knows its motherboard's link id,
    /// whether attaching there makes a cycle (`link.chain`).
    func askChain() {
        guard let localLinkID, !cycle else { return }
        let id = ids.make()
        chainRequest = id
        var header = EnvelopeHeader(kind: .control, correlationID: id, typeName: ControlOperation.linkChain)
        header.flags.insert(.replyExpected)
        _ = try? links.toParent(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(LinkChain(ids: [localLinkID]))))
    }

    /// The parent's chain goes to the local motherboard (what is above it, for the motherboards
    /// that attach to it); a refusal (a cycle) ends what this link serves. A parent that does not
    /// know `link.chain` (an older one) answers otherwise: nothing changes.
    func chainAnswered(_ envelope: Envelope) {
        chainRequest = nil
        if envelope.header.kind == .reply, let chain = try? PayloadCodec.decode(LinkChain.self, from: envelope.payload) {
            let header = EnvelopeHeader(kind: .control, typeName: ControlOperation.uplinkChain)
            links.toLocal(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(chain)))
        } else if let error = envelope.carriedError, error.code == .badArgument {
            cycle = true
            logger.error(
                "not attached: the parent refused this motherboard, which would make a cycle of motherboards; fix --attach",
                metadata: ["parent": "\(endpoint)", "answer": "\(error.message)"])
            boards.removeAll()
        }
    }

    /// For a served board: the parent's requests, heartbeats, registration answers.
    func fromParent(_ envelope: Envelope, board name: ScopedName, now: ContinuousClock.Instant) {
        let header = envelope.header
        switch boards.read(envelope, for: name, now: now, ids: &ids) {
        case nil, .ignored:
            return
        case .accepted:
            return logger.info("board registered with the parent", metadata: ["board": "\(name)"])
        case .refused(let error, let isNews):
            // Not known (a cut link, a restarted parent): registered again at once; refused: at the next tick.
            if isNews { logger.warning("the parent does not have this board registered", metadata: ["board": "\(name)", "answer": "\(error)"]) }
            return
        case .request:
            break
        }
        switch header.kind {
        case .command, .activate, .dispatch, .store:
            forwardDown(envelope, board: name, now: now)
        default:
            // Nothing else is the parent's to send a board (it never sends actions to the boards
            // it knows through the link, which register without them).
            guard header.flags.contains(.replyExpected), header.correlationID != 0 else { return }
            let error = BusError(.malformed, "a \(header.kind) is not routed across the link to board '\(name)'")
            send(Envelope.error(error, correlationID: header.correlationID), as: name)
        }
    }

    /// A request of the parent for a board of a served scope, handed to the local motherboard.
    func forwardDown(_ envelope: Envelope, board name: ScopedName, now: ContinuousClock.Instant) {
        let header = envelope.header
        var request = envelope
        request.header.scope = name.scope
        if header.flags.contains(.replyExpected) && header.correlationID != 0 {
            let id = ids.make()
            let timeout = header.timeoutMilliseconds > 0 ? Duration.milliseconds(Int64(header.timeoutMilliseconds)) : .seconds(25)
            down[id] = Pending(board: name, correlationID: header.correlationID, deadline: now.advanced(by: timeout))
            request.header.correlationID = id
        }
        answerLocal(request)
    }
}
