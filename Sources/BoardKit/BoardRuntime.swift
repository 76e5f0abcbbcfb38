import BusCore
import FoundationEssentials
import Glibc
import Logging
import ServiceLifecycle
import Synchronization

/// Runs a ``Board`` as a service: registration, heartbeats, message dispatch, goodbye.
final class BoardRuntime: Service, Sendable {
    private let board: Board
    private let client: BusClient
    private let logger: Logger
    private let completion = CompletionLatch()
    private let flowHandlers = FlowHandlers()
    private let heartbeat: Mutex<HeartbeatSchedule>
    private let registering = Atomic<Bool>(false)
    /// Whether to print `READY <id>` once registered (a board process does, for its launcher).
    private let announce: Bool
    private let onReady: @Sendable () -> Void

    /// What every handler gets; made once (handlers run on every message).
    let context: BoardContext

    init(board: Board, client: BusClient, logger: Logger, announce: Bool = true, onReady: @escaping @Sendable () -> Void = {}) {
        self.board = board
        self.client = client
        self.logger = logger
        self.announce = announce
        self.onReady = onReady
        self.heartbeat = Mutex(HeartbeatSchedule(now: client.clock.now()))
        self.context = BoardContext(
            id: board.id, scope: board.scope, logger: logger, client: client, flowHandlers: flowHandlers, completion: completion)
    }

    func run() async throws {
        let inbox = AsyncStream<Envelope>.makeStream()
        let immediateCommandHandlers = NamedHandlers(board.immediateCommandHandlers)
        client.onMessage { [self] envelope in
            // Synchronous command handlers answer right here on the socket thread; everything
            // else goes through the inbox, in order, to tasks on the same thread.
            if envelope.header.kind == .command, let handler = immediateCommandHandlers[envelope.header.typeName] {
                respond(to: envelope, with: HandlerSpan.runNow(envelope.header) { Result { try handler.run(envelope, context) } })
            } else if envelope.header.kind == .dispatch || envelope.header.kind == .store {
                // Stores apply their messages right here, one at a time, in arrival order.
                respond(to: envelope, with: HandlerSpan.runNow(envelope.header) { Result { try handleStore(envelope) } })
            } else {
                inbox.continuation.yield(envelope)
            }
        }
        client.onTick { [self] in sendHeartbeatIfDue() }
        defer {
            inbox.continuation.finish()
            client.close()
        }
        // Stores publish from the first dispatch on, which may arrive as soon as the broker has
        // accepted the registration.
        for store in board.storeEndpoints.values {
            let name = store.storeName
            let client = self.client
            let source = board.id.rawValue
            let scope = board.scope
            store.attach(
                StorePublisher { payload in
                    let header = EnvelopeHeader(kind: .store, source: source, target: name, scope: scope, typeName: StoreOperation.change)
                    do {
                        try client.send(Envelope(header: header, payload: payload))
                    } catch let error as BusError where error.code == .tooLarge {
                        // Its watchers hear of the change they cannot be sent, by its number.
                        guard let sequence = StoreChangeTooLarge.sequence(of: payload) else { return }
                        let marker = StoreChangeTooLarge(
                            store: name, sequence: sequence, tooLarge: .init(bytes: payload.count, limit: client.limits.maximumPayloadBytes))
                        try? client.send(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(marker)))
                    } catch {}
                })
        }
        try await register(deadline: .seconds(30))
        for start in board.startHandlers { try await start(context) }
        if announce { writeLine("READY \(board.id)\n", to: STDOUT_FILENO) }
        onReady()

