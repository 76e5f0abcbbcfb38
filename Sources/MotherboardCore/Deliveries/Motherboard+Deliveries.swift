import BusCore
import Foundation

/// At-least-once activations (PROTOCOL 5.3): kept in the ``DeliveryLedger`` until their board
/// answers them, delivered again to its next instance when it ends first, dead-lettered after
/// the board's `maxDeliveries`.
extension Motherboard {
    /// How many deliveries the manifest gives an activation of `name`, when it takes them at
    /// least once (looked up once, when the board registers: ``LiveBoard/maxDeliveries``).
    func maxDeliveries(of name: ScopedName) -> Int? {
        guard let entry = manifest.board(named: name.name, scope: name.scope), entry.delivery == .atLeastOnce else { return nil }
        return entry.maxDeliveries
    }

    /// Hands an activation to a live at-least-once board: a new one is put on the ledger (or
    /// refused `busy` when the ledger is full); one delivered again keeps its id. The board sees
    /// the ledger's id as correlation id and the delivery count in header field 7.
    func deliverAtLeastOnce(_ envelope: Envelope, to target: LiveBoard, client: PeerID?) {
        var id = envelope.header.correlationID
        if envelope.header.deliveryCount == nil || !DeliveryLedger.isLedgerID(id) || deliveries.ledger.pending[id]?.board != target.name {
            guard let added = deliveries.ledger.add(envelope, for: target.name, client: client) else {
                counters.undeliverable += 1
                logger.warning("at-least-once activation refused: its ledger is full", metadata: ["board": "\(target.name)"])
                if let client {
                    reply(
                        to: envelope, from: client,
                        error: BusError(.busy, "board '\(target.name)' holds as many unacknowledged activations as it may"))
                }
                return
            }
            id = added
        }
        guard let count = deliveries.ledger.delivered(id), let entry = deliveries.ledger.pending[id] else { return }
        do {
            try deliveries.journal?.put(JournaledDelivery(id: id, board: target.name, deliveries: count, envelope: entry.envelope))
        } catch {
            logger.error("cannot journal an at-least-once activation", metadata: ["board": "\(target.name)", "error": "\(error)"])
            // A first delivery is refused rather than handed over unkept; a later one goes on (its
            // earlier record stands).
            if count == 1 {
                deliveries.ledger.remove(id)
                counters.undeliverable += 1
                if let client {
                    reply(to: envelope, from: client, error: BusError(.storageFailed, "the broker cannot keep the activation: \(error)"))
                }
                return
            }
        }
        var header = envelope.header
        header.correlationID = id
        header.flags.insert(.replyExpected)
        header.deliveryCount = UInt32(clamping: count)
        if count > 1 { counters.redeliveries += 1 }
        send(Envelope(header: header, payload: envelope.payload), to: target.peer, forwardedFrom: client)
    }

    /// The error codes with which a board gives an activation up at once (it will not do better
    /// on another delivery); any other error is a failure it is delivered again after.
    static let givingUpCodes: Set<BusError.Code> = [
        .typeMismatch, .badArgument, .unknownCommand, .rejected, .malformed, .unsupportedContentType, .forbidden, .unknownAction,
    ]

    /// How long an activation of `name` its board failed for the `delivery`th time waits before
    /// it is delivered again (the manifest's `backoff`).
    func retryDelay(of name: ScopedName, afterDelivery delivery: Int) -> Duration {
        let backoff = manifest.board(named: name.name, scope: name.scope)?.backoff ?? FleetManifest.Board.defaultBackoff
        let seconds = backoff.isEmpty ? 0 : backoff[min(max(delivery, 1), backoff.count) - 1]
        return .milliseconds(Int64(seconds * 1_000))
    }

    /// A board answered an at-least-once activation. A reply, or an error it gives up with
    /// (``givingUpCodes``; a dead letter then), is done with, and its sender, if it waits, gets the
    /// answer. Any other error is a failure: the activation is delivered again after the board's
    /// backoff, until its deliveries are spent (a dead letter, its sender answered with the last
    /// error). Returns false when `envelope` answers nothing on the ledger.
    func acknowledgeDelivery(_ envelope: Envelope, from sender: LiveBoard?, now: ContinuousClock.Instant) -> Bool {
        let id = envelope.header.correlationID
        guard DeliveryLedger.isLedgerID(id), let sender else { return false }
        if envelope.header.kind == .error, let held = deliveries.ledger.pending[id], held.board == sender.name, !held.taken {
            failDelivery(held, answer: envelope, maxDeliveries: sender.maxDeliveries ?? FleetManifest.Board.defaultMaxDeliveries, now: now)
            return true
        }
        guard let entry = deliveries.ledger.acknowledge(id, by: sender.name) else { return true }
        deliveries.journal?.remove(id)
        relayAnswer(envelope, of: entry, from: sender)
        return true
    }

