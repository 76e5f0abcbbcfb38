import BusCore
import DequeModule
import Foundation
import Logging

/// How the broker's logic sends messages. The ZeroMQ ROUTER implements it in production, an
/// in-memory recorder in unit tests.
public protocol MotherboardTransport: AnyObject {
    /// Sends without blocking. Returns false when the peer is gone or its queue is full.
    func send(_ envelope: Envelope, to peer: PeerID) -> Bool
    /// Whether the peer is still connected (after a failed send: gone, or only full?).
    func isConnected(_ peer: PeerID) -> Bool
    /// Whether sends to the peer are refused because it does not read what it was sent (after
    /// a failed send: a live but slow peer, not one to drop).
    func isBacklogged(_ peer: PeerID) -> Bool
}

extension MotherboardTransport {
    public func isBacklogged(_ peer: PeerID) -> Bool { false }
}

/// Starts board processes: the motherboard's producer, for the fleet, on-demand activation and
/// restarts.
public protocol BoardProducer: AnyObject {
    /// Starts the process of a manifest board, handing it a new registration secret; must not
    /// block for long.
    func start(_ board: FleetManifest.Board) throws -> LaunchedProcess
    /// A live process of this board that an earlier broker started, if any (it is adopted), with
    /// the secret it was started with.
    func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess?
    /// Whether a process still runs.
    func isRunning(_ pid: Int32) -> Bool
    /// Whether a process that runs is stopped (by a signal, a debugger or its cgroup's freezer):
    /// frozen, not busy.
    func isStopped(_ pid: Int32) -> Bool
    /// Forgets an adopted process that ended.
    func forgetAdopted(_ pid: Int32)
}

extension BoardProducer {
    public func isStopped(_ pid: Int32) -> Bool { false }
}

/// A board process the broker started (or adopted), and the registration secret it was handed:
/// the proof, which a pid written in a message is not, that a registration comes from it.
public struct LaunchedProcess: Sendable, Hashable {
    public var pid: Int32
    /// Nil when it is not known (a process adopted without its secret file).
    public var secret: String?

    public init(pid: Int32, secret: String?) {
        self.pid = pid
        self.secret = secret
    }
}

