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
    let limits: BusLimits
    let logger: Logger
    let local: ZMQSocket
    let served: ZMQSocket
    let connection: NATSConnection
    let thread = HelperThread()
    let subjects: NATSSubjects

    static let announceInterval = Duration.seconds(1)
    /// Another motherboard's boards are forgotten after this long without its announcement.
    static let expiry = Duration.milliseconds(3500)
    /// A request that names no timeout waits this long for the cluster's answer.
    static let defaultTimeout = Duration.seconds(25)

    struct Peer {
        var announcement: NATSAnnouncement
        var lastHeard: ContinuousClock.Instant
        var rank: Rank { Rank(joined: announcement.joined, instance: announcement.instance) }
    }

    /// Of two motherboards serving one id, the lower rank keeps it.
    struct Rank: Comparable {
        var joined: Int64
        var instance: String
        static func < (left: Rank, right: Rank) -> Bool { (left.joined, left.instance) < (right.joined, right.instance) }
    }

    struct RemoteBoard {
        var link: HelperBoard
        var instance: String
        var lastRefusal: String?
        /// The subscriptions to its outputs and its stores' changes.
        var subscriptions: [Int] = []
    }

    /// A request of this motherboard sent to the cluster, by the number its inbox subject ends in.
    struct Outgoing: Expiring {
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
    struct Incoming: Expiring {
        var reply: String?
        var deadline: ContinuousClock.Instant
        var trace: TraceContext?
        var traceState: String?
    }

    let instance: String
    let joined = Int64(Date().timeIntervalSince1970 * 1000)
    /// Where the answers to this motherboard's requests come (`_INBOX.boardbus.<fleet>.<host>.<instance>`),
    /// a reply subject being this and `.<number>-<random token>`.
    let inboxPrefix: String
    /// Whether the server keeps this motherboard to its own host's subjects, checked at each
    /// connection (nil until then): announcing waits for it, and a server with credentials that
    /// does not is left.
    var keptToItsSubjects: Bool?
    /// When the permissions were last checked without an answer (tried again a second later).
    var lastPermissionCheck: ContinuousClock.Instant?
    var ids = IDSource()
    /// The proof of this gateway to its own motherboard, asked until answered.
    var attachment: BrokerAttachment
    /// This motherboard's boards, as pushed by the broker.
    var localBoards: [ScopedName: Registration] = [:]
    /// A local board served to the cluster: as it registered here, and its request subscription.
    struct Exported {
        var registration: Registration
        var subscription: Int?
    }
    var exported: [ScopedName: Exported] = [:]
    /// A local store served to the cluster: by how many exported boards that own it, its request
    /// subscription; this gateway watches it on its motherboard (renewed each second).
    struct ServedStore {
        var owners: Int
        var subscription: Int?
    }
    var servedStores: [ScopedName: ServedStore] = [:]
    /// Local boards another motherboard serves already, said once each.
    var loggedConflicts: Set<ScopedName> = []
    var peers: [String: Peer] = [:]
    var remote: [ScopedName: RemoteBoard] = [:]
    var registrations = PendingRegistrations()
    var outgoing = DeadlineTable<Outgoing>()
    /// Kept 5 s past their deadline: a late answer is still matched, and dropped.
    var incoming = DeadlineTable<Incoming>(keepingPastDeadline: .seconds(5))
    var lastAnnounce: ContinuousClock.Instant?
    var lastKeepAlive: ContinuousClock.Instant?
    var announceSoon = true
    /// What each of the gateway's standing subscriptions is for, by its number.
    enum Role { case announce, withdraw, hello, inbox, actions }
    var roles: [Int: Role] = [:]
    /// The outputs of a board of another motherboard (by subscription number): its flows run here.
    var outputSubscriptions: [Int: ScopedName] = [:]
    /// Actions sent to the cluster whose sender waits: the answers gathered so far, by the number
    /// the inbox subject ends in.
    var gatherings = DeadlineTable<Gathering>()

    struct Gathering: Expiring {
        var token: String
        var correlationID: UInt64
        /// The motherboards whose answer is awaited.
        var waiting: Set<String>
        var delivered: Int
        var deadline: ContinuousClock.Instant
    }
    /// The store whose changes each change subscription hears (by subscription number), and the
    /// board of another motherboard that owns it here.
    var changeSubscriptions: [Int: (owner: ScopedName, store: String)] = [:]
    var lastRenewal: ContinuousClock.Instant?
    /// When each kind of refused announcement was last logged (once a minute each).
    var lastRefusedAnnouncement: [AnnouncementRefusal: ContinuousClock.Instant] = [:]
    enum AnnouncementRefusal { case limits, host, instance }
    var lastErrorLog: ContinuousClock.Instant?
    var suppressedErrors = 0
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

    func run() {
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
    static func makeToken() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 16) + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    /// Whether the server lets this motherboard publish as another host: it tries a subject under
    /// the token no host has (`~`, the empty name's). Refused, as fleet/nats/server.conf has it,
    /// the gateway goes on. Let through on a server this motherboard gave credentials to, the
    /// cluster is misconfigured (any of its motherboards could speak for the others): the gateway
    /// leaves it, loudly. A server that asks no credentials trusts everyone: said, and gone on.
    func checkPermissions() {
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

    func connectionChanged(_ event: NATSConnection.Event) {
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
}

extension NATSGateway: Gateway {
    package var description: String { settings.description }
}

extension NATSGatewaySettings {
    /// The fleet name when none is given.
    public static let defaultFleet = "boardbus"
}