    /// The board's error answer to `held`: a retry after its backoff, or a dead letter.
    private func failDelivery(_ held: DeliveryLedger.Pending, answer: Envelope, maxDeliveries: Int, now: ContinuousClock.Instant) {
        let decoded = try? PayloadCodec.decode(BusError.self, from: answer.payload)
        let error = decoded ?? BusError(.handlerFailed, "an error answer without a BusError")
        let what = "\(error.code.name): \(error.message.escapedForDisplay(limit: 300))"
        let givesUp = Self.givingUpCodes.contains(error.code)
        guard givesUp || held.deliveries >= maxDeliveries else {
            let delay = retryDelay(of: held.board, afterDelivery: held.deliveries)
            deliveries.ledger.scheduleRetry(held.id, at: now + delay)
            let retryAt = Date().timeIntervalSince1970 + Double(delay.wholeMilliseconds) / 1_000
            // Unjournaled (the journal cannot be written), its last record stands: a broker
            // started again delivers it without waiting, which at least once allows.
            try? deliveries.journal?.put(
                JournaledDelivery(id: held.id, board: held.board, deliveries: held.deliveries, envelope: held.envelope, retryAt: retryAt))
            counters.failedDeliveries += 1
            logger.notice(
                "at-least-once activation failed; delivered again after its backoff",
                metadata: ["board": "\(held.board)", "delivery": "\(held.deliveries)", "retryIn": "\(delay)", "error": "\(what)"])
            return
        }
        let why = givesUp ? "its board gave it up (\(what))" : "its board failed it \(held.deliveries) time(s) (last: \(what))"
        guard let letter = deadLetter(held.id, reason: why, lastError: error), let sender = registry[held.board] else { return }
        var told = answer
        if !givesUp, let decoded {
            let failure = BusError(
                decoded.code, "\(decoded.message) (after \(held.deliveries) deliveries: dead letter \(letter.id), busctl dead-letters)")
            told = Envelope(header: answer.header, payload: PayloadCodec.encodeOrEmpty(failure))
        }
        relayAnswer(told, of: held, from: sender)
    }

    /// Sends a board's answer to an activation on the ledger to the sender that waits for it.
    private func relayAnswer(_ envelope: Envelope, of entry: DeliveryLedger.Pending, from sender: LiveBoard) {
        if let client = entry.client, entry.envelope.header.flags.contains(.replyExpected) {
            var header = envelope.header
            header.correlationID = entry.clientCorrelationID
            header.source = sender.id.rawValue
            header.target = ""
            header.deliveryCount = nil
            send(Envelope(header: header, payload: envelope.payload), to: client)
        }
    }

    /// `board` ended holding unanswered at-least-once activations: each goes to its next instance
    /// (started as an on-demand activation would start it), or, past its deliveries, on the
    /// dead-letter list (its waiting sender told so).
    func redeliverEndedHolding(now: ContinuousClock.Instant) {
        for (board, reason) in deliveries.takeEndedHolding() { redeliver(heldBy: board, reason: reason, now: now) }
    }

    /// The failed activations whose backoff is over are delivered again: to their live board, or
    /// to one started for them as an on-demand activation would start it.
    func redeliverDueRetries(now: ContinuousClock.Instant) {
        for held in deliveries.ledger.takeDueRetries(now: now) { deliverAgain(held, now: now) }
    }

    /// Hands `held` to its board once more, under its ledger id with its count one higher: to the
    /// live board, or to one started for it as an on-demand activation would start it.
    private func deliverAgain(_ held: DeliveryLedger.Pending, now: ContinuousClock.Instant) {
        var header = held.envelope.header
        header.correlationID = held.id
        header.deliveryCount = UInt32(clamping: held.deliveries + 1)
        activate(held.board, with: Envelope(header: header, payload: held.envelope.payload), client: nil, now: now)
    }

    func redeliver(heldBy board: LiveBoard, reason: String, now: ContinuousClock.Instant) {
        guard !deliveries.ledger.pending.isEmpty, let maxDeliveries = board.maxDeliveries else { return }
        redeliver(deliveries.ledger.held(by: board.name), of: board.name, maxDeliveries: maxDeliveries, reason: reason, now: now)
    }