        let completed = await withTaskGroup(of: Bool.self) { group in
            // Handlers run on the socket's thread (the client's executor), as on an event loop:
            // a message reaches its handler, and the answer leaves, without a thread hop.
            group.addTask(executorPreference: client.executor) {
                await withDiscardingTaskGroup { handlers in
                    for await envelope in inbox.stream {
                        handlers.addTask { await HandlerSpan.run(envelope.header) { await self.handle(envelope) } }
                    }
                }
                return false
            }
            group.addTask {
                try? await gracefulShutdown()
                return false
            }
            group.addTask {
                for await _ in self.completion.signal.stream { return true }
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        heartbeat.withLock { $0.isActive = false }
        if !completed {
            let goodbye = Envelope(header: EnvelopeHeader(kind: .unregister, source: board.id.rawValue))
            _ = try? await client.request(goodbye, timeout: .seconds(1))
        }
        logger.info("board stopped", metadata: ["completed": "\(completed)"])
    }

    /// Registers, retrying while the broker is not there yet (it may be starting or restarting).
    private func register(deadline: Duration) async throws {
        let end = client.clock.now().advanced(by: deadline)
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .register, source: board.id.rawValue, scope: board.scope),
            payload: try PayloadCodec.encode(board.registration))
        while true {
            do {
                let reply = try await client.request(envelope, timeout: .seconds(2))
                let accepted = try PayloadCodec.decode(RegistrationAccepted.self, from: reply.payload)
                heartbeat.withLock { $0.start(every: .milliseconds(max(50, accepted.heartbeatIntervalMilliseconds))) }
                logger.info("registered", metadata: ["endpoint": "\(client.address.endpoint)"])
                return
            } catch let error as BusError where error.code == .timeout && client.clock.now() < end {
                logger.debug("registration not answered yet; retrying")
            }
        }
    }

    private func sendHeartbeatIfDue() {
        let now = client.clock.now()
        let due = heartbeat.withLock { $0.isDue(at: now) }
        if due {
            try? client.send(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: board.id.rawValue)))
        }
    }

    private func handle(_ envelope: Envelope) async {
        let header = envelope.header
        switch header.subject {
        case .payloadType where header.kind == .activate:
            let delivery = header.deliveryCount.map { ActivationDelivery(id: header.correlationID, count: Int($0)) }
            await ActivationDelivery.$current.withValue(delivery) {
                await answer(envelope) { [board] in
                    try await board.activationHandler(for: header.typeName)(envelope, self.context)
                }
            }
        case .command(let name):
            await answer(envelope) { [board] in
                guard let handler = board.commandHandlers[name] else {
                    let known = board.registration.commands.joined(separator: ", ")
                    throw BusError(.unknownCommand, "board '\(board.id)' has no command '\(name)' (it has: \(known))")
                }
                return try await handler(envelope, self.context)
            }
        case .action(let name):
            await answer(envelope) { [board] in
                try await board.actionHandlers[name]?(envelope, self.context) ?? Data()
            }
        case .payloadType where header.kind == .flowEvent:
            // Field 4, else the correlation id (where a broker without field 4 writes the flow).
            let flow = header.flowID ?? FlowID(header.correlationID)
            guard let handler = flowHandlers.handler(for: flow) else { return }
            do {
                try await handler(envelope, context)
            } catch {
                logger.warning("flow handler failed", metadata: ["flow": "\(flow)", "error": "\(error)"])
            }
        case .error(.notRegistered):
            await reregister()
        default:
            break
        }
    }

    private func handleStore(_ envelope: Envelope) throws -> Data {
        let header = envelope.header
        guard let store = board.storeEndpoints[header.target] else {
            throw BusError(.noSuchStore, "board '\(board.id)' has no store '\(header.target)'")
        }
        return try store.handle(
            StoreRequest(
                kind: header.kind, operation: header.typeName, dispatchID: header.dispatchID, sender: header.source,
                fromOwner: header.source == board.id.rawValue && header.scope == board.scope, payload: envelope.payload,
                timeout: header.timeoutMilliseconds == 0 ? nil : .milliseconds(Int64(header.timeoutMilliseconds))))
    }

    /// Runs a handler and, when the sender waits, answers with its result or its error.
    private func answer(_ envelope: Envelope, _ body: () async throws -> Data) async {
        do {
            respond(to: envelope, with: .success(try await body()))
        } catch {
            respond(to: envelope, with: .failure(error))
        }
    }

    /// Sends the answer to a request (when the sender waits for one); logs refusals.
    private func respond(to envelope: Envelope, with result: Result<Data, any Error>) {
        let answer: Envelope
        switch result {
        case .success(let payload):
            var reply = envelope.reply(payload: payload, source: board.id.rawValue)
            // A command is answered in the content type it was asked in.
            if envelope.header.kind == .command { reply.header.contentType = envelope.header.contentType }
            answer = reply
        case .failure(let error as BusError):
            logger.warning("refused \(envelope.header.kind)", metadata: ["type": "\(envelope.header.typeName)", "error": "\(error)"])
            answer = envelope.errorReply(error, source: board.id.rawValue)
        case .failure(let error):
            let failure = BusError(.handlerFailed, "board '\(board.id)' failed handling \(envelope.header.typeName): \(error)")
            logger.warning("handler failed", metadata: ["type": "\(envelope.header.typeName)", "error": "\(error)"])
            answer = envelope.errorReply(failure, source: board.id.rawValue)
        }
        guard envelope.header.flags.contains(.replyExpected) else {
            // Nobody waits for a refused activation (a flow's input): the broker hears of it, so
            // that it is counted and shown rather than lost unseen.
            if envelope.header.kind == .activate, case .failure = result, let error = answer.carriedError {
                let report = Envelope(
                    header: EnvelopeHeader(kind: .control, source: board.id.rawValue, scope: board.scope, typeName: ControlOperation.inputRefused),
                    payload: PayloadCodec.encodeOrEmpty(InputRefused(type: envelope.header.typeName, error: error)))
                try? client.send(report)
            }
            return
        }
        do {
            try client.send(consume answer)
        } catch let error as BusError {
            try? client.send(envelope.errorReply(error, source: board.id.rawValue))
        } catch {}
    }

    /// The broker does not know us (it restarted): register again, once at a time.
    private func reregister() async {
        guard !registering.exchange(true, ordering: .acquiringAndReleasing) else { return }
        defer { registering.store(false, ordering: .releasing) }
        logger.notice("motherboard does not know this board; registering again")
        do {
            try await register(deadline: .seconds(30))
            // A new motherboard knows none of the flows this board registered: register them again.
            for start in board.startHandlers { try await start(context) }
        } catch {
            logger.error("re-registration failed", metadata: ["error": "\(error)"])
        }
    }
}

