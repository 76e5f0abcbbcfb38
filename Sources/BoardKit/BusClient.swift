import BusCore
import BusZeroMQ
import FoundationEssentials
import Glibc
import Synchronization

/// A connection to the motherboard: a DEALER socket on its own thread, with requests matched to
/// replies by correlation id and every wait bounded by a deadline.
///
/// Boards use it through ``Board``; tools such as `busctl` and tests use it directly.
public final class BusClient: Sendable {
    /// The default deadline of a request, as systemd's busctl: 25 s.
    public static let defaultTimeout: Duration = .seconds(25)

    public let address: BusAddress
    let limits: BusLimits
    /// Where deadlines are read.
    package let clock: BusClock
    private let connection: any BusConnection
    private let state: ClientState
    private let format = Atomic<UInt8>(0)

    /// The format typed commands (``interact(with:_:scope:timeout:retries:format:)``) travel in:
    /// JSON by default, which every peer reads; CBOR is compact and much cheaper to code for
    /// large strings and numbers, and every BoardKit board reads it. Replies come back in the
    /// format of their request.
    public var payloadFormat: PayloadFormat {
        get { PayloadFormat.allCases[Int(format.load(ordering: .relaxed))] }
        set { format.store(UInt8(PayloadFormat.allCases.firstIndex(of: newValue)!), ordering: .relaxed) }
    }

    /// Connects to the broker at `address`. With `probe`, fails at once with `brokerNotRunning`
    /// when nothing listens on an `ipc://` endpoint, or with `unauthorized` when the broker closes
    /// the connection unanswered (it admits its own user only), instead of waiting for a timeout.
    public convenience init(address: BusAddress, probe: Bool = true, limits: BusLimits = .default) throws {
        if probe { try EndpointProbe.checkListening(address, greeting: .milliseconds(500)) }
        try self.init(connection: ZeroMQConnection(address: address, limits: limits), address: address, limits: limits)
    }

    /// A client over any connection (BoardKitTesting's in-process fleet passes an in-memory one).
    package init(connection: any BusConnection, address: BusAddress, limits: BusLimits = .default, clock: BusClock = .continuous) {
        self.address = address
        self.limits = limits
        self.clock = clock
        self.connection = connection
        self.state = ClientState(connection: connection, clock: clock)
        connection.start(state)
    }

    /// Connects to the bus named by the environment (`$BOARDBUS_ADDRESS`, `$BOARDBUS_RUNTIME_DIR`…).
    public convenience init(environment: [String: String] = ProcessInfo.processInfo.environment, probe: Bool = true) throws {
        try self.init(address: BusAddress.resolve(environment: environment, userID: getuid()), probe: probe)
    }

    /// Messages that are not replies to this client's requests (activations, commands, actions,
    /// heartbeats, unsolicited errors) go to `handler`, on the socket thread: keep it short.
    public func onMessage(_ handler: @escaping @Sendable (Envelope) -> Void) {
        state.setMessageHandler(handler)
    }

    /// Runs `handler` on the socket thread about every 50 ms, with a way to send without a hop.
    public func onTick(_ handler: @escaping @Sendable () -> Void) {
        state.setTickHandler(handler)
    }

    /// Sends a message that expects no reply.
    public func send(_ envelope: consuming Envelope) throws {
        if envelope.header.trace == nil, let trace = BusTrace.current {
            envelope.header.trace = trace
            envelope.header.traceState = BusTrace.currentState
        }
        let headerBytes = try checkSize(envelope)
        connection.send(envelope, headerBytes: headerBytes)
    }

