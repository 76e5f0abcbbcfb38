import BusCore
import Foundation
import Logging

/// Registration, unregistration, heartbeats and the departure of boards, and which board a
/// message comes from or goes to.
extension Motherboard {
    func register(_ envelope: Envelope, _ inbound: Inbound, remote: RemotePeer?, process: Int32?) {
        let (peer, now, principal) = (inbound.peer, inbound.now, inbound.principal)
        let registration: Registration
        do {
            registration = try PayloadCodec.decode(Registration.self, from: envelope.payload)
        } catch let error as BusError {
            return reply(to: envelope, from: peer, error: error)
        } catch {
            return
        }
        if let noScope = noScopeError(registration.scope) {
            return reply(to: envelope, from: peer, error: noScope)
        }
        let name = ScopedName(scope: registration.scope, name: registration.id.rawValue)
        // A connection serves one board, or (a gateway's) only boards that share it.
        let shared = registration.sharesConnection == true
        if shared ? registry.board(for: peer) != nil : registry.isGateway(peer) {
            return reply(
                to: envelope, from: peer,
                error: BusError(
                    .badArgument,
                    "this connection serves \(shared ? "a board of its own" : "boards that share it"); register this board on another"
                ))
        }
        // The broker's messages to such a board name it (or the store it owns) and its scope,
        // which an action delivered from a child scope would not.
        if shared, !registration.actions.isEmpty {
            return reply(
                to: envelope, from: peer,
                error: BusError(
                    .badArgument,
                    "a board that shares a gateway's connection subscribes to no action (an action from a child scope would not name its scope)"
                ))
        }
        if let refusal = registrationRefusal(registration, name: name, from: peer, remote: remote, principal: principal) {
            counters.refusedRegistrations += 1
            // Said once per id and connection (a helper asks again and again); counted always.
            let level: Logger.Level = registry.isFirstRefusal(of: name, on: peer) ? .warning : .debug
            logger.log(
                level: level, "registration refused",
                metadata: [
                    "board": "\(name)", "claimedPID": "\(registration.pid)", "peer": "\(peer)", "error": "\(refusal.message)",
                ])
            return reply(to: envelope, from: peer, error: refusal)
        }
        // Its counters only once it is accepted: a refused name leaves nothing behind.
        let board = LiveBoard(
            registration: registration, peer: peer, registeredAt: now, lastSeen: now, metrics: metrics.board(name), remote: remote,
            process: process)
        board.principal = principal ?? remote?.keyName
        board.maxDeliveries = maxDeliveries(of: name)
        board.watchdog = manifest.board(named: name.name, scope: name.scope)?.watchdogSeconds.map { .milliseconds(Int64($0 * 1_000)) }
        board.scheduleHeartbeats(every: settings.heartbeatInterval)
        registry.insert(board)
        if !board.sharesConnection { registry.noteArrival(peer) }
        if isManifestBoard(name) { registry.noteStores(ofManifestBoard: board) }
        links.unreachable[name] = nil
        logger.info(
            "board registered", metadata: ["board": "\(board.name)", "pid": "\(registration.pid)", "host": "\(remote?.description ?? "local")"])
        uplinkBoardRegistered(board)
        exportBoardRegistered(board)
        let accepted = RegistrationAccepted(
            heartbeatIntervalMilliseconds: settings.heartbeatInterval.wholeMilliseconds,
            livenessTimeoutMilliseconds: settings.livenessTimeout.wholeMilliseconds)
        send(envelope.reply(payload: PayloadCodec.encodeOrEmpty(accepted)), to: peer)
        deliverQueuedActivations(to: board, now: now)
        if deliveries.restoredHolders.contains(board.name) { redeliverRestored(board.name, now: now) }
    }

    /// Why a registration may not take its id, if it may not. One board id is one board: an id
    /// held by a live board on another connection is taken over only with that board's secret
    /// (its own re-registration on a new connection); an id whose process the broker is starting
    /// only with the secret that process was handed. The pid in the registration proves nothing.
    func registrationRefusal(
        _ registration: Registration, name: ScopedName, from peer: PeerID, remote: RemotePeer?, principal: String?
    ) -> BusError? {
        if let forbidden = registrationForbidden(principal ?? remote?.keyName, name: name) { return forbidden }
        if let forbidden = storesForbidden(principal ?? remote?.keyName, registration, name: name) { return forbidden }
        // An id whose board is unreachable is held for it: taken again with its secret, or over
        // a connection with the same key (its motherboard restarted), never by another peer.
        if registry[name] == nil, let lost = links.unreachable[name], !Self.secretsMatch(lost.board.registration.secret, registration.secret),
            remote == nil || remote?.keyName != lost.board.remote?.keyName
        {
            return BusError(
                .idInUse,
                "board id '\(name)' belongs to a board at \(lost.board.host ?? "another host") whose link is down; only that board (or its key) can register it again"
            )
        }
        if let holder = registry[name], holder.peer != peer {
            guard Self.secretsMatch(holder.registration.secret, registration.secret) else {
                if let host = holder.host, holder.sharesConnection {
                    return BusError(.idInUse, "board id '\(name)' is served by the motherboard on \(host); one id is one board across hosts")
                }
                return BusError(
                    .idInUse, "board id '\(name)' is held by live process \(holder.registration.pid); only that board can register it again")
            }
            return nil
        }
        if registry[name] == nil, let start = supervisor.starting[name], isManifestBoard(name) {
            guard start.pid != 0, start.secret == nil || Self.secretsMatch(start.secret, registration.secret) else {
                let what = start.pid == 0 ? "is restarting it" : "started process \(start.pid) for it"
                return BusError(
                    .idInUse,
                    "board id '\(name)' belongs to the manifest and the motherboard \(what); a board started by hand can take a free id only")
            }
        }
        return nil
    }

