import BusCore

/// Timing and limits of the broker, with documented defaults.
public struct MotherboardSettings: Sendable, Hashable {
    /// How often the broker heartbeats each board, and asks boards to heartbeat. Default 500 ms.
    public var heartbeatInterval: Duration
    /// A board not heard from for this long is dropped. Default 2.5 s, so that a dead board leaves
    /// `list` within 3 s.
    public var livenessTimeout: Duration
    /// Deadline for forwarded requests whose header carries none. Default 25 s.
    public var defaultRequestTimeout: Duration
    /// How long a board started on demand has to register before its queued inputs fail. Default 15 s.
    public var startTimeout: Duration
    /// Inputs queued per board while it starts; more are refused with `busy`. Default 64.
    public var activationQueueLimit: Int
    /// Size limits of incoming messages.
    public var limits: BusLimits
    /// Bytes of large messages (4 KiB and more) the broker queues toward one peer that does not
    /// read them (its socket stays over half full) before it refuses more to it and answers its
    /// requests `busy` (``ConnectionBacklog``). Default 32 MiB.
    public var maximumUnreadBytesPerPeer: Int
    /// How long a board on another host whose link failed is kept (shown `unreachable`) before
    /// it is forgotten. Default 10 minutes.
    public var unreachableRetention: Duration = .seconds(600)

    public init(
        heartbeatInterval: Duration = .milliseconds(500),
        livenessTimeout: Duration = .milliseconds(2500),
        defaultRequestTimeout: Duration = .seconds(25),
        startTimeout: Duration = .seconds(15),
        activationQueueLimit: Int = 64,
        limits: BusLimits = .default,
        maximumUnreadBytesPerPeer: Int = BusLimits.defaultMaximumUnreadBytesPerPeer
    ) {
        self.heartbeatInterval = heartbeatInterval
        self.livenessTimeout = livenessTimeout
        self.defaultRequestTimeout = defaultRequestTimeout
        self.startTimeout = startTimeout
        self.activationQueueLimit = activationQueueLimit
        self.limits = limits
        self.maximumUnreadBytesPerPeer = maximumUnreadBytesPerPeer
    }
}

/// Counters the broker keeps for `flows`, `status` and logs.
public struct MotherboardCounters: Sendable, Hashable {
    /// Frames that could not be parsed.
    public var malformedMessages = 0
    /// Requests answered `busy` because their sender did not read its earlier answers.
    public var refusedWhileStalled = 0
    /// Registrations refused because their id belongs to another board (`idInUse`).
    public var refusedRegistrations = 0
    /// Outputs no flow listened to.
    public var droppedOutputs = 0
    /// Outputs a guaranteed flow ignored because of their type.
    public var ignoredByType = 0
    /// Messages that could not be delivered because the peer's queue was full or it was gone.
    public var undeliverable = 0
    /// Requests that reached their deadline in the broker.
    public var timedOutRequests = 0
    /// Board processes started on demand.
    public var onDemandStarts = 0
    /// Requests of remote principals the access policy refused (`forbidden`).
    public var denied = 0
    /// At-least-once activations delivered again after their board ended holding them.
    public var redeliveries = 0
    /// At-least-once activations put on the dead-letter list.
    public var deadLettered = 0
    /// At-least-once activations their board failed (a transient error), to deliver again after its backoff.
    public var failedDeliveries = 0
    /// Stuck boards the watchdog ended.
    public var watchdogEnds = 0
    /// Activations nobody waited for that their board refused (`input.refused`).
    public var refusedInputs = 0
    /// Requests refused because their sender's or their board's share of the pending requests was spent.
    public var refusedPending = 0
    /// Store subscriptions refused past a peer's share or the broker's bound.
    public var refusedSubscriptions = 0
    /// Peers whose connection closed, and what the broker kept for them freed.
    public var peersLeft = 0
}