/// When a registered board heartbeats: every interval the broker asked for (counted from the
/// last heartbeat), and not before it registered or after it said goodbye.
struct HeartbeatSchedule: Sendable, Equatable {
    private(set) var interval: Duration = .milliseconds(500)
    private(set) var lastSent: ContinuousClock.Instant
    var isActive = false

    init(now: ContinuousClock.Instant) { lastSent = now }

    /// Registered: heartbeats every `interval` from now on.
    mutating func start(every interval: Duration) {
        self.interval = interval
        isActive = true
    }

    /// Whether a heartbeat is due at `now`; if so, it counts as sent.
    mutating func isDue(at now: ContinuousClock.Instant) -> Bool {
        guard isActive, lastSent.duration(to: now) >= interval else { return false }
        lastSent = now
        return true
    }
}

/// A board's handlers by name, for the look-up every command makes: a few are compared in
/// turn (a name of up to 15 bytes is held in two words, compared without hashing), more are
/// hashed.
struct NamedHandlers<Handler: Sendable>: Sendable {
    private let few: [(name: String, handler: Handler)]
    private let many: [String: Handler]

    init(_ handlers: [String: Handler]) {
        (few, many) = handlers.count <= 4 ? (handlers.map { ($0.key, $0.value) }, [:]) : ([], handlers)
    }

    subscript(name: String) -> Handler? {
        guard many.isEmpty else { return many[name] }
        for entry in few where entry.name == name { return entry.handler }
        return nil
    }
}