/// The broker's logic: registry, scopes, flows, on-demand activation, routing of the four message
/// families, heartbeats and deadlines.
///
/// It does no I/O of its own and is driven from one thread (the socket loop): ``receive(_:from:now:)``
/// for each incoming message and ``tick(now:)`` periodically. The broker routes on headers only;
/// it decodes payloads of its own control messages and never those between boards.
public final class Motherboard {
    public let manifest: FleetManifest
    public let settings: MotherboardSettings
    // The routing state below is touched on every message, only on the loop thread and never
    // while an access to it is open, so the runtime's exclusivity checks are skipped for it.
    @exclusivity(unchecked) var ownCounters = MotherboardCounters()
    /// What the broker counted, the access policy's refusals with it.
    public package(set) var counters: MotherboardCounters {
        get {
            var counters = ownCounters
            counters.denied = access.denied
            return counters
        }
        _modify { yield &ownCounters }
    }
    let scopes: ScopeTable
    var flows = FlowTable()
    let registry = BoardRegistry()
    /// Forwarded requests and action deliveries waiting for answers (both routing paths).
    @exclusivity(unchecked) var replies = ReplyRegistry()
    /// At-least-once activations not acknowledged yet, and the dead letters.
    var ledger = DeliveryLedger()
    /// At-least-once boards that ended holding activations, to deliver them again.
    var endedHolding: [(board: LiveBoard, reason: String)] = []
    /// Where the ledger's changes are written (the daemon's file); nil: the ledger is lost with
    /// the broker.
    package var deliveryJournal: (any DeliveryJournal)?
    /// Boards holding activations a broker before this one kept, and when those still not live
    /// are activated (started, or their activations dead-lettered).
    var restoredHolders: Set<ScopedName> = []
    var restoredDeadline: ContinuousClock.Instant?
    /// The board processes: starting, running, adopted, completed, and their restarts.
    var supervisor = Supervisor()
    /// Subscribers of each store's changes.
    var subscriptions = StoreSubscriptions()
    /// Peers of board instances that completed: their later messages are refused.
    @exclusivity(unchecked) var retiredPeers = BoundedSet<PeerID>(capacity: 1024)
    /// The refused registrations already logged, by id and connection.
    var loggedRefusals = BoundedSet<String>(capacity: 1024)
    /// `input.refused` reports, logged once a second at most.
    var refusedInputLog = LogThrottle(every: .seconds(1))
    var refusedSubscriptionLog = LogThrottle(every: .seconds(1))
    /// Boards on other hosts whose link failed: kept, shown `unreachable`, until they register again.
    var unreachable: [ScopedName: UnreachableBoard] = [:]
    /// The uplink of this motherboard (when it serves scopes of a parent one), once attached.
    var uplink: PeerID?
    /// The secret the uplink proves itself with (``UplinkAttach``); nil: no uplink may attach.
    public var uplinkSecret: String?
    /// The NATS gateway, once attached (`export.attach`): it is told of every board here.
    var exporter: PeerID?
    /// The secret the NATS gateway proves itself with; nil: none may attach.
    public var exportSecret: String?
    /// This motherboard's mark in the link trail of the actions it sends up (random per process).
    let linkID = UInt64.random(in: 1...UInt64.max)
    /// The link ids of the motherboards above this one (its parent first), as its uplink learned
    /// them when its link came up: a motherboard among them may not attach here.
    var ancestors: [UInt64] = []
    /// Actions dropped because they came back around a cycle of attached motherboards, and when
    /// that was last logged.
    var loopedActions = LogThrottle(every: .seconds(10))
    /// `busctl monitor`s attached: while there is none, routing does not look at them.
    @exclusivity(unchecked) var monitors = MonitorTable()
    /// Who may do what: the policy, its decisions, revoked principals, admission rules, audit.
    package let access: AccessControl
    /// The control operations the broker answers, by name (``answerControl(_:from:now:)``).
    package var controlOperations = Motherboard.defaultControlOperations
    private let transport: any MotherboardTransport
    let producer: (any BoardProducer)?
    package let logger: Logger
    /// Counters and histograms, in the Prometheus text format on request.
    public let metrics: BrokerMetrics

    public init(
        manifest: FleetManifest, settings: MotherboardSettings = .init(), transport: any MotherboardTransport,
        producer: (any BoardProducer)? = nil, logger: Logger, metrics: BrokerMetrics = BrokerMetrics()
    ) throws {
        self.metrics = metrics
        self.manifest = manifest
        self.settings = settings
        self.scopes = try ScopeTable(manifest)
        self.transport = transport
        self.producer = producer
        self.logger = logger
        self.access = AccessControl(metrics: metrics, logger: logger)
        for (scope, spec) in try manifest.flowSpecs() {
            flows.add(scope: scope, owner: nil, spec: spec)
        }
    }

    // MARK: - Input

    /// Handles the frames of one message (after the routing id) from `peer`.
    public func receive(_ frames: [Data], from peer: PeerID, now: ContinuousClock.Instant) {
        receive(Envelope.parse(frames: frames, limits: settings.limits), from: peer, now: now)
    }

