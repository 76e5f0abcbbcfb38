import BusCore
import BusNATS
import BusZeroMQ
import Foundation
import Logging

/// Where and as what a motherboard joins a NATS cluster.
public struct NATSGatewaySettings: Sendable, Hashable {
    public var nats: NATSSettings
    /// The fleet's subjects (every motherboard of one fleet names the same fleet).
    public var subjects: NATSSubjects
    /// The name the other motherboards show as this one's boards' host (`busctl list`'s HOST).
    public var host: String
    /// The principal the access policy sees for what comes through NATS (requests, actions): NATS
    /// does not say who published a message, so it is one principal for the whole cluster.
    public var principal: String

    /// The most requests and actions from the cluster that wait for this motherboard's answers at
    /// once; past it, the cluster is answered `busy`.
    public var maximumInFlight: Int

    /// The principal when none is given.
    public static let defaultPrincipal = "nats"
    public static let defaultMaximumInFlight = 10_000

    public init(
        nats: NATSSettings, fleet: String, host: String, principal: String = Self.defaultPrincipal,
        maximumInFlight: Int = Self.defaultMaximumInFlight
    ) throws {
        self.nats = nats
        subjects = try NATSSubjects(fleet: fleet)
        guard (1...255).contains(host.utf8.count), !host.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw BusError(.badArgument, "a NATS host name is 1–255 bytes with no control character")
        }
        guard HeaderCodec.isValidPrincipal(principal.utf8) else {
            throw BusError(.badArgument, "a NATS principal is 1–255 printable ASCII characters, not '\(principal.escapedForDisplay())'")
        }
        guard maximumInFlight >= 1 else { throw BusError(.badArgument, "the most NATS requests in flight is at least 1, not \(maximumInFlight)") }
        self.host = host
        self.principal = principal
        self.maximumInFlight = maximumInFlight
    }
}

extension NATSGatewaySettings: CustomStringConvertible {
    /// For logs: the servers (passwords hidden), the fleet, the host name.
    public var description: String { "NATS (\(nats), fleet \(subjects.fleet), as \(host))" }
}

/// What a motherboard says on `boardbus.<fleet>.announce.<host>`: the boards it serves to the cluster.
struct NATSAnnouncement: Codable, Sendable {
    /// This run of the motherboard (random at start).
    var instance: String
    var host: String
    /// When it joined, Unix milliseconds: of two motherboards serving one board id, the one that
    /// joined first keeps it (then the smaller instance).
    var joined: Int64
    /// How often it announces; its boards are forgotten after three intervals and a half of silence.
    var intervalMilliseconds: Int
    var boards: [Registration]
    /// Whether it delivers the fleet's actions and answers for them (every motherboard does; a
    /// NATS program serving boards may not): an action's sender waits for those that do.
    var actions: Bool?
}

/// `boardbus.<fleet>.withdraw.<host>` and `.hello`: who says it.
struct NATSInstance: Codable, Sendable {
    var instance: String
}