    /// Restores what a broker before this one journaled: its activations go to their boards
    /// when they register (or, for those not live within `grace`, are activated then: started
    /// on demand, else dead-lettered); no sender waits for them any more. Dead letters past the
    /// list's bounds are taken off the journal too (set ``Deliveries/journal`` first).
    package func restoreDeliveries(
        _ entries: [JournaledDelivery], deadLetters: [(DeadLetter, Envelope)], now: ContinuousClock.Instant, grace: Duration = .seconds(5)
    ) {
        let dropped = deliveries.ledger.restore(entries, deadLetters: deadLetters, now: now)
        for letter in dropped { deliveries.journal?.removeDeadLetter(letter.id) }
        if !dropped.isEmpty {
            logger.warning("restored dead letters left out, past the list's bounds", metadata: ["letters": "\(dropped.count)"])
        }
        deliveries.expectRestored(Set(entries.map(\.board)), until: now + grace)
        if !entries.isEmpty {
            logger.notice(
                "at-least-once activations restored", metadata: ["activations": "\(entries.count)", "boards": "\(deliveries.restoredHolders.count)"])
        }
    }

    /// A board holds restored activations: they are delivered (again) to it, or started.
    func redeliverRestored(_ name: ScopedName, now: ContinuousClock.Instant) {
        guard deliveries.restoredHolders.remove(name) != nil else { return }
        let maxDeliveries = maxDeliveries(of: name) ?? FleetManifest.Board.defaultMaxDeliveries
        redeliver(deliveries.ledger.held(by: name), of: name, maxDeliveries: maxDeliveries, reason: "the broker restarted", now: now)
    }

    private func redeliver(
        _ pending: [DeliveryLedger.Pending], of name: ScopedName, maxDeliveries: Int, reason: String, now: ContinuousClock.Instant
    ) {
        for held in pending {
            guard held.deliveries < maxDeliveries else {
                let why = "its board ended \(held.deliveries) time(s) while holding it (last: \(reason))"
                guard let letter = deadLetter(held.id, reason: why) else { continue }
                if let client = held.client {
                    reply(
                        to: held.envelope, from: client,
                        error: BusError(
                            .outcomeUnknown, "board '\(name)' \(why); the activation is dead letter \(letter.id) (busctl dead-letters)"))
                }
                continue
            }
            logger.notice(
                "activation delivered again", metadata: ["board": "\(name)", "delivery": "\(held.deliveries + 1)", "after": "\(reason)"])
            deliverAgain(held, now: now)
        }
    }

    /// `delivery.taken`: the board took the activation; it is no longer journaled nor delivered
    /// again, and its answer, when it comes, still goes to its sender.
    func takeDelivery(_ envelope: Envelope, from peer: PeerID) throws {
        let request = try PayloadCodec.decode(DeliveryTaken.self, from: envelope.payload)
        guard let board = sender(of: peer, envelope), deliveries.ledger.take(request.id, by: board.name) else {
            throw BusError(.badArgument, "no at-least-once activation \(request.id) was handed to this board")
        }
        deliveries.journal?.remove(request.id)
        reply(to: envelope, from: peer, with: Delivery(delivered: 1))
    }

    /// `input.refused`: a board refused an activation nobody waited for; counted on the board
    /// (`busctl status`), in `boardbus_refused_inputs_total`, and logged (once a second at most).
    func noteRefusedInput(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) throws {
        let report = try PayloadCodec.decode(InputRefused.self, from: envelope.payload)
        guard let board = sender(of: peer, envelope) else { return }
        board.refusedInputs += 1
        let what = "\(report.type.escapedForDisplay(limit: 200)): \(report.error.code.name): \(report.error.message.escapedForDisplay(limit: 300))"
        board.lastRefusedInput = what
        counters.refusedInputs += 1
        if let refused = deliveries.refusedInputLog.note(now: now) {
            logger.warning(
                "a board refused an input nobody waited for", metadata: ["board": "\(board.name)", "input": "\(what)", "refused": "\(refused)"])
        }
    }

    /// A board ended with activations it had taken and not answered: their senders learn that
    /// whether they were carried out is unknown; they are not delivered again.
    func forgetTaken(by board: LiveBoard, reason: String) {
        for entry in deliveries.ledger.removeTaken(by: board.name) {
            guard let client = entry.client else { continue }
            reply(
                to: entry.envelope, from: client,
                error: BusError(
                    .outcomeUnknown,
                    "board '\(board.name)' took the activation and stopped before it answered (\(reason)); whether it was carried out is unknown"))
        }
    }

    /// Puts `id` on the dead-letter list: counted and logged. `lastError`: what its board answered
    /// its last delivery with, when it answered one.
    func deadLetter(_ id: UInt64, reason: String, lastError: BusError? = nil) -> DeadLetter? {
        guard
            let (entry, letter, dropped) = deliveries.ledger.deadLetter(
                id, reason: reason, time: Date().timeIntervalSince1970, lastError: lastError)
        else { return nil }
        deliveries.journal?.remove(id)
        deliveries.journal?.putDeadLetter(letter, envelope: entry.envelope)
        for letter in dropped { deliveries.journal?.removeDeadLetter(letter.id) }
        if !dropped.isEmpty {
            logger.warning("dead letters dropped to keep the list within its bounds", metadata: ["letters": "\(dropped.map(\.id))"])
        }
        counters.deadLettered += 1
        let board = ScopedName(scope: letter.scope, name: letter.board.rawValue)
        logger.error(
            "activation dead-lettered", metadata: ["board": "\(board)", "id": "\(letter.id)", "type": "\(letter.type)", "reason": "\(reason)"])
        return letter
    }

