import BusCore
import BusNATS
import Foundation
import Logging

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

/// What a ``NATSSession`` says and hears through: the NATS connection, and its motherboard's
/// in-process endpoint as the exporter (``toMotherboard(_:)``) and as the boards of other hosts
/// (``HelperConnection/sendToBroker(_:)``, a connection they share). ``NATSGateway`` gives a
/// libnats connection and sockets; a test gives a recorder.
package protocol NATSLinks: HelperConnection {
    /// Whether the connection to the cluster is up now.
    var isConnected: Bool { get }
    /// How many times the connection dropped so far (a request sent before a drop is lost with it).
    var disconnections: Int { get }
    func toCluster(_ subject: String, reply: String?, headers: [(String, String)], payload: Data) throws
    /// Subscribes to `subject`; its messages come to ``NATSSession/fromCluster(_:now:)`` with the number returned.
    func subscribe(_ subject: String) throws -> Int
    func unsubscribe(_ number: Int)
    /// Whether the server lets this connection publish on `subject`; nil without an answer in `timeout`.
    func mayPublish(on subject: String, timeout: Duration) -> Bool?
    /// To the motherboard as its client: false when its queue is full; throws when a field is
    /// over its limit.
    func toMotherboard(_ envelope: Envelope) throws -> Bool
}

extension NATSLinks {
    func publish(_ subject: String, reply: String? = nil, headers: [(String, String)] = [], payload: Data) throws {
        try toCluster(subject, reply: reply, headers: headers, payload: payload)
    }
}

/// The NATS gateway's state machine (``NATSGateway`` has the thread, the connection and the
/// sockets): it serves this motherboard's boards and stores to the cluster and registers the
/// boards of the others here (PROTOCOL §10), driven by messages and the time through ``NATSLinks``.
/// Announcing, ranking and reconciling the fleet's boards are in `NATSSession+Peers.swift`, what
/// comes from this motherboard in `+Local`, what comes from the cluster in `+Cluster`.
package final class NATSSession {
    let settings: NATSGatewaySettings
    let logger: Logger
    let links: any NATSLinks
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

    /// A board of another host registered here: which run of its motherboard serves it, and the
    /// subscriptions to its outputs and its stores' changes.
    struct RemoteBoardState {
        var instance: String
        var subscriptions: [Int] = []
    }
    typealias RemoteBoard = ServedBoards<RemoteBoardState>.Board

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
    var remote = ServedBoards<RemoteBoardState>()
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

    init(settings: NATSGatewaySettings, secret: String, logger: Logger, links: any NATSLinks) {
        self.settings = settings
        self.subjects = settings.subjects
        self.logger = logger
        self.links = links
        self.attachment = BrokerAttachment(operation: ControlOperation.exportAttach, secret: secret)
        let instance = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        self.instance = instance
        inboxPrefix = "\(settings.subjects.inbox(host: settings.host)).\(instance)"
    }

    /// Subscribes to the fleet's subjects and says hello (the others announce at once).
    func join() {
        do {
            roles = [
                try links.subscribe(subjects.anyAnnounce): .announce, try links.subscribe(subjects.anyWithdraw): .withdraw,
                try links.subscribe(subjects.hello): .hello, try links.subscribe("\(inboxPrefix).*"): .inbox,
                try links.subscribe(subjects.anyAction): .actions,
            ]
            try links.publish(subjects.hello, payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
        } catch {
            logger.error("cannot subscribe to the fleet's NATS subjects", metadata: ["error": "\(error)"])
        }
        if !links.isConnected {
            logger.warning("no NATS server answers yet: trying again every 250 ms", metadata: ["servers": "\(settings.nats)"])
        }
    }

    /// Whether the server let this motherboard publish as another host with the credentials it
    /// was given: the gateway leaves the cluster.
    var mustLeave: Bool { keptToItsSubjects == false }

    /// Checks the server's permissions once connected (again a second after a check that had no answer).
    func checkPermissionsIfDue(now: ContinuousClock.Instant) {
        guard keptToItsSubjects == nil, links.isConnected, lastPermissionCheck.map({ $0.duration(to: now) >= .seconds(1) }) ?? true else { return }
        lastPermissionCheck = now
        checkPermissions()
    }

    /// Leaving: the cluster is told, the boards of others unregistered here, the cluster's
    /// requests in flight answered `unreachable`.
    func leave() {
        try? links.publish(subjects.withdraw(host: settings.host), payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
        for (name, board) in remote.boards { forget(name, board) }
        for (id, pending) in incoming {
            answerCluster(pending, Envelope.error(BusError(.unreachable, "the motherboard is stopping"), correlationID: id))
        }
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
        guard let allowed = links.mayPublish(on: probe, timeout: .seconds(2)) else { return }
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
            try? links.publish(subjects.hello, payload: PayloadCodec.encodeOrEmpty(NATSInstance(instance: instance)))
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
