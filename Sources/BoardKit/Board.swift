import BusCore
import FoundationEssentials
import Glibc
import Logging
import ServiceLifecycle

/// A message as it arrived, for handlers that take any type.
public struct RawMessage: Sendable, Hashable {
    /// The board that sent or produced it (empty for tools).
    public var source: String
    /// Its type name (input/output type or action name).
    public var typeName: String
    /// The payload, JSON by default.
    public var payload: Data
    /// The payload's content type from the header (nil: JSON). A command's reply is labelled
    /// with the same content type, so a raw handler answers in the format it was asked in.
    public var contentType: String?

    public init(source: String, typeName: String, payload: Data, contentType: String? = nil) {
        self.source = source
        self.typeName = typeName
        self.payload = payload
        self.contentType = contentType
    }

    init(_ envelope: Envelope) {
        source = envelope.header.source
        typeName = envelope.header.typeName
        payload = envelope.payload
        contentType = envelope.header.contentType
    }

    /// The payload decoded as `type` in its content type, or `typeMismatch`
    /// (`unsupportedContentType` for a content type this version does not read).
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try PayloadCodec.decode(T.self, from: payload, format: PayloadFormat(contentType: contentType))
    }
}

/// A board: what a service author writes to make a board process.
///
/// ```swift
/// var board = Board(id: GreeterIO.id)
/// board.onCommand(GreeterIO.Greet.self) { greet, context in
///     GreeterIO.Greeting(message: "Hello, \(greet.name)!")
/// }
/// try await board.run()
/// ```
/// `run()` connects to the motherboard named by the environment, registers with the board's
/// interface, prints `READY <id>`, handles messages until SIGTERM/SIGINT or `complete()`, then
/// says goodbye and returns.
public struct Board: Sendable {
    @usableFromInline typealias Handler = @Sendable (Envelope, BoardContext) async throws -> Data
    /// A command handler that answers on the socket thread. A struct around the closure: a
    /// closure kept in a dictionary as itself is re-abstracted (a heap allocation) every time it
    /// is taken out, which this one is on every command.
    @usableFromInline struct ImmediateHandler: Sendable {
        @usableFromInline let run: @Sendable (Envelope, BoardContext) throws -> Data
        @inlinable init(_ run: @escaping @Sendable (Envelope, BoardContext) throws -> Data) { self.run = run }
    }

    /// The board's id. `$BOARDBUS_BOARD_ID` overrides it, so one executable can serve several ids.
    public let id: BoardID
    /// The motherboard scope (`$BOARDBUS_SCOPE`, else the root scope).
    public let scope: Scope
    // Used from the inlinable registration methods, so that a service's handlers are specialised
    // for its own types (the payload coding of a typed handler runs on every message).
    /// The input types of its typed activation handlers, in the order they were declared.
    @usableFromInline var inputTypes: [String] = []
    @usableFromInline var activationHandlers: [String: Handler] = [:]
    @usableFromInline var inputSchemas: [String: PayloadSchema] = [:]
    var anyActivationHandler: Handler?
    @usableFromInline var commandHandlers: [String: Handler] = [:]
    @usableFromInline var immediateCommandHandlers: [String: ImmediateHandler] = [:]
    var actionHandlers: [String: Handler] = [:]
    var outputTypes: [String] = []
    /// The shapes of the typed handlers' payloads, recorded as they are registered.
    @usableFromInline var schemas = BoardSchemas()
    var startHandlers: [@Sendable (BoardContext) async throws -> Void] = []
    var storeEndpoints: [String: any StoreEndpoint] = [:]
    /// The pid its registration gives instead of this process's: the in-process fleet's name for
    /// a board its broker started, as a launched process's pid is.
    package var registrationPID: Int32?

    public init(id: BoardID, environment: [String: String] = ProcessInfo.processInfo.environment) {
        let override = environment["BOARDBUS_BOARD_ID"].flatMap { try? BoardID(validating: $0) }
        self.id = override ?? id
        self.scope = Scope(environment["BOARDBUS_SCOPE"] ?? "")
    }