    /// Handles one message that a transport has already parsed (or found malformed).
    /// `principal` is the name of the remote principal the message's connection authenticated as
    /// (its CURVE key's allow-list name), nil for a local peer; `remote` says where the peer's
    /// connection comes from when it is not the ipc socket (a tcp peer's address and key name),
    /// for registrations; `process`, for an ipc peer, the pid the kernel knows for the other end
    /// of its connection.
    public func receive(
        _ message: Result<Envelope, MalformedMessage>, from peer: PeerID, now: ContinuousClock.Instant, remote: RemotePeer? = nil,
        process: Int32? = nil, principal: String? = nil
    ) {
        let envelope: Envelope
        switch message {
        case .success(let parsed):
            envelope = parsed
        case .failure(let malformed):
            counters.malformedMessages += 1
            logger.debug("refused message", metadata: ["peer": "\(peer)", "error": "\(malformed.error)"])
            // Answer when the sender waits and its correlation id could be read, so that it gets
            // the reason at once instead of waiting out its deadline.
            if let correlationID = malformed.answerWith {
                send(Envelope.error(malformed.error, correlationID: correlationID), to: peer)
            }
            return
        }
        let sender = sender(of: peer, envelope)
        // A peer that took a remote board's routing id on a connection of another principal
        // (libzmq lets a peer choose its id) is not that board.
        if let sender, sender.remote?.keyName != principal {
            return reply(
                to: envelope, from: peer, error: BusError(.forbidden, "this connection is not the one board '\(sender.name)' registered over"))
        }
        // A gateway says whom it acts for; a remote peer may not say it acts for another.
        var principal = principal
        if let claimed = envelope.header.onBehalfOf {
            if let own = principal {
                return reply(
                    to: envelope, from: peer, error: BusError(.forbidden, "'\(own)' may not send on behalf of another principal (header field 6)"))
            }
            principal = claimed
        }
        sender?.lastSeen = now
        (sender?.metrics ?? metrics.clients).received(envelope.header.kind)
        if !monitors.isEmpty, Self.endsAtBroker(envelope.header.kind) { observeReceived(envelope, from: peer) }
        if let refusal = admit(
            envelope.header.kind, hasContentType: envelope.header.contentType != nil, from: peer, sender: sender,
            target: {
                envelope.header.target
            })
        {
            return reply(to: envelope, from: peer, error: refusal)
        }
        if let principal,
            let refusal = access.authorize(
                envelope.header, principal: principal, scope: scope(of: envelope, sender: sender), fromBoard: sender != nil)
        {
            return reply(to: envelope, from: peer, error: refusal)
        }
        let inbound = Inbound(peer: peer, sender: sender, principal: principal, now: now)
        switch envelope.header.kind {
        case .register: register(envelope, inbound, remote: remote, process: process)
        case .unregister: unregister(envelope, inbound)
        case .heartbeat: heartbeat(envelope, inbound)
        case .activate: activate(envelope, inbound)
        case .command: command(envelope, inbound)
        case .output: routeOutput(envelope, inbound)
        case .action: deliverAction(envelope, inbound)
        case .complete: complete(envelope, inbound)
        case .control: answerControl(envelope, inbound)
        case .reply, .error: relayReply(envelope, inbound)
        case .dispatch, .store: routeStore(envelope, inbound)
        case .flowEvent: reply(to: envelope, from: peer, error: BusError(.malformed, "flowEvent is sent by the broker only"))
        }
    }

    /// Messages that go no further than the broker (or whose routing is the broker's own), shown
    /// to monitors as they arrive; everything else is shown as it is sent on.
    static func endsAtBroker(_ kind: MessageKind) -> Bool {
        switch kind {
        case .output, .control, .register, .unregister, .complete: true
        default: false
        }
    }

