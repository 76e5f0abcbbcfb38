import BusCore
import Foundation
import Logging

/// What an ``UplinkSession`` says and hears through: its own motherboard, the parent's link (what
/// goes up), and the parent's connection that every served board shares (``HelperConnection``).
/// ``Uplink`` gives sockets; a test gives a recorder.
package protocol UplinkLinks: HelperConnection {
    /// To its own motherboard.
    func toLocal(_ envelope: Envelope)
    /// Up the link: false when its connection cannot take it now (not made yet, or the parent's
    /// queue full); throws when it cannot be sent at all.
    func toParent(_ envelope: Envelope) throws -> Bool
    /// The parent has been silent: find out why (off the session's thread) and log it once.
    func diagnose()
    /// The link is up: a later outage says its reason again.
    func forgetDiagnosis()
}

/// The link's state machine (``Uplink`` has the thread and the sockets): attached to its own
/// motherboard, it registers the boards of the served scopes with the parent, hands the parent's
/// requests for them down and the answers back, sends up what its own motherboard's clients ask
/// of the parent (holding it while the link's connection is being made), and knows whether the
/// link is up. Driven by messages and the time, through ``UplinkLinks``.
package final class UplinkSession {
    /// A request in flight through the uplink: where its answer goes.
    struct Pending: Expiring {
        /// Down: the board socket (by name) the parent's request came on; nil: up, to the local side.
        var board: ScopedName?
        var correlationID: UInt64
        var deadline: ContinuousClock.Instant
    }

    /// The parent's endpoint, for what the session says.
    let endpoint: String
    let logger: Logger
    let links: any UplinkLinks
    /// The boards of the served scopes, registered with the parent on the served boards' connection.
    var boards = ServedBoards<Void>()
    /// Requests from the parent, handed to the local motherboard, by the local correlation id.
    var down = DeadlineTable<Pending>(keepingPastDeadline: .seconds(5))
    /// Requests sent up, by the correlation id they travel under to the parent.
    var up = DeadlineTable<Pending>()
    /// What goes up while the link's connection is not made yet (the parent heard on the boards'
    /// connections already) or the parent pushes back, in order.
    var held = HeldMessages(capacity: 10_000, byteCapacity: 64 << 20)
    /// The longest a message waits for the link's connection: a handshake that has not finished by
    /// then is not about to (and a shorter deadline keeps three quarters of its own).
    let longestHold = Duration.seconds(5)
    var ids = IDSource()
    var lastHeard: ContinuousClock.Instant?
    var lastPing: ContinuousClock.Instant?
    var linkUp = false
    /// Its own motherboard's link id (told when the uplink attached), and the pending question to
    /// the parent whether attaching makes a cycle.
    var localLinkID: UInt64?
    var chainRequest: UInt64?
    /// The parent refused this attach: it would make a cycle of motherboards. Nothing is served
    /// there until the configuration is fixed and the motherboard restarted.
    var cycle = false
    let heartbeatInterval = Duration.milliseconds(500)
    let livenessTimeout = Duration.milliseconds(2500)
    /// While the link is down, when the driver was last asked why (``UplinkLinks/diagnose()``).
    var lastDiagnosis: ContinuousClock.Instant?
    /// The first tick: the link being made is not silence yet.
    var startedAt: ContinuousClock.Instant?
    /// This motherboard's attach to its own motherboard, and when it was last asked.
    /// The proof of this uplink to its own motherboard, asked until answered.
    var attachment: BrokerAttachment

    package init(endpoint: String, secret: String, links: any UplinkLinks, logger: Logger) {
        self.endpoint = endpoint
        self.attachment = BrokerAttachment(operation: ControlOperation.uplinkAttach, secret: secret)
        self.links = links
        self.logger = logger
    }

    /// Whether the parent was heard within the liveness timeout.
    package var isLinkUp: Bool { linkUp }
    /// The boards served to the parent, and whether each is registered there.
    package var servedBoards: [ScopedName: Bool] { boards.boards.mapValues(\.link.registered) }
    /// Whether waiting messages want the driver back soon.
    package var holdsMessages: Bool { !held.isEmpty }

    /// Every served board is unregistered from the parent.
    package func close() {
        boards.removeAll()
    }

    /// Registers `name` with the parent (again), remembering which registration the answer is for.
    func register(_ name: ScopedName, now: ContinuousClock.Instant) {
        boards.register(name, now: now, ids: &ids)
    }

    /// A message of the parent on the served boards' connection: an answer to a registration (by
    /// its correlation id), a store request for the board that owns the store, else for the
    /// board it names.
    package func forServedBoard(_ envelope: Envelope, now: ContinuousClock.Instant) {
        lastHeard = now
        // `holder.gone` is the parent's about its own holders: nothing to hand down.
        guard envelope.header.typeName != StoreOperation.holderGone || envelope.header.kind != .store,
            let name = boards.addressee(of: envelope.header)
        else { return }
        fromParent(envelope, board: name, now: now)
    }

    /// Sends to the parent on the served boards' connection, as board `name`.
    func send(_ envelope: Envelope, as name: ScopedName) {
        var envelope = envelope
        envelope.header.source = name.name
        envelope.header.scope = name.scope
        links.sendToBroker(envelope)
    }

    /// The attach to its own motherboard (asked again each second until answered), pings,
    /// registrations, heartbeats, the link's state and expired requests.
    package func tick(now: ContinuousClock.Instant) {
        if startedAt == nil { startedAt = now }
        if let request = attachment.request(now: now, ids: &ids) { links.toLocal(request) }
        let heard = lastHeard.map { $0.duration(to: now) < livenessTimeout } ?? false
        if heard != linkUp {
            linkUp = heard
            if heard {
                logger.notice("link to the parent motherboard is up", metadata: ["endpoint": "\(endpoint)"])
                askChain()
                // A later outage says its reason again.
                links.forgetDiagnosis()
                lastDiagnosis = nil
            } else {
                logger.warning("link to the parent motherboard is down", metadata: ["endpoint": "\(endpoint)"])
                boards.loseAll()
                _ = held.removeAll()
                failUp(BusError(.unreachable, "the link to the parent motherboard at \(endpoint) is down"))
            }
        }
        if lastPing.map({ $0.duration(to: now) >= heartbeatInterval }) ?? true {
            lastPing = now
            // Any answer from the parent is proof it is there; this one costs it nothing.
            var ping = EnvelopeHeader(kind: .control, correlationID: ids.make(), typeName: ControlOperation.ping)
            ping.flags.insert(.replyExpected)
            _ = try? links.toParent(Envelope(header: ping))
            boards.keepAlive(now: now, ids: &ids)
        }
        // Once the parent has been silent for 3 s (not while the link is first being made), and
        // every 10 s after that while it stays so.
        let silentSince = lastHeard ?? startedAt ?? now
        if !linkUp, silentSince.duration(to: now) >= .seconds(3), lastDiagnosis.map({ $0.duration(to: now) >= .seconds(10) }) ?? true {
            lastDiagnosis = now
            links.diagnose()
        }
        sendHeld(now: now)
        for (_, pending) in up.takeExpired(now: now) {
            answerLocal(Envelope.error(BusError(.timeout, "the parent motherboard did not answer in time"), correlationID: pending.correlationID))
        }
        _ = down.takeExpired(now: now)
    }

    // MARK: - From the local motherboard

    package func fromOwnMotherboard(_ envelope: Envelope, now: ContinuousClock.Instant) {
        switch attachment.read(envelope) {
        case .attached(let payload):
            localLinkID = (try? PayloadCodec.decode(LinkChain.self, from: payload))?.ids.first
            logger.info("uplink attached to its motherboard", metadata: ["parent": "\(endpoint)"])
            if linkUp { askChain() }
            return
        case .refused(let text):
            return logger.error("the motherboard refused its uplink", metadata: ["error": "\(text)"])
        case nil:
            break
        }
        let header = envelope.header
        switch header.kind {
        case .control where header.typeName == ControlOperation.uplinkBoard:
            guard let registration = try? PayloadCodec.decode(Registration.self, from: envelope.payload) else { return }
            boardAppeared(registration, now: now)
        case .control where header.typeName == ControlOperation.uplinkGone:
            guard let gone = try? PayloadCodec.decode(StatusRequest.self, from: envelope.payload) else { return }
            let name = ScopedName(scope: gone.scope, name: gone.id.rawValue)
            boards.remove(name)
        case .reply, .error:
            // A local board's answer to the parent's request.
            guard let pending = down.removeValue(forKey: header.correlationID), let name = pending.board, boards[name] != nil else { return }
            var answer = envelope
            answer.header.correlationID = pending.correlationID
            send(answer, as: name)
        default:
            // A request for the parent (a client's, or an action bubbling on).
            sendUp(envelope, now: now)
        }
    }

    func boardAppeared(_ registration: Registration, now: ContinuousClock.Instant) {
        guard !cycle else { return }
        let name = ScopedName(scope: registration.scope, name: registration.id.rawValue)
        var exported = registration
        // The parent routes requests to it; its actions are delivered here, where it lives.
        exported.actions = []
        exported.secret = boards[name]?.link.registration.secret ?? Registration.makeSecret()
        exported.sharesConnection = true
        if boards[name] != nil {
            boards[name]?.link.registration = exported
        } else {
            boards[name] = .init(link: HelperBoard(connection: links, registration: exported), extra: ())
        }
        register(name, now: now)
    }

    func sendUp(_ envelope: Envelope, now: ContinuousClock.Instant) {
        let waits = Self.waits(envelope)
        // Nothing goes up through a refused (cycle) or down link: a waiting sender hears why.
        let refusal: BusError? =
            cycle
            ? BusError(.badArgument, "attaching to the parent at \(endpoint) would make a cycle of motherboards; fix --attach")
            : linkUp ? nil : BusError(.unreachable, "the link to the parent motherboard at \(endpoint) is down")
        if let refusal {
            if waits { answerLocal(Envelope.error(refusal, correlationID: envelope.header.correlationID)) }
            return
        }
        var request = envelope
        let timeout = envelope.header.timeoutMilliseconds > 0 ? Duration.milliseconds(Int64(envelope.header.timeoutMilliseconds)) : .seconds(25)
        if waits {
            let id = ids.make()
            up[id] = Pending(board: nil, correlationID: envelope.header.correlationID, deadline: now.advanced(by: timeout))
            request.header.correlationID = id
        }
        // Behind what is held already, in order (the loop's tick offers it to the connection);
        // else straight to the socket, which refuses it while its connection is not made
        // (ZMQ_IMMEDIATE) or the parent's queue is full: then it is held. It waits at most three
        // quarters of its timeout, so that the sender, and the motherboard it asked, hear why
        // before their own deadline.
        if held.isEmpty {
            do {
                if try links.toParent(request) { return }
            } catch {
                return notSent(
                    request, waits: waits, BusError(.unreachable, "could not send to the parent motherboard at \(endpoint): \(error)"))
            }
        }
        guard held.hold(request, now: now, until: now.advanced(by: min(timeout * 3 / 4, longestHold))) else {
            return notSent(request, waits: waits, BusError(.unreachable, "the parent motherboard at \(endpoint) is not connected"))
        }
    }

    /// Offers what is held to the link's connection; answers `unreachable` for what could not
    /// leave before its deadline or failed to send.
    func sendHeld(now: ContinuousClock.Instant) {
        guard !held.isEmpty else { return }
        let expired = held.flush(now: now) { message in
            var envelope = message.envelope
            // The parent gets what is left of the deadline, not the whole of it again.
            if envelope.header.timeoutMilliseconds > 0 {
                let waited = message.since.duration(to: now).wholeMilliseconds
                envelope.header.timeoutMilliseconds = UInt32(max(1, Int(envelope.header.timeoutMilliseconds) - waited))
            }
            do {
                return try links.toParent(envelope) ? .left : .refused
            } catch {
                notSent(
                    envelope, waits: Self.waits(envelope),
                    BusError(.unreachable, "could not send to the parent motherboard at \(endpoint): \(error)"))
                return .left
            }
        }
        for message in expired {
            notSent(
                message.envelope, waits: Self.waits(message.envelope),
                BusError(
                    .unreachable,
                    "the parent motherboard at \(endpoint) did not take the request in time (the link's connection is not made, or is full)")
            )
        }
    }

    static func waits(_ envelope: Envelope) -> Bool {
        envelope.header.flags.contains(.replyExpected) && envelope.header.correlationID != 0
    }

    /// A message that never left: its sender, if it waits, is answered with `error`.
    func notSent(_ request: Envelope, waits: Bool, _ error: BusError) {
        guard waits, let pending = up.removeValue(forKey: request.header.correlationID) else { return }
        answerLocal(Envelope.error(error, correlationID: pending.correlationID))
    }

    func answerLocal(_ envelope: Envelope) {
        links.toLocal(envelope)
    }

    func failUp(_ error: BusError) {
        for (id, pending) in up {
            up[id] = nil
            answerLocal(Envelope.error(error, correlationID: pending.correlationID))
        }
    }
}
