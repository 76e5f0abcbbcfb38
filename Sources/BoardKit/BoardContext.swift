import BusCore
import FoundationEssentials
import Glibc
import Logging
import Synchronization

/// What a board's handlers use to talk to the motherboard: the Boardy verbs.
public struct BoardContext: Sendable {
    /// The board's own id.
    public let id: BoardID
    /// The board's motherboard scope.
    public let scope: Scope
    /// A logger with the board id in its metadata.
    public let logger: Logger
    /// The board's connection, for operations on raw JSON payloads.
    public let client: BusClient
    let flowHandlers: FlowHandlers
    let completion: CompletionLatch

    /// `sendToMotherboard(output)`: the motherboard runs every flow from this board. Returns how
    /// many flows ran (0 when nobody listens, which is not an error).
    @discardableResult
    public func sendToMotherboard<Output: BusPayload>(_ output: Output, timeout: Duration = BusClient.defaultTimeout) async throws -> Int {
        try await client.emit(from: id, typeName: Output.busTypeName, payload: PayloadCodec.encode(output), timeout: timeout).delivered
    }

    /// `sendToMotherboard` without waiting for the count of flows: the output leaves at once,
    /// ahead of anything the board sends after it. From a store's observer, which runs before
    /// the dispatch is acknowledged, it makes "acknowledged" imply "announced": a crash after the
    /// acknowledgement cannot lose it (one between the store's write and this call still can).
    public func post<Output: BusPayload>(_ output: Output) throws {
        let header = EnvelopeHeader(kind: .output, source: id.rawValue, scope: scope, typeName: Output.busTypeName)
        try client.send(Envelope(header: header, payload: PayloadCodec.encode(output)))
    }

    /// `nextToBoard`: activates another live board with an input; returns once it accepted it.
    public func nextToBoard<Input>(_ destination: BoardDestination<Input>, with input: Input, timeout: Duration = BusClient.defaultTimeout)
        async throws
    {
        try await client.activate(destination, with: input, timeout: timeout)
    }

    /// `sendAction`: delivers an action to every board subscribed to its name; returns how many.
    @discardableResult
    public func sendAction<Action: BoardAction>(_ action: Action, timeout: Duration = BusClient.defaultTimeout) async throws -> Int {
        try await client.send(action: action, timeout: timeout)
    }

    /// `interactWithOtherBoard`: a command to a live board, answered with its reply; in `format`
    /// (by default the client's ``BusClient/payloadFormat``, JSON unless set).
    public func interact<Command: BoardCommand>(
        with board: BoardID, _ command: Command, timeout: Duration = BusClient.defaultTimeout, format: PayloadFormat? = nil
    ) async throws -> Command.Reply {
        try await client.interact(with: board, command, timeout: timeout, format: format)
    }

    /// `complete(isDone)`: leaves the motherboard, which fires the completion flows of this
    /// board once; the board's `run()` then returns and the process exits. Idempotent: later
    /// calls do nothing.
    public func complete(isDone: Bool = true) async throws {
        guard completion.claim() else { return }
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .complete, source: id.rawValue), payload: try PayloadCodec.encode(Completion(isDone: isDone)))
        defer { completion.finish() }
        _ = try await client.request(envelope, timeout: .seconds(5))
    }

    // MARK: - Flows registered at run time (Boardy's registerFlow…)

    /// Registers a flow owned by this board, in its scope: outputs of `sources` (of `outputType`
    /// only, when given) activate `target`. Returns the flow id. The flow goes when the board does.
    @discardableResult
    public func registerFlow(from sources: [BoardID], outputType: String? = nil, to target: BoardID) async throws -> FlowID {
        try await register(FlowSpec(sources: sources, outputType: outputType, target: target))
    }

    /// Registers a flow whose outputs come to this board: `handler` runs here with each output of
    /// type `Output` from `sources` (a guaranteed flow: outputs of other types are ignored).
    @discardableResult
    public func registerFlow<Output: BusPayload>(
        from sources: [BoardID], output: Output.Type,
        _ handler: @escaping @Sendable (Output, BoardID, BoardContext) async throws -> Void
    ) async throws -> FlowID {
        try await register(FlowSpec(sources: sources, outputType: Output.busTypeName)) { envelope, context in
            let source = try BoardID(validating: envelope.header.source)
            try await handler(PayloadCodec.decode(Output.self, from: envelope.payload), source, context)
        }
    }

    /// Registers a flow whose outputs, of any type, come to this board as raw messages.
    @discardableResult
    public func registerFlow(
        from sources: [BoardID], _ handler: @escaping @Sendable (RawMessage, BoardContext) async throws -> Void
    ) async throws -> FlowID {
        try await register(FlowSpec(sources: sources)) { envelope, context in
            try await handler(RawMessage(envelope), context)
        }
    }

    /// Registers a completion flow: when one of `sources` completes, `target` is activated with
    /// its `Completion`.
    @discardableResult
    public func registerCompletionFlow(from sources: [BoardID], to target: BoardID) async throws -> FlowID {
        try await register(FlowSpec(sources: sources, trigger: .completion, target: target))
    }

    /// Registers a completion flow delivered here: `handler` runs once when a source completes.
    @discardableResult
    public func onCompletion(
        of sources: [BoardID], _ handler: @escaping @Sendable (Completion, BoardID, BoardContext) async throws -> Void
    ) async throws -> FlowID {
        try await register(FlowSpec(sources: sources, trigger: .completion)) { envelope, context in
            let source = try BoardID(validating: envelope.header.source)
            try await handler(PayloadCodec.decode(Completion.self, from: envelope.payload), source, context)
        }
    }

    /// Removes a flow this board registered.
    public func removeFlow(_ id: FlowID) async throws {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.removeFlow),
            payload: try PayloadCodec.encode(FlowRemoval(id: id)))
        _ = try await client.request(envelope, timeout: .seconds(5))
        flowHandlers.remove(id)
    }

    private func register(_ spec: FlowSpec, handler: FlowHandlers.Handler? = nil) async throws -> FlowID {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.registerFlow), payload: try PayloadCodec.encode(spec))
        let flow = try PayloadCodec.decode(FlowInfo.self, from: try await client.request(envelope, timeout: .seconds(5)).payload)
        if let handler { flowHandlers.set(flow.id, handler) }
        return flow.id
    }
}

/// Makes `complete` happen once, and tells the runtime when it has.
final class CompletionLatch: Sendable {
    private let claimed = Atomic<Bool>(false)
    let signal = AsyncStream<Void>.makeStream()

    /// True for the first caller only.
    func claim() -> Bool {
        !claimed.exchange(true, ordering: .acquiringAndReleasing)
    }

    func finish() {
        signal.continuation.yield()
        signal.continuation.finish()
    }
}