    /// Heartbeats boards, drops the gone ones and fails requests and starts past their deadline.
    ///
    /// A board silent for the liveness timeout is gone, unless it is only busy: a local board
    /// whose process (known from its connection, not from what it claims) still runs and is not
    /// stopped (a signal, a debugger, a frozen cgroup). A process that is gone closes its
    /// connection, so the next heartbeat sent to it fails and drops the board. A handler that
    /// holds the board's thread (a lock, a long computation) delays only the requests behind it,
    /// each of which keeps its own deadline.
    public func tick(now: ContinuousClock.Instant) {
        var silent: [LiveBoard] = []
        for board in registry.boards.values {
            if board.lastSeen.duration(to: now) > settings.livenessTimeout {
                guard isBusy(board) else {
                    silent.append(board)
                    continue
                }
                if board.busySince == nil {
                    board.busySince = board.lastSeen
                    logger.notice(
                        "board busy: silent past the liveness timeout, its process and connection alive",
                        metadata: ["board": "\(board.name)", "pid": "\(board.process ?? 0)", "silentFor": "\(settings.livenessTimeout)"])
                }
            } else if let since = board.busySince {
                board.busySince = nil
                logger.notice("board answers again", metadata: ["board": "\(board.name)", "busyFor": "\(since.duration(to: now))"])
            }
            if board.takeHeartbeat(at: now, every: settings.heartbeatInterval) {
                send(Envelope(header: EnvelopeHeader(kind: .heartbeat, target: board.id.rawValue, scope: board.scope)), to: board.peer)
            }
        }
        for board in silent { lose(board, reason: "no heartbeat for \(settings.livenessTimeout)", now: now) }
        checkAdoptedProcesses(now: now)
        forgetLongUnreachable(now: now)
        for request in replies.takeExpired(now: now) {
            counters.timedOutRequests += 1
            finish(request, .failure(BusError(.timeout, "board '\(request.board)' did not answer in time")))
        }
        for name in supervisor.overdueStarts(now: now, timeout: settings.startTimeout) {
            failStart(name, BusError(.boardNotRunning, "board '\(name)' did not register within \(settings.startTimeout) of its start"))
        }
        restartDueBoards(now: now)
        redeliverEndedHolding(now: now)
        if let restoredDeadline, restoredDeadline <= now {
            self.restoredDeadline = nil
            for name in restoredHolders.sorted() { redeliverRestored(name, now: now) }
        }
        if !monitors.isEmpty { tickMonitors(now: now) }
        refreshMetrics()
    }

    /// Brings the gauges and the broker's own counts up to date in the metrics.
    func refreshMetrics() {
        metrics.update(
            counters, boards: registry.boards.count, pending: replies.count, queued: supervisor.starting.values.reduce(0) { $0 + $1.queue.count },
            monitors: monitors.count, monitorDrops: monitors.droppedTotal, restarts: supervisor.records.mapValues(\.restarts),
            unreachable: unreachable.count, subscriptions: subscriptions.count)
    }

    // MARK: - Registration and liveness

    /// Whether a silent board is only busy: its connection is one whose other end the kernel
    /// named at registration, and that process still runs, not stopped.
    private func isBusy(_ board: LiveBoard) -> Bool {
        guard let process = board.process, let producer else { return false }
        return producer.isRunning(process) && !producer.isStopped(process)
    }

    private func register(_ envelope: Envelope, _ inbound: Inbound, remote: RemotePeer?, process: Int32?) {
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
            let level: Logger.Level = loggedRefusals.insert("\(name) \(peer)") ? .warning : .debug
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
        board.scheduleHeartbeats(every: settings.heartbeatInterval)
        registry.insert(board)
        unreachable[name] = nil
        logger.info(
            "board registered", metadata: ["board": "\(board.name)", "pid": "\(registration.pid)", "host": "\(remote?.description ?? "local")"])
        uplinkBoardRegistered(board)
        exportBoardRegistered(board)
        let accepted = RegistrationAccepted(
            heartbeatIntervalMilliseconds: settings.heartbeatInterval.wholeMilliseconds,
            livenessTimeoutMilliseconds: settings.livenessTimeout.wholeMilliseconds)
        send(envelope.reply(payload: PayloadCodec.encodeOrEmpty(accepted)), to: peer)
        deliverQueuedActivations(to: board, now: now)
        if restoredHolders.contains(board.name) { redeliverRestored(board.name, now: now) }
    }