    /// Whether a registration's secret is the expected one, compared in constant time.
    static func secretsMatch(_ expected: String?, _ offered: String?) -> Bool {
        guard let expected, let offered else { return false }
        let (left, right) = (Array(expected.utf8), Array(offered.utf8))
        guard left.count == right.count else { return false }
        return zip(left, right).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// `unregister`: the board leaves (answered `Delivery` 0, also when there is none: a second
    /// goodbye, or one after `complete`).
    func unregister(_ envelope: Envelope, _ inbound: Inbound) {
        if let board = inbound.sender {
            drop(board.name, reason: "unregistered")
            if !board.sharesConnection { registry.noteDeparture(inbound.peer) }
        }
        reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 0))
    }

    /// A heartbeat from a peer with no registration is answered: `notRegistered` (register
    /// again) when the board registered with an earlier broker, `ended` when its instance on
    /// this connection completed or unregistered (a gateway: the board its heartbeat named).
    func heartbeat(_ envelope: Envelope, _ inbound: Inbound) {
        let (header, peer) = (envelope.header, inbound.peer)
        guard inbound.sender == nil else { return }
        let error =
            if registry.isRetired(peer) {
                BusError(.ended, "this board instance has completed; its connection is not registered again")
            } else if registry.hasDeparted(peer) {
                BusError(.ended, "this board unregistered; a heartbeat does not register it again (send register to come back)")
            } else {
                BusError(.notRegistered, "this motherboard does not know you; register again")
            }
        let answer = EnvelopeHeader(kind: .error, target: header.source, scope: header.scope, typeName: error.code.name)
        send(Envelope(header: answer, payload: PayloadCodec.encodeOrEmpty(error)), to: peer)
    }

    /// Removes a board, its run-time flows, and fails every request waiting on it (with
    /// `unreachable` when `unreachableSince` is set: the board is then kept, shown unreachable).
    func drop(_ name: ScopedName, reason: String, unreachableSince: ContinuousClock.Instant? = nil) {
        guard let board = registry.remove(name) else { return }
        uplinkBoardGone(board)
        exportBoardGone(board)
        let failure: BusError
        if let unreachableSince {
            links.unreachable[name] = UnreachableBoard(board: board, since: unreachableSince)
            logger.warning("board unreachable", metadata: ["board": "\(name)", "host": "\(board.host ?? "")", "reason": "\(reason)"])
            failure = BusError(.unreachable, "board '\(name)' at \(board.host ?? "another host") is unreachable (\(reason))")
        } else {
            failure = BusError(
                .outcomeUnknown,
                "board '\(name)' stopped after the request was delivered, before it answered (\(reason)); whether it was carried out is unknown")
        }
        // A manifest board keeps its series across restarts; another board's go with it.
        if !isManifestBoard(name) { metrics.forget(name) }
        flows.removeFlows(ownedBy: name)
        storesForget(board)
        logger.info("board dropped", metadata: ["board": "\(name)", "pid": "\(board.registration.pid)", "reason": "\(reason)"])
        for request in replies.takeAll(waitingOn: name, peer: board.peer) {
            finish(request, .failure(failure))
        }
        // Delivered again once the supervisor knows the process ended (at the end of
        // processExited, else at the next tick), so that the next instance is started after it.
        if unreachableSince == nil, board.maxDeliveries != nil, !deliveries.ledger.pending.isEmpty {
            forgetTaken(by: board, reason: reason)
            if !deliveries.ledger.held(by: name).isEmpty { deliveries.endedHolding.append((board, reason)) }
        }
    }

    /// The board a message from `peer` comes from: its connection's, or, on a gateway's
    /// connection, the one it names as source (in its scope).
    @inline(__always) func sender(of peer: PeerID, _ envelope: Envelope) -> LiveBoard? {
        if let board = registry.board(for: peer) { return board }
        guard registry.hasGateways else { return nil }
        return registry.gatewayBoard(peer, ScopedName(scope: envelope.header.scope, name: envelope.header.source))
    }

    /// The board a message to `peer` goes to: its connection's, or the gateway's board it names
    /// as target.
    @inline(__always) func receiver(at peer: PeerID, _ envelope: Envelope) -> LiveBoard? {
        if let board = registry.board(for: peer) { return board }
        guard registry.hasGateways else { return nil }
        return registry.gatewayBoard(peer, ScopedName(scope: envelope.header.scope, name: envelope.header.target))
    }
}