    /// Handles `activate(input)` of type `Input`. The board declares `Input` as an input type (a
    /// guaranteed board); call it once per type for a board that takes several (the answer to a
    /// request it made, say). An input of a type it declares no handler for is refused with
    /// `typeMismatch`, unless ``onAnyActivation(_:)`` takes the rest.
    @inlinable
    public mutating func onActivate<Input: BusPayload>(
        _: Input.Type, _ handler: @escaping @Sendable (Input, BoardContext) async throws -> Void
    ) {
        if activationHandlers[Input.busTypeName] == nil { inputTypes.append(Input.busTypeName) }
        inputSchemas[Input.busTypeName] = PayloadSchema.of(Input.self)
        activationHandlers[Input.busTypeName] = { envelope, context in
            try await handler(PayloadCodec.decode(Input.self, from: envelope.payload), context)
            return Data()
        }
    }

    /// Handles every activation no typed handler takes, whatever its input type, with the raw
    /// payload (a board with no typed handler is not guaranteed: it declares no input type).
    public mutating func onAnyActivation(_ handler: @escaping @Sendable (RawMessage, BoardContext) async throws -> Void) {
        anyActivationHandler = { envelope, context in
            try await handler(RawMessage(envelope), context)
            return Data()
        }
    }

    /// The handler of an activation whose header names `typeName`: its typed handler (a sender
    /// that names no type reaches a board's only one), else the catch-all.
    func activationHandler(for typeName: String) throws -> Handler {
        if let typed = activationHandlers[typeName] { return typed }
        if typeName.isEmpty, inputTypes.count == 1, let only = activationHandlers[inputTypes[0]] { return only }
        if let anyActivationHandler { return anyActivationHandler }
        guard !inputTypes.isEmpty else { throw BusError(.typeMismatch, "board '\(id)' takes no activation input") }
        let expected = inputTypes.joined(separator: " or ")
        throw BusError(.typeMismatch, "board '\(id)' expects input \(expected), received \(typeName.isEmpty ? "none named" : typeName)")
    }

    /// Handles a command by name with its raw payload, answering with raw bytes, on the socket
    /// thread (like a synchronous typed handler): for boards that pass payloads through, such as
    /// gateways, and that need not decode them.
    public mutating func onCommand(named name: String, _ handler: @escaping @Sendable (RawMessage, BoardContext) throws -> Data) {
        commandHandlers[name] = nil
        immediateCommandHandlers[name] = ImmediateHandler { envelope, context in try handler(RawMessage(envelope), context) }
    }

    /// Subscribes to an action by name, with the raw payload.
    public mutating func onAction(named name: String, _ handler: @escaping @Sendable (RawMessage, BoardContext) async throws -> Void) {
        actionHandlers[name] = { envelope, context in
            try await handler(RawMessage(envelope), context)
            return Data()
        }
    }

    /// Handles an interaction command and answers with its reply.
    @inlinable
    public mutating func onCommand<Command: BoardCommand>(
        _: Command.Type, _ handler: @escaping @Sendable (Command, BoardContext) async throws -> Command.Reply
    ) {
        immediateCommandHandlers[Command.commandName] = nil
        schemas.commands[Command.commandName] = BoardSchemas.Command(request: .of(Command.self), reply: .of(Command.Reply.self))
        commandHandlers[Command.commandName] = { envelope, context in
            // Decoded from, and answered in, the request's content type (JSON unless it names CBOR).
            let format = try PayloadFormat(contentType: envelope.header.contentType)
            let reply = try await handler(PayloadCodec.decode(Command.self, from: envelope.payload, format: format), context)
            return try PayloadCodec.encode(reply, format: format)
        }
    }

    /// Handles an interaction command with a synchronous handler (one with no `await`, which
    /// Swift picks for such closures). It runs on the socket's thread as the message arrives and
    /// answers with no task and no thread hop: the fast path for queries. It must not block.
    @inlinable
    public mutating func onCommand<Command: BoardCommand>(
        _: Command.Type, _ handler: @escaping @Sendable (Command, BoardContext) throws -> Command.Reply
    ) {
        commandHandlers[Command.commandName] = nil
        schemas.commands[Command.commandName] = BoardSchemas.Command(request: .of(Command.self), reply: .of(Command.Reply.self))
        immediateCommandHandlers[Command.commandName] = ImmediateHandler { envelope, context in
            let format = try PayloadFormat(contentType: envelope.header.contentType)
            return try PayloadCodec.encode(
                handler(PayloadCodec.decode(Command.self, from: envelope.payload, format: format), context), format: format)
        }
    }