    /// Why a registration may not take its id, if it may not. One board id is one board: an id
    /// held by a live board on another connection is taken over only with that board's secret
    /// (its own re-registration on a new connection); an id whose process the broker is starting
    /// only with the secret that process was handed. The pid in the registration proves nothing.
    private func registrationRefusal(
        _ registration: Registration, name: ScopedName, from peer: PeerID, remote: RemotePeer?, principal: String?
    ) -> BusError? {
        if let forbidden = registrationForbidden(principal ?? remote?.keyName, name: name) { return forbidden }
        // An id whose board is unreachable is held for it: taken again with its secret, or over
        // a connection with the same key (its motherboard restarted), never by another peer.
        if registry[name] == nil, let lost = unreachable[name], !Self.secretsMatch(lost.board.registration.secret, registration.secret),
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
        if registry[name] == nil, let start = supervisor.starting[name], manifest.board(named: name.name, scope: name.scope) != nil {
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

    private func unregister(_ envelope: Envelope, _ inbound: Inbound) {
        if let board = inbound.sender { drop(board.name, reason: "unregistered") }
        reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 0))
    }

    private func heartbeat(_ envelope: Envelope, _ inbound: Inbound) {
        let (header, peer) = (envelope.header, inbound.peer)
        // A heartbeat from a peer we do not know means the board registered with an earlier
        // broker: tell it to register again (a gateway: the board its heartbeat named).
        if inbound.sender == nil && !retiredPeers.contains(peer) {
            let error = BusError(.notRegistered, "this motherboard does not know you; register again")
            let answer = EnvelopeHeader(kind: .error, target: header.source, scope: header.scope, typeName: error.code.name)
            send(Envelope(header: answer, payload: PayloadCodec.encodeOrEmpty(error)), to: peer)
        }
    }

    /// Removes a board, its run-time flows, and fails every request waiting on it (with
    /// `unreachable` when `unreachableSince` is set: the board is then kept, shown unreachable).
    func drop(_ name: ScopedName, reason: String, unreachableSince: ContinuousClock.Instant? = nil) {
        guard let board = registry.remove(name) else { return }
        uplinkBoardGone(board)
        exportBoardGone(board)
        let failure: BusError
        if let unreachableSince {
            unreachable[name] = UnreachableBoard(board: board, since: unreachableSince)
            logger.warning("board unreachable", metadata: ["board": "\(name)", "host": "\(board.host ?? "")", "reason": "\(reason)"])
            failure = BusError(.unreachable, "board '\(name)' at \(board.host ?? "another host") is unreachable (\(reason))")
        } else {
            failure = BusError(
                .outcomeUnknown,
                "board '\(name)' stopped after the request was delivered, before it answered (\(reason)); whether it was carried out is unknown")
        }
        // A manifest board keeps its series across restarts; another board's go with it.
        if manifest.board(named: name.name, scope: name.scope) == nil { metrics.forget(name) }
        flows.removeFlows(ownedBy: name)
        storesForget(board)
        logger.info("board dropped", metadata: ["board": "\(name)", "pid": "\(board.registration.pid)", "reason": "\(reason)"])
        for request in replies.takeAll(waitingOn: name, peer: board.peer) {
            finish(request, .failure(failure))
        }
        // Delivered again once the supervisor knows the process ended (at the end of
        // processExited, else at the next tick), so that the next instance is started after it.
        if unreachableSince == nil, board.maxDeliveries != nil, !ledger.pending.isEmpty {
            forgetTaken(by: board, reason: reason)
            if !ledger.held(by: name).isEmpty { endedHolding.append((board, reason)) }
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

    // MARK: - Sending

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
            lose(board, reason: "its socket is gone or full")
        }
        if peer == uplink, !transport.isConnected(peer) { uplinkLost(peer) }
        if peer == exporter, !transport.isConnected(peer) { exporter = nil }
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
        if let lost = unreachable[name] {
            return BusError(.unreachable, "board '\(name)' at \(lost.board.host ?? "another host") is unreachable (its link is down)")
        }
        if let noScope = noScopeError(name.scope) { return noScope }
        if manifest.board(named: name.name, scope: name.scope) != nil {
            return BusError(.boardNotRunning, "board '\(name)' is in the manifest but not running")
        }
        return BusError(.noSuchBoard, "no board '\(name)' is running and the manifest cannot start one")
    }
}