/// The gateway that joins a motherboard to a NATS cluster (`motherboard --nats`).
///
/// On its own thread it holds a libnats connection and two DEALER sockets to its motherboard's
/// in-process endpoint: one as a client (it attached there as the exporter, so every board of this
/// motherboard is pushed to it, and it hands the cluster's requests for them to the broker), one
/// that every board of another motherboard is registered over (as boards that share it, PROTOCOL
/// 5.1b), so that the broker routes to them as to any board and the gateway sends each request on
/// as a NATS request. It announces its boards every second and forgets another motherboard's
/// after 3.5 s of silence (PROTOCOL §10).
package final class NATSGateway: @unchecked Sendable {
    let settings: NATSGatewaySettings
    private let limits: BusLimits
    private let logger: Logger
    private let local: ZMQSocket
    private let served: ZMQSocket
    private let connection: NATSConnection
    private let thread = HelperThread()
    private let subjects: NATSSubjects

    static let announceInterval = Duration.seconds(1)
    /// Another motherboard's boards are forgotten after this long without its announcement.
    static let expiry = Duration.milliseconds(3500)
    /// A request that names no timeout waits this long for the cluster's answer.
    static let defaultTimeout = Duration.seconds(25)

    private struct Peer {
        var announcement: NATSAnnouncement
        var lastHeard: ContinuousClock.Instant
        var rank: Rank { Rank(joined: announcement.joined, instance: announcement.instance) }
    }

    /// Of two motherboards serving one id, the lower rank keeps it.
    private struct Rank: Comparable {
        var joined: Int64
        var instance: String
        static func < (left: Rank, right: Rank) -> Bool { (left.joined, left.instance) < (right.joined, right.instance) }
    }

    private struct RemoteBoard {
        var link: HelperBoard
        var instance: String
        var lastRefusal: String?
        /// The subscriptions to its outputs and its stores' changes.
        var subscriptions: [Int] = []
    }

    /// A request of this motherboard sent to the cluster, by the number its inbox subject ends in.
    private struct Outgoing: Expiring {
        /// The random part of its reply subject, which only its responder learns: an answer
        /// without it is not this request's.
        var token: String
        var board: ScopedName
        var correlationID: UInt64
        var deadline: ContinuousClock.Instant
        /// The connection's drops before it was sent (``NATSConnection/disconnections``).
        var epoch: Int
    }

    /// A request from the cluster handed to this motherboard, by its local correlation id.
    private struct Incoming: Expiring {
        var reply: String?
        var deadline: ContinuousClock.Instant
        var trace: TraceContext?
        var traceState: String?
    }

    private let instance: String
    private let joined = Int64(Date().timeIntervalSince1970 * 1000)
    /// Where the answers to this motherboard's requests come (`_INBOX.boardbus.<fleet>.<host>.<instance>`),
    /// a reply subject being this and `.<number>-<random token>`.
    private let inboxPrefix: String
    /// Whether the server keeps this motherboard to its own host's subjects, checked at each
    /// connection (nil until then): announcing waits for it, and a server with credentials that
    /// does not is left.
    private var keptToItsSubjects: Bool?
    /// When the permissions were last checked without an answer (tried again a second later).
    private var lastPermissionCheck: ContinuousClock.Instant?
    private var ids = IDSource()
    /// The proof of this gateway to its own motherboard, asked until answered.
    private var attachment: BrokerAttachment
    /// This motherboard's boards, as pushed by the broker.
    private var localBoards: [ScopedName: Registration] = [:]
    /// A local board served to the cluster: as it registered here, and its request subscription.
    private struct Exported {
        var registration: Registration
        var subscription: Int?
    }
    private var exported: [ScopedName: Exported] = [:]
    /// A local store served to the cluster: by how many exported boards that own it, its request
    /// subscription; this gateway watches it on its motherboard (renewed each second).
    private struct ServedStore {
        var owners: Int
        var subscription: Int?
    }
    private var servedStores: [ScopedName: ServedStore] = [:]
    /// Local boards another motherboard serves already, said once each.
    private var loggedConflicts: Set<ScopedName> = []
    private var peers: [String: Peer] = [:]
    private var remote: [ScopedName: RemoteBoard] = [:]
    private var registrations = PendingRegistrations()
    private var outgoing = DeadlineTable<Outgoing>()
    /// Kept 5 s past their deadline: a late answer is still matched, and dropped.
    private var incoming = DeadlineTable<Incoming>(keepingPastDeadline: .seconds(5))
    private var lastAnnounce: ContinuousClock.Instant?
    private var lastKeepAlive: ContinuousClock.Instant?
    private var announceSoon = true
    /// What each of the gateway's standing subscriptions is for, by its number.
    private enum Role { case announce, withdraw, hello, inbox, actions }
    private var roles: [Int: Role] = [:]
    /// The outputs of a board of another motherboard (by subscription number): its flows run here.
    private var outputSubscriptions: [Int: ScopedName] = [:]
    /// Actions sent to the cluster whose sender waits: the answers gathered so far, by the number
    /// the inbox subject ends in.
    private var gatherings = DeadlineTable<Gathering>()

    private struct Gathering: Expiring {
        var token: String
        var correlationID: UInt64
        /// The motherboards whose answer is awaited.
        var waiting: Set<String>
        var delivered: Int
        var deadline: ContinuousClock.Instant
    }
    /// The store whose changes each change subscription hears (by subscription number), and the
    /// board of another motherboard that owns it here.
    private var changeSubscriptions: [Int: (owner: ScopedName, store: String)] = [:]
    private var lastRenewal: ContinuousClock.Instant?
    /// When each kind of refused announcement was last logged (once a minute each).
    private var lastRefusedAnnouncement: [AnnouncementRefusal: ContinuousClock.Instant] = [:]
    private enum AnnouncementRefusal { case limits, host, instance }
    private var lastErrorLog: ContinuousClock.Instant?
    private var suppressedErrors = 0
    /// The most motherboards of the fleet this one knows, and boards each may announce.
    static let maximumPeers = 256
    static let maximumBoardsPerPeer = 4096
    /// What one motherboard's answer to an action may count at most (an answer is anyone's word).
    static let maximumDeliveredPerPeer = 1 << 20

    init(settings: NATSGatewaySettings, context: ZMQContext, localEndpoint: String, secret: String, limits: BusLimits, logger: Logger) throws {
        self.settings = settings
        self.subjects = settings.subjects
        self.limits = limits
        self.logger = logger
        self.attachment = BrokerAttachment(operation: ControlOperation.exportAttach, secret: secret)
        let instance = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        self.instance = instance
        inboxPrefix = "\(settings.subjects.inbox(host: settings.host)).\(instance)"
        var made: [ZMQSocket] = []
        do {
            for _ in 0..<2 {
                let socket = try ZMQSocket(context: context, kind: .dealer)
                made.append(socket)
                try socket.set(.linger(.zero), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000))
                try socket.connect(localEndpoint)
            }
            connection = try NATSConnection(settings: settings.nats, readHeaders: NATSHeader.all)
        } catch {
            made.forEach { $0.close() }
            throw error
        }
        local = made[0]
        served = made[1]
    }

    package func start() {
        thread.start(name: "nats") { [self] in run() }
    }

    package func stop() {
        thread.stop()
    }

    private func run() {
        let clock = ContinuousClock()
        do {
            roles = [
                try connection.subscribe(subjects.anyAnnounce): .announce, try connection.subscribe(subjects.anyWithdraw): .withdraw,
                try connection.subscribe(subjects.hello): .hello, try connection.subscribe("\(inboxPrefix).*"): .inbox,
                try connection.subscribe(subjects.anyAction): .actions,
            ]
            try connection.publish(subjects.hello, payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
        } catch {
            logger.error("cannot subscribe to the fleet's NATS subjects", metadata: ["error": "\(error)"])
        }
        if !connection.isConnected {
            logger.warning("no NATS server answers yet: trying again every 250 ms", metadata: ["servers": "\(settings.nats)"])
        }
        while thread.isRunning {
            if keptToItsSubjects == nil, connection.isConnected, lastPermissionCheck.map({ $0.duration(to: clock.now) >= .seconds(1) }) ?? true {
                lastPermissionCheck = clock.now
                checkPermissions()
            }
            if keptToItsSubjects == false { break }
            tick(now: clock.now)
            let ready = ZMQSocket.poll([local, served], descriptor: connection.wakeDescriptor, timeoutMilliseconds: 100)
            if ready.sockets[0] { local.drainEnvelopes(limits: limits) { fromOwnMotherboard($0, now: clock.now) } }
            if ready.sockets[1] { served.drainEnvelopes(limits: limits) { forServedBoard($0, now: clock.now) } }
            if ready.descriptor {
                for item in connection.take() {
                    switch item {
                    case .event(let event): connectionChanged(event)
                    case .message(let message): fromCluster(message, now: clock.now)
                    }
                }
            }
        }
        // Leaving: the cluster is told, the boards of others unregistered here.
        try? connection.publish(subjects.withdraw(host: settings.host), payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
        for (name, board) in remote { forget(name, board) }
        for (id, pending) in incoming {
            answerCluster(pending, Envelope.error(BusError(.unreachable, "the motherboard is stopping"), correlationID: id))
        }
        connection.close()
        local.close()
        served.close()
    }

    /// A reply subject's random part: 128 bits, in hex.
    private static func makeToken() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 16) + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    /// Whether the server lets this motherboard publish as another host: it tries a subject under
    /// the token no host has (`~`, the empty name's). Refused, as fleet/nats/server.conf has it,
    /// the gateway goes on. Let through on a server this motherboard gave credentials to, the
    /// cluster is misconfigured (any of its motherboards could speak for the others): the gateway
    /// leaves it, loudly. A server that asks no credentials trusts everyone: said, and gone on.
    private func checkPermissions() {
        let probe = subjects.output("probe", scope: .root, typeName: "probe", host: "")
        guard let allowed = connection.mayPublish(on: probe, timeout: .seconds(2)) else { return }
        guard allowed else {
            keptToItsSubjects = true
            return logger.info("the NATS server keeps this motherboard to its host's subjects", metadata: ["host": "\(settings.host)"])
        }
        guard settings.nats.hasCredentials else {
            keptToItsSubjects = true
            return logger.warning(
                "the NATS server asks no credentials: anyone who reaches it can publish as any motherboard of the fleet (fleet/nats/server.conf keeps each to its own subjects)",
                metadata: ["servers": "\(settings.nats)"])
        }
        keptToItsSubjects = false
        let reason =
            "the NATS server lets this motherboard's user publish as another host (\(probe)): not joining the fleet; give each motherboard's user only its own host's subjects, as fleet/nats/server.conf does"
        logger.critical("\(reason)", metadata: ["servers": "\(settings.nats)", "host": "\(settings.host)"])
        FileHandle.standardError.write(Data("motherboard: NATS: \(reason)\n".utf8))
    }

    private func connectionChanged(_ event: NATSConnection.Event) {
        switch event {
        case .disconnected(let epoch):
            logger.warning("NATS connection lost; reconnecting", metadata: ["host": "\(settings.host)"])
            // Answers to what was in flight would come to the server that is gone: its callers
            // hear now, not at their deadline. What was sent after the drop waits in libnats's
            // buffer and goes when the connection is made again.
            for (id, pending) in outgoing where pending.epoch < epoch {
                outgoing[id] = nil
                let error = BusError(
                    .unreachable,
                    "the connection to the NATS cluster was lost with the request to '\(pending.board)' in flight: it may or may not have been carried out"
                )
                sendAsBoard(pending.board, Envelope.error(error, correlationID: pending.correlationID))
            }
        case .reconnected(let url):
            logger.notice("NATS connection made", metadata: ["server": "\(url)"])
            announceSoon = true
            // Perhaps another node of the cluster, perhaps configured otherwise: checked again.
            if keptToItsSubjects == true { (keptToItsSubjects, lastPermissionCheck) = (nil, nil) }
            // The others may have forgotten this motherboard meanwhile, and it them.
            try? connection.publish(subjects.hello, payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
        case .error(let text):
            // A consumer that falls behind hears one per message dropped: said once a second.
            let now = ContinuousClock.now
            guard lastErrorLog.map({ $0.duration(to: now) >= .seconds(1) }) ?? true else {
                suppressedErrors += 1
                return
            }
            logger.warning("NATS error", metadata: ["error": "\(text)", "more since the last": "\(suppressedErrors)"])
            lastErrorLog = now
            suppressedErrors = 0
        }
    }

    // MARK: - Time

    private func tick(now: ContinuousClock.Instant) {
        if let request = attachment.request(now: now, ids: &ids) { _ = try? local.send(request) }
        // Another motherboard silent past the expiry is gone, and its boards with it.
        let expired = peers.filter { $0.value.lastHeard.duration(to: now) > Self.expiry }.map(\.key)
        if !expired.isEmpty {
            for instance in expired {
                logger.warning(
                    "a motherboard of the fleet is silent: its boards are gone", metadata: ["host": "\(peers[instance]!.announcement.host)"])
                peers[instance] = nil
                for id in gatherings.keys { heardFrom(instance, delivered: 0, gathering: id) }
            }
            reconcile(now: now)
        }
        if announceSoon || lastAnnounce.map({ $0.duration(to: now) >= Self.announceInterval }) ?? true { announce(now: now) }
        if lastRenewal.map({ $0.duration(to: now) >= .seconds(1) }) ?? true {
            lastRenewal = now
            for store in servedStores.keys { watchLocal(store, operation: StoreOperation.renew) }
        }
        if lastKeepAlive.map({ $0.duration(to: now) >= .milliseconds(500) }) ?? true {
            lastKeepAlive = now
            for name in remote.keys { registrations.keepAlive(&remote[name]!.link, as: name, now: now, id: ids.make()) }
        }
        for (_, pending) in outgoing.takeExpired(now: now) {
            sendAsBoard(
                pending.board,
                Envelope.error(
                    BusError(.timeout, "no answer from the NATS cluster in time for '\(pending.board)'"), correlationID: pending.correlationID))
        }
        _ = incoming.takeExpired(now: now)
        for (_, gathering) in gatherings.takeExpired(now: now) {
            answerAction(gathering.correlationID, delivered: gathering.delivered)
        }
    }

    private func announce(now: ContinuousClock.Instant) {
        guard attachment.isAttached, keptToItsSubjects == true else { return }
        announceSoon = false
        lastAnnounce = now
        let boards = exported.keys.sorted().compactMap { exported[$0]?.registration }
        let announcement = NATSAnnouncement(
            instance: instance, host: settings.host, joined: joined, intervalMilliseconds: Int(Self.announceInterval.components.seconds * 1000),
            boards: boards, actions: true)
        do {
            try connection.publish(subjects.announce(host: settings.host), payload: PayloadCodec.encodeOrEmpty(announcement))
        } catch {
            logger.debug("announcement not sent", metadata: ["error": "\(error)"])
        }
    }

    // MARK: - Who serves what

    private var rank: Rank { Rank(joined: joined, instance: instance) }

    /// After any change of this motherboard's boards or of what the others announce: exports the
    /// local boards no earlier motherboard serves, registers here the others' boards.
    private func reconcile(now: ContinuousClock.Instant) {
        // The owner of each id the cluster announces: the earliest motherboard.
        var owners: [ScopedName: (rank: Rank, instance: String, registration: Registration, host: String)] = [:]
        for (instance, peer) in peers {
            for registration in peer.announcement.boards {
                let name = ScopedName(scope: registration.scope, name: registration.id.rawValue)
                if let owner = owners[name], owner.rank < peer.rank { continue }
                owners[name] = (peer.rank, instance, registration, peer.announcement.host)
            }
        }
        var changed = false
        // Local boards: served to the cluster unless an earlier motherboard serves the id.
        for (name, registration) in localBoards {
            if let owner = owners[name], owner.rank < rank {
                if exported[name] != nil { changed = true }
                unexport(name)
                if loggedConflicts.insert(name).inserted {
                    logger.error(
                        "board is served by another motherboard of the fleet, which joined first: not served to the cluster (one id is one board across hosts)",
                        metadata: ["board": "\(name)", "host": "\(owner.host)"])
                }
            } else if exported[name]?.registration != registration {
                // New, or registered again with something else (commands, stores).
                unexport(name)
                export(name, registration)
                changed = true
            }
        }
        for name in exported.keys where localBoards[name] == nil {
            unexport(name)
            changed = true
        }
        // Other motherboards' boards: registered here while their owner announces them.
        for (name, board) in remote {
            guard let owner = owners[name], exported[name] == nil else {
                forget(name, board)
                continue
            }
            // Registered again with something else: registered again here.
            var known = board.link.registration
            known.secret = nil
            guard Self.imported(owner.registration, host: owner.host) == known else {
                forget(name, board)
                continue
            }
            // Its motherboard restarted (a new instance on the same host): the same board, kept.
            remote[name]?.instance = owner.instance
        }
        for (name, owner) in owners where remote[name] == nil && exported[name] == nil {
            var registration = Self.imported(owner.registration, host: owner.host)
            registration.secret = Registration.makeSecret()
            var board = RemoteBoard(link: HelperBoard(connection: served, registration: registration), instance: owner.instance)
            // Only under its host's token: an output or change another host publishes for it
            // never reaches this motherboard.
            if let number = try? connection.subscribe(subjects.anyOutput(board: name.name, scope: name.scope, host: owner.host)) {
                board.subscriptions.append(number)
                outputSubscriptions[number] = name
            }
            for store in registration.stores {
                guard let number = try? connection.subscribe(subjects.changes(store: store, scope: name.scope, host: owner.host)) else { continue }
                board.subscriptions.append(number)
                changeSubscriptions[number] = (name, store)
            }
            remote[name] = board
            registrations.register(&remote[name]!.link, as: name, now: now, id: ids.make())
        }
        if changed { announceSoon = true }
    }

    /// Another motherboard's board as the gateway registers it here (no secret yet): it shares the
    /// gateway's connection, names its host, and takes no action (the gateway delivers those).
    private static func imported(_ announced: Registration, host: String) -> Registration {
        var registration = announced
        registration.actions = []
        registration.secret = nil
        registration.sharesConnection = true
        registration.host = host
        registration.schemas = nil
        return registration
    }

    /// A board of another motherboard leaves this one.
    private func forget(_ name: ScopedName, _ board: RemoteBoard) {
        board.link.close()
        for number in board.subscriptions {
            connection.unsubscribe(number)
            changeSubscriptions[number] = nil
            outputSubscriptions[number] = nil
        }
        remote[name] = nil
    }

    /// Watches (or renews, or ends the watch of) a local store whose changes go to the cluster.
    private func watchLocal(_ store: ScopedName, operation: String) {
        var header = EnvelopeHeader(kind: .store, target: store.name, scope: store.scope, typeName: operation)
        if operation != StoreOperation.renew {
            header.flags.insert(.replyExpected)
            header.correlationID = ids.make()
        }
        _ = try? local.send(Envelope(header: header))
    }

    private func export(_ name: ScopedName, _ registration: Registration) {
        loggedConflicts.remove(name)
        var subscription: Int?
        do {
            subscription = try connection.subscribe(subjects.anyRequest(board: name.name, scope: name.scope))
        } catch {
            logger.error("cannot serve a board to the NATS cluster", metadata: ["board": "\(name)", "error": "\(error)"])
        }
        exported[name] = Exported(registration: registration, subscription: subscription)
        for store in registration.stores {
            let key = ScopedName(scope: name.scope, name: store)
            if var served = servedStores[key] {
                served.owners += 1
                servedStores[key] = served
                continue
            }
            servedStores[key] = ServedStore(owners: 1, subscription: try? connection.subscribe(subjects.anyRequest(store: store, scope: name.scope)))
            watchLocal(key, operation: StoreOperation.subscribe)
        }
    }

    private func unexport(_ name: ScopedName) {
        guard let gone = exported.removeValue(forKey: name) else { return }
        if let subscription = gone.subscription { connection.unsubscribe(subscription) }
        for store in gone.registration.stores {
            let key = ScopedName(scope: name.scope, name: store)
            guard var served = servedStores[key] else { continue }
            served.owners -= 1
            guard served.owners == 0 else {
                servedStores[key] = served
                continue
            }
            servedStores[key] = nil
            if let subscription = served.subscription { connection.unsubscribe(subscription) }
            watchLocal(key, operation: StoreOperation.unsubscribe)
        }
    }

    // MARK: - From the cluster

    private func fromCluster(_ message: NATSMessage, now: ContinuousClock.Instant) {
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
                _ = try? served.send(Envelope(header: header, payload: message.payload))
            } else if let board = outputSubscriptions[message.subscription] {
                outputFromCluster(message, board: board)
            } else {
                request(message, now: now)
            }
        }
    }

    /// An action of another motherboard: delivered here (the broker answers with how many
    /// subscribers took it; this motherboard never sends it on).
    private func actionFromCluster(_ message: NATSMessage, now: ContinuousClock.Instant) {
        guard let action = subjects.action(message.subject) else { return refuse(message, BusError(.malformed, "not an action subject")) }
        handToBroker(EnvelopeHeader(kind: .action, scope: action.scope, typeName: action.name), message, now: now)
    }

    /// What came from the cluster goes to the broker on behalf of the cluster's principal; its
    /// answer is awaited (at most ``NATSGatewaySettings/maximumInFlight`` at once: past that, or
    /// when the broker cannot take it, the asker hears why at once).
    private func handToBroker(_ header: EnvelopeHeader, _ message: NATSMessage, now: ContinuousClock.Instant) {
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
            refusal = try local.send(Envelope(header: header, payload: message.payload)) == .sent ? nil : "its queue is full"
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
    private func outputFromCluster(_ message: NATSMessage, board name: ScopedName) {
        guard remote[name]?.link.registered == true else { return }
        let tokens = message.subject.split(separator: ".", omittingEmptySubsequences: false)
        guard let last = tokens.last, let typeName = NATSSubjects.untoken(last), !typeName.isEmpty else { return }
        var header = EnvelopeHeader(kind: .output, source: name.name, scope: name.scope, typeName: typeName)
        _ = readHeaders(message.headers, into: &header)
        _ = try? served.send(Envelope(header: header, payload: message.payload))
    }

    /// The BoardBus fields a message's NATS headers carry; returns how long its sender waits.
    /// A field that would make the header one the codec refuses is left out (the message goes on
    /// without it), as PROTOCOL §10 says.
    private func readHeaders(_ headers: [String: String], into header: inout EnvelopeHeader) -> Duration {
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
    private static func timeout(of header: EnvelopeHeader) -> Duration {
        header.timeoutMilliseconds > 0 ? .milliseconds(Int64(header.timeoutMilliseconds)) : defaultTimeout
    }

    /// The NATS headers of a BoardBus header's fields.
    private func natsHeaders(_ header: EnvelopeHeader) -> [(String, String)] {
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
    private func actionToCluster(_ envelope: Envelope, now: ContinuousClock.Instant) {
        let header = envelope.header
        let subject = subjects.action(header.typeName, scope: header.scope, host: settings.host)
        let waits = header.flags.contains(.replyExpected) && header.correlationID != 0
        guard waits else {
            try? connection.publish(subject, headers: natsHeaders(header), payload: envelope.payload)
            return
        }
        // Those that deliver actions answer; with none, the others still hear it.
        let answering = Set(peers.filter { $0.value.announcement.actions == true }.keys)
        guard !answering.isEmpty else {
            try? connection.publish(subject, headers: natsHeaders(header), payload: envelope.payload)
            return answerAction(header.correlationID, delivered: 0)
        }
        let id = ids.make()
        let token = Self.makeToken()
        let timeout = Self.timeout(of: header)
        gatherings[id] = Gathering(
            token: token, correlationID: header.correlationID, waiting: answering, delivered: 0, deadline: now.advanced(by: timeout * 3 / 4))
        do {
            try connection.publish(subject, reply: "\(inboxPrefix).\(id)-\(token)", headers: natsHeaders(header), payload: envelope.payload)
        } catch {
            gatherings[id] = nil
            answerAction(header.correlationID, delivered: 0)
        }
    }

    /// Motherboard `instance` answered (or left) for the action gathered under `id`.
    private func heardFrom(_ instance: String, delivered: Int, gathering id: UInt64) {
        guard var gathering = gatherings[id], gathering.waiting.remove(instance) != nil else { return }
        gathering.delivered = min(gathering.delivered + delivered, Self.maximumDeliveredPerPeer * Self.maximumPeers)
        if gathering.waiting.isEmpty {
            gatherings[id] = nil
            answerAction(gathering.correlationID, delivered: gathering.delivered)
        } else {
            gatherings[id] = gathering
        }
    }

    private func answerAction(_ correlationID: UInt64, delivered: Int) {
        let header = EnvelopeHeader(kind: .reply, correlationID: correlationID)
        _ = try? local.send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(Delivery(delivered: delivered))))
    }

    private func heardAnnouncement(_ message: NATSMessage, now: ContinuousClock.Instant) {
        guard var announcement = try? PayloadCodec.decode(NATSAnnouncement.self, from: message.payload), announcement.instance != instance,
            (1...64).contains(announcement.instance.utf8.count), (1...255).contains(announcement.host.utf8.count),
            !announcement.host.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { return }
        // A motherboard speaks for its own host only: the subject's host token is the one the
        // server let its user publish under.
        guard subjects.host(ofMembership: message.subject) == announcement.host else {
            return refuseAnnouncement(.host, "an announcement of host '\(announcement.host.escapedForDisplay())' on \(message.subject)", now: now)
        }
        // One instance is one host: an instance heard from another host is another's.
        if let known = peers[announcement.instance], known.announcement.host != announcement.host {
            return refuseAnnouncement(.instance, "instance \(announcement.instance) announced by two hosts", now: now)
        }
        // What the cluster can make this motherboard hold is bounded: so many motherboards, so
        // many boards each; past that, an announcement is ignored (said once a minute).
        let known = peers[announcement.instance]
        guard known != nil || peers.count < Self.maximumPeers else {
            return refuseAnnouncement(.limits, "more than \(Self.maximumPeers) motherboards", now: now)
        }
        announcement.boards = announcement.boards.filter { BoardID.isValid($0.id.rawValue) }
        guard announcement.boards.count <= Self.maximumBoardsPerPeer else {
            return refuseAnnouncement(.limits, "more than \(Self.maximumBoardsPerPeer) boards from \(announcement.host)", now: now)
        }
        peers[announcement.instance] = Peer(announcement: announcement, lastHeard: now)
        if known == nil {
            logger.info("a motherboard of the fleet joined", metadata: ["host": "\(announcement.host)", "boards": "\(announcement.boards.count)"])
            announceSoon = true
        }
        if known?.announcement.boards != announcement.boards || known?.announcement.host != announcement.host { reconcile(now: now) }
    }

    private func refuseAnnouncement(_ kind: AnnouncementRefusal, _ reason: String, now: ContinuousClock.Instant) {
        guard lastRefusedAnnouncement[kind].map({ $0.duration(to: now) >= .seconds(60) }) ?? true else { return }
        lastRefusedAnnouncement[kind] = now
        logger.error("NATS announcement ignored", metadata: ["reason": "\(reason)"])
    }

    /// A request for a board (or store) served here: handed to the broker as a client's.
    private func request(_ message: NATSMessage, now: ContinuousClock.Instant) {
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

    private func refuse(_ message: NATSMessage, _ error: BusError) {
        guard let reply = message.reply, Self.isAnswerable(reply) else { return }
        answerCluster(Incoming(reply: reply, deadline: .now, trace: nil, traceState: nil), Envelope.error(error, correlationID: 0))
    }

    /// The broker's answer to a request from the cluster goes to the requester's inbox.
    private func answerCluster(_ pending: Incoming, _ answer: Envelope) {
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
            try connection.publish(reply, headers: headers, payload: answer.payload)
        } catch let error as BusError where error.code == .tooLarge && answer.header.kind != .error {
            // The requester hears why at once rather than waiting out its deadline.
            let refusal = BusError(.tooLarge, "the answer is \(answer.payload.count) bytes: \(error.message)")
            answerCluster(pending, Envelope.error(refusal, correlationID: answer.header.correlationID))
        } catch {
            logger.debug("answer to the cluster not sent", metadata: ["error": "\(error)"])
        }
    }

    /// An answer on this motherboard's inbox: to the board request it sent.
    private func answered(_ message: NATSMessage) {
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

    // MARK: - From this motherboard

    private func fromOwnMotherboard(_ envelope: Envelope, now: ContinuousClock.Instant) {
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
            if remote[name]?.link.registered == false { registrations.register(&remote[name]!.link, as: name, now: now, id: ids.make()) }
        case .reply, .error:
            guard let pending = incoming.removeValue(forKey: header.correlationID) else { return }
            answerCluster(pending, envelope)
        case .action:
            actionToCluster(envelope, now: now)
        case .output:
            // Only the outputs of a board this motherboard serves to the cluster.
            guard exported[ScopedName(scope: header.scope, name: header.source)] != nil else { return }
            try? connection.publish(
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
            try? connection.publish(
                subjects.changes(store: header.target, scope: header.scope, host: settings.host), headers: headers, payload: envelope.payload)
        default:
            return
        }
    }

    /// A message of the broker for a board of another motherboard: registration answers,
    /// heartbeats, and requests, sent on through NATS.
    private func forServedBoard(_ envelope: Envelope, now: ContinuousClock.Instant) {
        let header = envelope.header
        if header.kind == .reply || header.kind == .error, header.correlationID != 0 {
            guard let name = registrations.take(header.correlationID) else { return }
            return fromBroker(envelope, board: name, now: now)
        }
        if header.kind == .dispatch || header.kind == .store {
            let owner = remote.keys.filter { $0.scope == header.scope && remote[$0]?.link.registration.stores.contains(header.target) == true }.min()
            guard let owner else { return }
            return fromBroker(envelope, board: owner, now: now)
        }
        fromBroker(envelope, board: ScopedName(scope: header.scope, name: header.target), now: now)
    }

    private func fromBroker(_ envelope: Envelope, board name: ScopedName, now: ContinuousClock.Instant) {
        guard var board = remote[name] else { return }
        let wasRegistered = board.link.registered
        switch board.link.read(envelope) {
        case .heartbeat, .otherAnswer:
            return
        case .accepted:
            board.lastRefusal = nil
            remote[name] = board
            logger.info("board of another host registered", metadata: ["board": "\(name)", "host": "\(board.link.registration.host ?? "")"])
        case .refused(let error):
            if wasRegistered || error.description != board.lastRefusal {
                logger.warning("board of another host not registered here", metadata: ["board": "\(name)", "answer": "\(error)"])
            }
            board.lastRefusal = error.description
            remote[name] = board
            if error.code == .notRegistered { registrations.register(&remote[name]!.link, as: name, now: now, id: ids.make()) }
        case .request:
            sendToCluster(envelope, board: name, now: now)
        }
    }

    /// A request of this motherboard for a board of another: a NATS request on its subject.
    private func sendToCluster(_ envelope: Envelope, board name: ScopedName, now: ContinuousClock.Instant) {
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
                epoch: connection.disconnections)
        }
        do {
            try connection.publish(subject, reply: reply?.subject, headers: headers, payload: envelope.payload)
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
    private func sendAsBoard(_ name: ScopedName, _ envelope: Envelope) {
        var envelope = envelope
        envelope.header.source = name.name
        envelope.header.scope = name.scope
        _ = try? served.send(envelope)
    }
}

extension NATSGateway: Gateway {
    package var description: String { settings.description }
}

extension NATSGatewaySettings {
    /// The fleet name when none is given.
    public static let defaultFleet = "boardbus"
}
