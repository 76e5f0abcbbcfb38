import BusCore
import Foundation
import Logging

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
    /// At-least-once activations: the ledger, its journal, what is to be delivered again.
    package var deliveries = Deliveries()
    /// The board processes: starting, running, adopted, completed, and their restarts.
    var supervisor = Supervisor()
    /// Subscribers of each store's changes.
    var subscriptions = StoreSubscriptions()
    /// The links to other motherboards: the uplink, the NATS gateway, boards whose link failed.
    package var links = Links()
    /// `busctl monitor`s attached: while there is none, routing does not look at them.
    @exclusivity(unchecked) var monitors = MonitorTable()
    /// Who may do what: the policy, its decisions, revoked principals, admission rules, audit.
    package let access: AccessControl
    /// The control operations the broker answers, by name (``answerControl(_:_:)``).
    package var controlOperations = Motherboard.defaultControlOperations
    let transport: any MotherboardTransport
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
}