    /// `dead-letters.replay`: the letter is delivered again as a new activation (its count starts
    /// over). One its board cannot take now (it reached its restart limit, is no board, or its
    /// share of the ledger or its start's queue is spent) stays on the list, and the replay is
    /// refused with why. Once taken off, it is on the ledger: should its board's start fail
    /// after all, it goes back on the list (under a new id) rather than being lost.
    func replayDeadLetter(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) throws {
        let kept = try keptDeadLetter(askedFor: envelope)
        let name = ScopedName(scope: kept.letter.scope, name: kept.letter.board.rawValue)
        if let refusal = replayRefusal(name, bytes: kept.envelope.payload.count) {
            throw BusError(refusal.code, "dead letter \(kept.letter.id) is kept, not delivered: \(refusal.message)")
        }
        guard let (letter, original) = deliveries.ledger.takeDeadLetter(kept.letter.id) else { return }
        deliveries.journal?.removeDeadLetter(letter.id)
        var header = original.header
        header.correlationID = 0
        header.flags.remove(.replyExpected)
        header.deliveryCount = nil
        var replayed = Envelope(header: header, payload: original.payload)
        if maxDeliveries(of: name) != nil, let id = deliveries.ledger.add(replayed, for: name, client: nil) {
            replayed.header.correlationID = id
            replayed.header.deliveryCount = 0
        }
        activate(name, with: replayed, client: nil, now: now)
        reply(to: envelope, from: peer, with: Delivery(delivered: 1))
    }

    /// `dead-letters.show`: a letter with its payload (JSON where it is, else base64).
    func showDeadLetter(_ envelope: Envelope) throws -> DeadLetterDetail {
        let kept = try keptDeadLetter(askedFor: envelope)
        var letter = kept.letter
        letter.at = DeadLetter.isoTime(letter.time)
        let payload = kept.envelope.payload
        let contentType = kept.envelope.header.contentType
        let isJSON =
            (contentType == nil || contentType == "application/json")
            && (try? JSONSerialization.jsonObject(with: payload, options: [.fragmentsAllowed])) != nil
        return DeadLetterDetail(
            letter: letter, payloadJSON: isJSON ? String(decoding: payload, as: UTF8.self) : nil,
            payloadBase64: isJSON ? nil : payload.base64EncodedString(), contentType: contentType)
    }

    /// `dead-letters.drop`: a letter off the list, and off the journal, for good.
    func dropDeadLetter(_ envelope: Envelope) throws {
        guard let (letter, _) = deliveries.ledger.takeDeadLetter(try keptDeadLetter(askedFor: envelope).letter.id) else { return }
        deliveries.journal?.removeDeadLetter(letter.id)
        logger.notice("dead letter dropped", metadata: ["id": "\(letter.id)", "board": "\(letter.board)"])
    }

    /// The letter a `DeadLetterReplay` payload names (for `replay`, `show`, `drop`); `badArgument`
    /// for an id not on the list.
    private func keptDeadLetter(askedFor envelope: Envelope) throws -> (letter: DeadLetter, envelope: Envelope) {
        let request = try PayloadCodec.decode(DeadLetterReplay.self, from: envelope.payload)
        guard let kept = deliveries.ledger.deadLetters.first(where: { $0.letter.id == request.id }) else {
            throw BusError(.badArgument, "no dead letter \(request.id) (busctl dead-letters lists them)")
        }
        return kept
    }

    /// Why `name` cannot be handed a replayed letter of `bytes` now; nil when it can.
    private func replayRefusal(_ name: ScopedName, bytes: Int) -> BusError? {
        if maxDeliveries(of: name) != nil, !deliveries.ledger.hasRoom(for: name, bytes: bytes) {
            return BusError(.busy, "board '\(name)' holds as many unacknowledged activations as it may")
        }
        if registry[name] != nil { return nil }
        guard isManifestBoard(name), producer != nil else { return notLiveError(name) }
        if let start = supervisor.starting[name] {
            guard start.queue.count < settings.activationQueueLimit else {
                return BusError(.busy, "board '\(name)' is starting and \(settings.activationQueueLimit) inputs already wait")
            }
            return nil
        }
        if supervisor.hasFailed(name) {
            return BusError(.boardNotRunning, "board '\(name)' reached its restart limit (busctl restart \(name) starts it again)")
        }
        return nil
    }
}
