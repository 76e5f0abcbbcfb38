import BusCore
import FoundationEssentials
import Glibc
import Synchronization

/// The bus operations on raw JSON payloads, as `busctl` uses them. Typed versions are in
/// `BusClient+Typed.swift`.
extension BusClient {
    /// The live boards (`busctl list`).
    public func list(timeout: Duration = BusClient.defaultTimeout) async throws -> BoardList {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.list)), timeout: timeout)
        return try PayloadCodec.decode(BoardList.self, from: reply.payload)
    }

    /// The broker's metrics in the Prometheus text format (`busctl metrics`).
    public func metrics(timeout: Duration = BusClient.defaultTimeout) async throws -> MetricsText {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.metrics)), timeout: timeout)
        return try PayloadCodec.decode(MetricsText.self, from: reply.payload)
    }

    /// One board (`busctl status ID`).
    public func status(_ id: BoardID, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> BoardInfo {
        try await boardOperation(ControlOperation.status, id, scope: scope, timeout: timeout)
    }

    /// Starts a manifest board that is not running, one its restart limit stopped included
    /// (`busctl restart`); returns its status (`starting`).
    public func restart(_ id: BoardID, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> BoardInfo {
        try await boardOperation(ControlOperation.restart, id, scope: scope, timeout: timeout)
    }

    /// The broker's access policy's answer for a principal (`busctl policy check --principal`).
    public func policyCheck(_ question: PolicyCheck, timeout: Duration = BusClient.defaultTimeout) async throws -> PolicyAnswer {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.policyCheck), payload: try PayloadCodec.encode(question))
        return try PayloadCodec.decode(PolicyAnswer.self, from: try await request(envelope, timeout: timeout).payload)
    }

    /// The access policy in force (`busctl policy show`).
    public func policyShow(timeout: Duration = BusClient.defaultTimeout) async throws -> PolicyText {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.policyShow)), timeout: timeout)
        return try PayloadCodec.decode(PolicyText.self, from: reply.payload)
    }

    /// A control operation about one board (`StatusRequest`), answered with its `BoardInfo`.
    private func boardOperation(_ operation: String, _ id: BoardID, scope: Scope, timeout: Duration) async throws -> BoardInfo {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: operation), payload: try PayloadCodec.encode(StatusRequest(id: id, scope: scope)))
        let reply = try await request(envelope, timeout: timeout)
        return try PayloadCodec.decode(BoardInfo.self, from: reply.payload)
    }

    /// Sends an interaction command to a live board and returns its raw reply payload.
    /// With `retries`, a call to a board that is not running (restarting) is tried again until the
    /// timeout: only for commands that are safe to repeat.
    /// `contentType` labels the payload (nil: JSON; see `PayloadFormat`).
    public nonisolated(nonsending) func call(
        _ board: BoardID, command: String, payload: Data, contentType: String? = nil, scope: Scope = .root,
        timeout: Duration = BusClient.defaultTimeout, retries: Bool = false
    ) async throws -> Data {
        // Straight to `request` (not through callForEnvelope and the retrying request): every
        // async layer is a frame allocated and resumed on each call.
        let envelope = Self.command(board, command, payload: payload, contentType: contentType, scope: scope)
        if retries { return try await request(envelope, timeout: timeout, retryingWhileNotRunning: true).payload }
        return try await request(envelope, timeout: timeout).payload
    }

    private static func command(_ board: BoardID, _ command: String, payload: Data, contentType: String?, scope: Scope) -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .command, target: board.rawValue, scope: scope, typeName: command, contentType: contentType),
            payload: payload)
    }

    /// ``call(_:command:payload:contentType:scope:timeout:retries:)``, returning the whole reply
    /// (its header says the reply's content type).
    public nonisolated(nonsending) func callForEnvelope(
        _ board: BoardID, command: String, payload: Data, contentType: String? = nil, scope: Scope = .root,
        timeout: Duration = BusClient.defaultTimeout, retries: Bool = false
    ) async throws -> Envelope {
        let envelope = Self.command(board, command, payload: payload, contentType: contentType, scope: scope)
        if retries { return try await request(envelope, timeout: timeout, retryingWhileNotRunning: true) }
        return try await request(envelope, timeout: timeout)
    }

    /// Activates a live board with an input (`nextToBoard`); returns when the board accepted it.
    public func activate(_ board: BoardID, typeName: String = "", payload: Data, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout)
        async throws
    {
        let envelope = Envelope(header: EnvelopeHeader(kind: .activate, target: board.rawValue, scope: scope, typeName: typeName), payload: payload)
        _ = try await request(envelope, timeout: timeout)
    }

    /// Emits an output as if `source` had sent it (`sendToMotherboard`); returns how many flows ran.
    /// A registered board always emits as itself, whatever `source` says.
    public func emit(from source: BoardID, typeName: String, payload: Data, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout)
        async throws -> Delivery
    {
        let envelope = Envelope(header: EnvelopeHeader(kind: .output, source: source.rawValue, scope: scope, typeName: typeName), payload: payload)
        let reply = try await request(envelope, timeout: timeout)
        return try PayloadCodec.decode(Delivery.self, from: reply.payload)
    }

    /// Sends an action to every board subscribed to `name` (`sendAction`); returns how many got it.
    public func action(_ name: String, payload: Data, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> Delivery {
        let envelope = Envelope(header: EnvelopeHeader(kind: .action, scope: scope, typeName: name), payload: payload)
        let reply = try await request(envelope, timeout: timeout)
        return try PayloadCodec.decode(Delivery.self, from: reply.payload)
    }

    /// Waits until `board` is live, polling `status`, or throws `timeout`.
    public func waitForBoard(_ board: BoardID, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> BoardInfo {
        try await poll(timeout: timeout, what: "board '\(board)' to register") {
            let info = try await self.status(board, scope: scope, timeout: .seconds(2))
            return info.state == .running ? info : nil
        } retryingOn: {
            [.boardNotRunning, .noSuchBoard]
        }
    }

    /// A board's interface and the flows that touch it (`busctl introspect ID`).
    public func introspect(_ id: BoardID, scope: Scope = .root, timeout: Duration = BusClient.defaultTimeout) async throws -> Introspection {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.introspect),
            payload: try PayloadCodec.encode(StatusRequest(id: id, scope: scope)))
        return try PayloadCodec.decode(Introspection.self, from: try await request(envelope, timeout: timeout).payload)
    }

    /// The scopes and their boards (`busctl tree`).
    public func tree(timeout: Duration = BusClient.defaultTimeout) async throws -> ScopeTree {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.tree)), timeout: timeout)
        return try PayloadCodec.decode(ScopeTree.self, from: reply.payload)
    }

    /// Every flow the broker holds (`busctl flows`).
    /// The activations of at-least-once boards that ran out of deliveries (`busctl dead-letters`).
    public func deadLetters(timeout: Duration = BusClient.defaultTimeout) async throws -> DeadLetterList {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLetters)), timeout: timeout)
        return try PayloadCodec.decode(DeadLetterList.self, from: reply.payload)
    }

    /// Delivers a dead letter again, as a new activation (`busctl dead-letters --replay ID`).
    public func replayDeadLetter(_ id: UInt64, timeout: Duration = BusClient.defaultTimeout) async throws {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersReplay),
            payload: try PayloadCodec.encode(DeadLetterReplay(id: id)))
        _ = try await request(envelope, timeout: timeout)
    }

    /// A dead letter with its payload (`busctl dead-letters --show ID`).
    public func deadLetter(_ id: UInt64, timeout: Duration = BusClient.defaultTimeout) async throws -> DeadLetterDetail {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersShow),
            payload: try PayloadCodec.encode(DeadLetterReplay(id: id)))
        return try PayloadCodec.decode(DeadLetterDetail.self, from: try await request(envelope, timeout: timeout).payload)
    }

    /// Takes a dead letter off the list for good (`busctl dead-letters --drop ID`).
    public func dropDeadLetter(_ id: UInt64, timeout: Duration = BusClient.defaultTimeout) async throws {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersDrop),
            payload: try PayloadCodec.encode(DeadLetterReplay(id: id)))
        _ = try await request(envelope, timeout: timeout)
    }

    /// Every store of the live boards (`busctl stores`).
    public func stores(timeout: Duration = BusClient.defaultTimeout) async throws -> StoreList {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.stores)), timeout: timeout)
        return try PayloadCodec.decode(StoreList.self, from: reply.payload)
    }

    public func flows(timeout: Duration = BusClient.defaultTimeout) async throws -> FlowList {
        let reply = try await request(Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.flows)), timeout: timeout)
        return try PayloadCodec.decode(FlowList.self, from: reply.payload)
    }

    /// Waits until every always-on board of the manifest is live; `progress` is told the boards
    /// still waited for whenever they change (not when none are left).
    public func waitForFleet(
        timeout: Duration = BusClient.defaultTimeout, progress: (@Sendable ([BoardID]) -> Void)? = nil
    ) async throws -> BoardList {
        let told = Mutex<[BoardID]?>(nil)
        return try await poll(timeout: timeout, what: "the fleet to be ready") {
            let list = try await self.list(timeout: .seconds(2))
            let changed = told.withLock { told in
                defer { told = list.waitingFor }
                return told != list.waitingFor
            }
            if let progress, changed, !list.waitingFor.isEmpty { progress(list.waitingFor) }
            return list.waitingFor.isEmpty ? list : nil
        } retryingOn: {
            []
        }
    }

    private func poll<T>(
        timeout: Duration, what: String, _ attempt: @escaping () async throws -> T?,
        retryingOn codes: () -> Set<BusError.Code>
    ) async throws -> T {
        let deadline = RetryDeadline(after: timeout, on: clock)
        let retryable = codes().union([.timeout])
        var lastError: BusError?
        while deadline.allows() {
            do {
                if let value = try await attempt() { return value }
            } catch let error as BusError where retryable.contains(error.code) {
                lastError = error
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BusError(.timeout, "timed out waiting for \(what)" + (lastError.map { " (last: \($0))" } ?? ""))
    }
}