    /// Subscribes to an action name: every `sendAction` of that name reaches this handler.
    public mutating func onAction<Action: BoardAction>(
        _: Action.Type, _ handler: @escaping @Sendable (Action, BoardContext) async throws -> Void
    ) {
        schemas.actions[Action.actionName] = PayloadSchema.of(Action.self)
        actionHandlers[Action.actionName] = { envelope, context in
            try await handler(PayloadCodec.decode(Action.self, from: envelope.payload), context)
            return Data()
        }
    }

    /// Declares an output type the board sends with `sendToMotherboard` (shown by `busctl introspect`).
    public mutating func declaresOutput<Output: BusPayload>(_: Output.Type) {
        if !outputTypes.contains(Output.busTypeName) { outputTypes.append(Output.busTypeName) }
        schemas.outputs[Output.busTypeName] = PayloadSchema.of(Output.self)
    }

    /// Hosts a store: other processes dispatch to it, read and watch its state through the bus.
    public mutating func host(_ store: some StoreEndpoint) {
        storeEndpoints[store.storeName] = store
    }

    /// Runs once the board has registered, before any message is handled: the place to register
    /// run-time flows (`context.registerFlow`). A failure stops the board. It runs again after
    /// the board registers with a restarted motherboard, which knows none of its flows.
    public mutating func onStart(_ handler: @escaping @Sendable (BoardContext) async throws -> Void) {
        startHandlers.append(handler)
    }

    /// The schemas the registration carries: the board's own and its stores'.
    private var registeredSchemas: BoardSchemas? {
        var all = schemas
        all.input = inputTypes.first.flatMap { inputSchemas[$0] }
        if inputTypes.count > 1 { all.inputs = inputSchemas }
        let stores = storeEndpoints.compactMapValues(\.schema)
        if !stores.isEmpty { all.stores = stores }
        return all.isEmpty ? nil : all
    }

    /// The registration the board sends to the motherboard.
    var registration: Registration {
        Registration(
            id: id, pid: registrationPID ?? getpid(), scope: scope, inputType: inputTypes.first, inputTypes: inputTypes.count > 1 ? inputTypes : nil,
            commands: Set(commandHandlers.keys).union(immediateCommandHandlers.keys).sorted(),
            actions: actionHandlers.keys.sorted(), outputTypes: outputTypes, stores: storeEndpoints.keys.sorted(),
            secret: Board.registrationSecret, schemas: registeredSchemas)
    }

    /// This process's registration secret: the one the motherboard handed it when it started the
    /// process (`BOARDBUS_BOARD_SECRET`), else one made up at first use. Only a registration that
    /// carries it can take this board's id over from its live registration (after a reconnect).
    static let registrationSecret: String = {
        if let given = ProcessInfo.processInfo.environment["BOARDBUS_BOARD_SECRET"], !given.isEmpty { return given }
        return Registration.makeSecret()
    }()

    /// Connects, registers and serves until SIGTERM/SIGINT or `complete()`: the main of a board
    /// process. A failure that ends the board (its id taken, `idInUse`; no motherboard) is
    /// printed as one line on standard error (`board ID: CODE: MESSAGE`) and the process exits
    /// with status 1, rather than trapping at the top level. ``runAsProcess(logging:environment:)``
    /// does the same on fewer threads, from a synchronous `main`.
    /// `logging`: who owns swift-log in this process (``BoardLogging``).
    public func run(logging: BoardLogging = .standardError, environment: [String: String] = ProcessInfo.processInfo.environment) async throws {
        if let status = await serve(logging: logging, environment: environment, stopSignals: nil) { exit(status) }
    }