    /// Sends a request and waits for its reply. Throws the `BusError` of an error reply, or
    /// `timeout` when no answer comes before `timeout` (which travels in the header, so the broker
    /// gives up at the same moment).
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`): from a task on ``executor``, the
    /// request leaves and its reply resumes the caller without any executor switch.
    public nonisolated(nonsending) func request(_ request: consuming Envelope, timeout: Duration = BusClient.defaultTimeout) async throws
        -> Envelope
    {
        if request.header.trace == nil, let trace = BusTrace.current {
            request.header.trace = trace
            request.header.traceState = BusTrace.currentState
        }
        // The fields set below have fixed sizes: the header's size stays the one checked.
        let headerBytes = try checkSize(request)
        request.header.flags.insert(.replyExpected)
        request.header.correlationID = state.makeCorrelationID()
        request.header.timeoutMilliseconds = UInt32(clamping: timeout.wholeMilliseconds)
        let correlationID = request.header.correlationID
        let deadline = clock.now().advanced(by: timeout)
        let connection = self.connection
        let state = self.state
        let reply: Envelope = try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { continuation in
                state.addPending(correlationID, deadline: deadline, header: request.header, continuation: continuation)
                connection.send(request, headerBytes: headerBytes)
            }
        } onCancel: {
            state.fail(correlationID, with: CancellationError())
        }
        if let error = reply.carriedError { throw error }
        return reply
    }

    /// Sends a request, and again while its target is not running (it may be restarting), until it
    /// is answered or `timeout` has passed in all: for requests that are safe to repeat. Waits
    /// 50 ms between tries, doubling up to 1 s.
    public nonisolated(nonsending) func request(_ envelope: Envelope, timeout: Duration, retryingWhileNotRunning: Bool) async throws -> Envelope {
        try await request(envelope, timeout: timeout, retryingOn: retryingWhileNotRunning ? Self.retryable : [])
    }

    /// Sends a request, and again after each error whose code is in `codes`, until it is answered
    /// or `timeout` has passed in all. `outcomeUnknown` belongs there only for requests that
    /// are safe to repeat, such as a dispatch with a dispatch id.
    public nonisolated(nonsending) func request(_ envelope: Envelope, timeout: Duration, retryingOn codes: Set<BusError.Code>) async throws
        -> Envelope
    {
        guard !codes.isEmpty else { return try await request(envelope, timeout: timeout) }
        let deadline = RetryDeadline(after: timeout, on: clock)
        var pause = Duration.milliseconds(50)
        while true {
            do {
                return try await request(envelope, timeout: deadline.remaining)
            } catch let error as BusError where codes.contains(error.code) {
                guard deadline.allows(pause) else { throw error }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(1))
            }
        }
    }

    /// Errors that say the request did not reach its target, which is not there now, though it
    /// may be soon.
    public static let retryable: Set<BusError.Code> = [.boardNotRunning, .noSuchBoard, .noSuchStore]

    /// The executor of the client's socket thread. Tasks that prefer it
    /// (`withTaskExecutorPreference(client.executor) { … }`) run beside the socket: a reply resumes
    /// them and their next request goes out with no thread hop. They must not block.
    public var executor: any TaskExecutor { connection.executor }

    static func describe(_ header: EnvelopeHeader) -> String {
        let what = header.typeName.isEmpty ? "\(header.kind)" : "\(header.subject)"
        return "\(what) to " + (header.target.isEmpty ? "the motherboard" : "'\(header.target)'")
    }

    /// What a waiting request remembers of its header to say which one timed out: three fields,
    /// not the whole header (a request in flight is copied into the pending table and out again).
    struct RequestSummary {
        let kind: MessageKind
        let typeName: String
        let target: String

        init(_ header: EnvelopeHeader) {
            (kind, typeName, target) = (header.kind, header.typeName, header.target)
        }

        var description: String {
            BusClient.describe(EnvelopeHeader(kind: kind, target: target, typeName: typeName))
        }
    }

    /// Closes the socket (the process's shared context stays). Pending requests fail with `transport`.
    public func close() {
        if connection.isCurrentThread {
            // The socket thread cannot wait for itself: finish closing from another thread.
            startThread(named: "bus-close") { self.close() }
            return
        }
        connection.stop()
        state.close()
    }

    /// Starts delivering the messages the broker pushes for `subscription` to it; returns the id
    /// that ``removeSubscription(_:)`` takes.
    package func addSubscription(_ subscription: any BusSubscription) -> UUID {
        state.addSubscription(subscription)
    }

    package func removeSubscription(_ id: UUID) {
        state.removeSubscription(id)
    }

    /// Refuses, before anything is queued, a header field over its limit (`badArgument`) or a
    /// payload over the limit (`tooLarge`): the caller gets the reason, not a timeout. Returns the
    /// header's size.
    private func checkSize(_ envelope: Envelope) throws -> Int {
        let headerBytes = try HeaderCodec.validatedSize(envelope.header)
        guard envelope.payload.count <= limits.maximumPayloadBytes else {
            throw BusError(.tooLarge, "payload of \(envelope.payload.count) bytes is over the limit of \(limits.maximumPayloadBytes)")
        }
        return headerBytes
    }
}

/// The client's shared state: pending requests and handlers. The socket thread reads it, callers
/// add to it; a mutex guards it.
final class ClientState: BusConnectionHandler, @unchecked Sendable {
    private struct Pending {
        /// Not a `ContinuousClock.Instant`, whose layout is not fixed: a request is stored and
        /// taken on every call.
        var deadline: FixedInstant
        /// Which request it is, to say so if it times out (described only then).
        var request: BusClient.RequestSummary
        var continuation: UnsafeContinuation<Envelope, any Error>
    }

    /// The handler of messages that are not answers. A class around the closure: a closure
    /// returned through `withLock`'s generic result is re-abstracted (heap allocations) on every
    /// message.
    private final class MessageHandler: Sendable {
        let handle: @Sendable (Envelope) -> Void
        init(_ handle: @escaping @Sendable (Envelope) -> Void) { self.handle = handle }
    }

    private struct Guarded {
        var pending = CorrelationTable<Pending>()
        var messageHandler: MessageHandler?
        var tickHandler: (@Sendable () -> Void)?
        var subscriptions: [UUID: any BusSubscription] = [:]
        var lastRenewal: FixedInstant?
        var closed = false
    }

    private let guarded = Mutex(Guarded())
    private let nextCorrelationID = Atomic<UInt64>(0)
    /// Weak: the connection holds this state as its handler.
    private weak var connection: (any BusConnection)?
    private let clock: BusClock

    init(connection: any BusConnection, clock: BusClock) {
        self.connection = connection
        self.clock = clock
    }

    /// The next request's correlation id: 1, 2, 3… (lock-free: taken on every request).
    func makeCorrelationID() -> UInt64 {
        nextCorrelationID.wrappingAdd(1, ordering: .relaxed).newValue
    }

    func setMessageHandler(_ handler: @escaping @Sendable (Envelope) -> Void) {
        let handler = MessageHandler(handler)
        guarded.withLock { $0.messageHandler = handler }
    }

    func setTickHandler(_ handler: @escaping @Sendable () -> Void) {
        guarded.withLock { $0.tickHandler = handler }
    }

    /// Remembers a request until its answer or deadline; after ``close()`` it fails at once
    /// (nothing would ever answer or expire it).
    func addPending(_ id: UInt64, deadline: ContinuousClock.Instant, header: EnvelopeHeader, continuation: UnsafeContinuation<Envelope, any Error>) {
        let added = guarded.withLock { state in
            guard !state.closed else { return false }
            state.pending.insert(
                Pending(deadline: FixedInstant(deadline), request: BusClient.RequestSummary(header), continuation: continuation), for: id)
            return true
        }
        if !added { continuation.resume(throwing: Self.closedError) }
    }

    static let closedError = BusError(.transport, "connection closed")

    func fail(_ id: UInt64, with error: any Error) {
        let pending = guarded.withLock { $0.pending.removeValue(forKey: id) }
        pending?.continuation.resume(throwing: error)
    }

    /// The connection closed: every waiting request fails with `transport`, and so does every
    /// later one.
    func close() {
        let all = guarded.withLock { state in
            state.closed = true
            return state.pending.removeAll()
        }
        for pending in all { pending.continuation.resume(throwing: Self.closedError) }
    }

    func addSubscription(_ subscription: any BusSubscription) -> UUID {
        let id = UUID()
        let now = FixedInstant(clock.now())
        guarded.withLock {
            $0.subscriptions[id] = subscription
            // A subscription subscribes as it starts: the renewals begin a second after the first.
            if $0.lastRenewal == nil { $0.lastRenewal = now }
        }
        return id
    }

    func removeSubscription(_ id: UUID) {
        _ = guarded.withLock { $0.subscriptions.removeValue(forKey: id) }
    }

    func received(_ envelope: consuming Envelope) {
        let kind = envelope.header.kind
        if kind == .reply || kind == .error, envelope.header.correlationID != 0 {
            let correlationID = envelope.header.correlationID
            let pending = guarded.withLock { $0.pending.removeValue(forKey: correlationID) }
            pending?.continuation.resume(returning: consume envelope)
            return
        }
        // One lock for both: the subscriptions a pushed message is for, else the board's handler.
        let (subscribers, handler) = guarded.withLock { state in
            (state.subscriptions.isEmpty ? [] : state.subscriptions.values.filter { $0.matches(envelope.header) }, state.messageHandler)
        }
        for subscriber in subscribers { subscriber.receive(envelope) }
        // A store's change (and the broker's word that a subscription was made again) is a push,
        // never a request: one that no watch here wants any more (it arrives after the watch
        // ended, until the broker forgets the subscription) is dropped.
        let push = kind == .store && StoreOperation.pushes.contains(envelope.header.typeName)
        guard subscribers.isEmpty, !push else { return }
        handler?.handle(envelope)
    }

    func tick() {
        let now = clock.now()
        expireRequests(now: now)
        renewSubscriptions(now: now)
        let tickHandler = guarded.withLock { $0.tickHandler }
        tickHandler?()
    }

    /// Fails with `timeout` every request whose deadline is `now` or earlier.
    func expireRequests(now: ContinuousClock.Instant) {
        let now = FixedInstant(now)
        let expired = guarded.withLock { state in state.pending.removeAll { $0.deadline <= now } }
        for (_, pending) in expired {
            pending.continuation.resume(throwing: BusError(.timeout, "no answer to \(pending.request.description) in time"))
        }
    }

    /// How many requests wait for an answer.
    var pendingCount: Int { guarded.withLock { $0.pending.count } }

    /// Every second, each subscription is renewed, so that a restarted motherboard (which knows no
    /// subscriptions) forwards its messages again; what was missed meanwhile shows as a gap, which
    /// the subscriber repairs (a store watch takes a new snapshot).
    private func renewSubscriptions(now: ContinuousClock.Instant) {
        let now = FixedInstant(now)
        let subscriptions = guarded.withLock { state -> [any BusSubscription] in
            guard state.lastRenewal.map({ now.duration(since: $0) >= .seconds(1) }) ?? true else { return [] }
            state.lastRenewal = now
            return Array(state.subscriptions.values)
        }
        for subscription in subscriptions {
            connection?.send(subscription.renewal, headerBytes: nil)
        }
    }
}

/// Messages the broker pushes to a client unasked (a store's changes to its watchers), and the
/// message that subscribes to them again, sent every second so that a restarted broker learns of
/// the subscription. The library that owns the kind of message implements it (FluxBus's store
/// watch); the client only routes.
package protocol BusSubscription: AnyObject, Sendable {
    /// Whether a pushed message is for this subscription.
    func matches(_ header: EnvelopeHeader) -> Bool
    /// A message for it arrived (on the client's socket thread: must not block).
    func receive(_ envelope: Envelope)
    /// The message that renews the subscription.
    var renewal: Envelope { get }
}