    /// The whole of a board process: serves as ``run(logging:environment:)`` does, then exits
    /// (status 0 when the board stopped, 1 on a failure, printed as `run` prints it). Called from
    /// a synchronous `main.swift` (no top-level `await`) before any other thread or task is made
    /// (else it refuses, `badArgument`), it runs every
    /// task of the process without a thread pool: the handlers on the socket's thread, the rest
    /// on the main thread, which also takes SIGTERM and SIGINT. An idle board is then four
    /// threads (main, the socket loop, libzmq's I/O and reaper) that sleep until a message, a
    /// timer or a signal comes, whatever the number of cores. As on an event loop, handlers
    /// and tasks must not block their thread. Child processes inherit SIGTERM and SIGINT
    /// blocked unless their launcher resets the mask (Foundation's `Process` and
    /// swift-subprocess do).
    public func runAsProcess(logging: BoardLogging = .standardError, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> Never
    {
        do {
            try ProcessExecutor.run(stopSignals: [SIGTERM, SIGINT]) { stops in
                await serve(logging: logging, environment: environment, stopSignals: stops) ?? 0
            }
        } catch {
            printFailure(error)
            exit(1)
        }
    }

    /// Serves until the board stops; returns the status to exit with after a failure (printed),
    /// nil when it stopped. `stopSignals` nil: the service group traps SIGTERM and SIGINT itself.
    private func serve(logging: BoardLogging, environment: [String: String], stopSignals: AsyncStream<Int32>?) async -> Int32? {
        var logger: Logger
        switch logging {
        case .standardError: logger = Logger(label: "board") { BusLogging.handler(label: $0, environment: environment) }
        case .bootstrapProcess:
            BusLogging.bootstrap(environment: environment)
            logger = Logger(label: "board")
        case .processOwned: logger = Logger(label: "board")
        }
        logger[metadataKey: "board"] = "\(id)"
        do {
            let client = try BusClient(environment: environment, probe: false)
            let runtime = BoardRuntime(board: self, client: client, logger: logger)
            let group = ServiceGroup(
                configuration: .init(services: [runtime], gracefulShutdownSignals: stopSignals == nil ? [.sigterm, .sigint] : [], logger: logger))
            guard let stopSignals else {
                try await group.run()
                return nil
            }
            try await withThrowingDiscardingTaskGroup { tasks in
                tasks.addTask {
                    for await _ in stopSignals {
                        await group.triggerGracefulShutdown()
                        return
                    }
                }
                try await group.run()
                tasks.cancelAll()
            }
            return nil
        } catch {
            printFailure(error)
            return 1
        }
    }

    private func printFailure(_ error: any Error) {
        let described = (error as? BusError)?.description ?? "\(error)"
        writeLine("board \(id): \(described.escapedForDisplay(limit: 2_000))\n", to: STDERR_FILENO)
    }

    /// The board as a service on `client`, for a host that runs boards in its own process
    /// (BoardKitTesting's in-process fleet): it registers, calls `onReady`, handles messages until
    /// graceful shutdown or `complete()`, then says goodbye. Nothing is printed.
    package func service(on client: BusClient, logger: Logger, onReady: @escaping @Sendable () -> Void) -> any Service {
        BoardRuntime(board: self, client: client, logger: logger, announce: false, onReady: onReady)
    }
}

/// Who owns swift-log in a board process: swift-log allows one `LoggingSystem.bootstrap` per
/// process and cannot tell whether it happened, so the board is told.
public enum BoardLogging: Sendable {
    /// BoardKit's own lines go to standard error at `$BOARDBUS_LOG`'s level through a handler of
    /// its own; the process's logging system is left alone (swift-log's default, or what the
    /// process bootstraps, before or after: its own backend, swift-otel). The default: safe
    /// either way.
    case standardError
    /// BoardKit bootstraps the process's logging system with its standard-error handler, so that
    /// the handlers' own `Logger`s follow `$BOARDBUS_LOG` too. Only for a process that bootstraps
    /// nothing else (a second bootstrap traps).
    case bootstrapProcess
    /// The process bootstrapped swift-log itself (its own backend, swift-otel): BoardKit's lines
    /// go there too.
    case processOwned
}
