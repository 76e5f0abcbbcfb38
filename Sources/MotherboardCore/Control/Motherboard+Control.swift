import BusCore
import Foundation

extension Motherboard {
    /// Questions for the broker itself, run-time flow registration, monitors, and the operations
    /// between motherboards: looked up in ``controlOperations``; whoever may not call one is refused
    /// before its handler runs.
    func answerControl(_ envelope: Envelope, _ inbound: Inbound) {
        let peer = inbound.peer
        do {
            guard let operation = controlOperations[envelope.header.typeName] else {
                throw BusError(.malformed, "unknown control operation '\(envelope.header.typeName.escapedForDisplay())'")
            }
            switch operation.caller {
            case .anyone: break
            case .registeredBoard(let refusal):
                guard inbound.sender != nil else { throw BusError(.notRegistered, refusal) }
            case .uplink(let refusal):
                guard peerKind(of: peer, sender: inbound.sender) == .uplink else {
                    throw BusError(.unauthorized, refusal)
                }
            }
            try operation.handle(self, envelope, inbound)
        } catch let error as BusError {
            reply(to: envelope, from: peer, error: error)
        } catch {
            reply(to: envelope, from: peer, error: BusError(.malformed, "\(error)"))
        }
    }

    /// The broker's control operations, by name (``ControlOperation``).
    static let defaultControlOperations: [String: ControlOperationHandler] = [
        ControlOperation.list: .init { motherboard, envelope, inbound in
            let waiting = motherboard.manifest.boards.filter {
                $0.start == .always && motherboard.registry[ScopedName(scope: $0.scope, name: $0.id.rawValue)] == nil
            }.map(\.id)
            let lost = motherboard.links.unreachable.values.map(motherboard.unreachableInfo)
            let boards = (motherboard.registry.sorted.map { motherboard.info(for: $0, now: inbound.now) } + lost).sorted {
                ($0.scope, $0.id) < ($1.scope, $1.id)
            }
            motherboard.reply(to: envelope, from: inbound.peer, with: BoardList(boards: boards, waitingFor: waiting))
        },
        ControlOperation.status: .init { motherboard, envelope, inbound in
            let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
            motherboard.reply(
                to: envelope, from: inbound.peer,
                with: try motherboard.boardInfo(ScopedName(scope: request.scope, name: request.id.rawValue), now: inbound.now))
        },
        ControlOperation.introspect: .init { motherboard, envelope, inbound in
            let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
            let name = ScopedName(scope: request.scope, name: request.id.rawValue)
            let board = try motherboard.boardInfo(name, now: inbound.now)
            motherboard.reply(
                to: envelope, from: inbound.peer,
                with: Introspection(
                    board: board, outputTypes: motherboard.registry[name]?.registration.outputTypes ?? [], flows: motherboard.flows.touching(name),
                    schemas: motherboard.registry[name]?.registration.schemas))
        },
        ControlOperation.tree: .init { motherboard, envelope, inbound in
            motherboard.reply(to: envelope, from: inbound.peer, with: motherboard.tree(now: inbound.now))
        },
        ControlOperation.stores: .init { motherboard, envelope, inbound in
            let stores = motherboard.registry.sorted.flatMap { board in
                board.registration.stores.map { name in
                    let schema = board.registration.schemas?.stores?[name]
                    return StoreInfo(
                        store: name, scope: board.scope, board: board.id, actions: schema.map { $0.actions.keys.sorted() } ?? [],
                        state: schema?.state?.summary)
                }
            }
            motherboard.reply(
                to: envelope, from: inbound.peer, with: StoreList(stores: stores.sorted { ($0.scope, $0.store) < ($1.scope, $1.store) }))
        },
        ControlOperation.flows: .init { motherboard, envelope, inbound in
            motherboard.reply(
                to: envelope, from: inbound.peer, with: FlowList(flows: motherboard.flows.flows, droppedOutputs: motherboard.counters.droppedOutputs))
        },
        ControlOperation.registerFlow: .init(caller: .registeredBoard("only a registered board can register a flow; it owns the flow")) {
            motherboard, envelope, inbound in
            guard let owner = inbound.sender else {
                throw BusError(.notRegistered, "only a registered board can register a flow")
            }
            let spec = try PayloadCodec.decode(FlowSpec.self, from: envelope.payload)
            guard !spec.sources.isEmpty else { throw BusError(.badArgument, "a flow needs at least one source") }
            if let principal = inbound.principal,
                let refusal = motherboard.flowForbidden(spec, scope: owner.scope, owner: owner.id, principal: principal)
            {
                throw refusal
            }
            motherboard.reply(to: envelope, from: inbound.peer, with: motherboard.flows.add(scope: owner.scope, owner: owner.id, spec: spec))
        },
        ControlOperation.removeFlow: .init { motherboard, envelope, inbound in
            let removal = try PayloadCodec.decode(FlowRemoval.self, from: envelope.payload)
            try motherboard.flows.remove(
                id: removal.id, requester: inbound.sender?.id, isAdministrator: inbound.sender == nil && inbound.principal == nil)
            motherboard.reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 0))
        },
        ControlOperation.metrics: .init { motherboard, envelope, inbound in
            motherboard.refreshMetrics()
            motherboard.reply(to: envelope, from: inbound.peer, with: MetricsText(text: motherboard.metrics.exposition()))
        },
        ControlOperation.monitor: .init { motherboard, envelope, inbound in
            try motherboard.startMonitor(envelope, from: inbound.peer, principal: inbound.principal, now: inbound.now)
        },
        ControlOperation.ping: .init { motherboard, envelope, inbound in
            motherboard.reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 0))
        },
        ControlOperation.restart: .init { motherboard, envelope, inbound in
            let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
            let name = ScopedName(scope: request.scope, name: request.id.rawValue)
            try motherboard.restart(name, now: inbound.now)
            motherboard.reply(to: envelope, from: inbound.peer, with: try motherboard.boardInfo(name, now: inbound.now))
        },
        ControlOperation.deadLetters: .init { motherboard, envelope, inbound in
            let letters = motherboard.deliveries.ledger.deadLetters.map { kept in
                var letter = kept.letter
                letter.at = DeadLetter.isoTime(letter.time)
                return letter
            }
            motherboard.reply(to: envelope, from: inbound.peer, with: DeadLetterList(letters: letters))
        },
        ControlOperation.deadLettersShow: .init { motherboard, envelope, inbound in
            motherboard.reply(to: envelope, from: inbound.peer, with: try motherboard.showDeadLetter(envelope))
        },
        ControlOperation.deadLettersDrop: .init { motherboard, envelope, inbound in
            try motherboard.dropDeadLetter(envelope)
            motherboard.reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 1))
        },
        ControlOperation.deadLettersReplay: .init { motherboard, envelope, inbound in
            try motherboard.replayDeadLetter(envelope, from: inbound.peer, now: inbound.now)
        },
        ControlOperation.inputRefused: .init(caller: .registeredBoard("only a board reports the inputs it refused")) {
            motherboard, envelope, inbound in
            try motherboard.noteRefusedInput(envelope, from: inbound.peer, now: inbound.now)
        },
        ControlOperation.deliveryTaken: .init(caller: .registeredBoard("only the board an activation was handed to takes it")) {
            motherboard, envelope, inbound in
            try motherboard.takeDelivery(envelope, from: inbound.peer)
        },
        ControlOperation.policyCheck: .init { motherboard, envelope, inbound in try motherboard.answerPolicyCheck(envelope, from: inbound.peer) },
        ControlOperation.policyShow: .init { motherboard, envelope, inbound in motherboard.answerPolicyShow(envelope, from: inbound.peer) },
        // Between motherboards (ours at both ends): the uplink proves itself with its secret, a
        // child's link asks for the chain above, the uplink says what is above its motherboard.
        ControlOperation.uplinkAttach: .init(federation: true) { motherboard, envelope, inbound in
            try motherboard.attachUplink(envelope, from: inbound.peer)
        },
        ControlOperation.exportAttach: .init(federation: true) { motherboard, envelope, inbound in
            try motherboard.attachExporter(envelope, from: inbound.peer)
        },
        ControlOperation.linkChain: .init(federation: true) { motherboard, envelope, inbound in
            try motherboard.answerLinkChain(envelope, from: inbound.peer)
        },
        ControlOperation.uplinkChain: .init(caller: .uplink("only this motherboard's own uplink says what is above it"), federation: true) {
            motherboard, envelope, inbound in
            motherboard.links.ancestors = try PayloadCodec.decode(LinkChain.self, from: envelope.payload).ids
            motherboard.reply(to: envelope, from: inbound.peer, with: Delivery(delivered: 0))
        },
    ]

    /// Starts a manifest board that is not running (`busctl restart`), one its restart limit
    /// stopped included: its limit starts over.
    func restart(_ name: ScopedName, now: ContinuousClock.Instant) throws {
        guard let entry = manifest.board(named: name.name, scope: name.scope) else { throw notLiveError(name) }
        if let board = registry[name] {
            throw BusError(
                .badArgument, "board '\(name)' is running (pid \(board.registration.pid)); stop its process and its restart policy starts it again")
        }
        guard supervisor.starting[name] == nil else { throw BusError(.busy, "board '\(name)' is starting") }
        supervisor.clearFailure(name)
        try startProcess(name, entry: entry, now: now)
        logger.notice("board started by hand", metadata: ["board": "\(name)"])
    }

    /// A live board's info, or a stopped manifest board's, or `noSuchBoard`.
    fileprivate func boardInfo(_ name: ScopedName, now: ContinuousClock.Instant) throws -> BoardInfo {
        if let board = registry[name] { return info(for: board, now: now) }
        if let lost = links.unreachable[name] { return unreachableInfo(lost) }
        if let entry = manifest.board(named: name.name, scope: name.scope) { return stoppedInfo(entry) }
        throw notLiveError(name)
    }

    fileprivate func tree(now: ContinuousClock.Instant) -> ScopeTree {
        ScopeTree(
            scopes: scopes.names.map { scope in
                var boards = registry.sorted.filter { $0.scope == scope }.map { info(for: $0, now: now) }
                boards += links.unreachable.values.filter { $0.board.scope == scope }.map(unreachableInfo)
                let live = Set(boards.map(\.id))
                boards += manifest.boards.filter { $0.scope == scope && !live.contains($0.id) }.map(stoppedInfo)
                return ScopeNode(name: scope, parent: scopes.parent(of: scope), boards: boards.sorted { $0.id < $1.id })
            })
    }

    private func stoppedInfo(_ entry: FleetManifest.Board) -> BoardInfo {
        let name = ScopedName(scope: entry.scope, name: entry.id.rawValue)
        return BoardInfo(
            id: entry.id, scope: entry.scope, pid: 0, state: supervisor.offlineState(of: name), start: entry.start.rawValue,
            inputType: nil, commands: [], actions: [], uptimeSeconds: 0, activations: 0, commandsHandled: 0, actionsDelivered: 0,
            restarts: supervisor.records[name]?.restarts ?? 0, lastExit: supervisor.records[name]?.lastExit)
    }

    func info(for board: LiveBoard, now: ContinuousClock.Instant) -> BoardInfo {
        let registration = board.registration
        let uptime = board.registeredAt.duration(to: now)
        var info = BoardInfo(
            id: registration.id, scope: registration.scope, pid: registration.pid, state: board.busySince == nil ? .running : .busy,
            start: manifest.board(registration.id, scope: registration.scope)?.start.rawValue ?? "external",
            inputType: registration.inputType, commands: registration.commands, actions: registration.actions,
            uptimeSeconds: Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18,
            activations: board.activations, commandsHandled: board.commandsHandled, actionsDelivered: board.actionsDelivered,
            restarts: supervisor.records[board.name]?.restarts ?? 0, lastExit: supervisor.records[board.name]?.lastExit, host: board.host,
            connection: ":\(board.peer)", inputTypes: registration.inputTypes)
        info.refusedInputs = board.refusedInputs > 0 ? board.refusedInputs : nil
        info.lastRefusedInput = board.lastRefusedInput
        return info
    }
}

/// One control operation: who may call it, and what answers it (on the routing loop).
package struct ControlOperationHandler: Sendable {
    /// Who may call an operation; anyone else is refused before it runs.
    package enum Caller: Sendable {
        case anyone
        /// A registered board (it owns what the operation makes); else `notRegistered`, saying this.
        case registeredBoard(String)
        /// This motherboard's own uplink; else `unauthorized`, saying this.
        case uplink(String)
    }

    package let caller: Caller
    /// An operation between motherboards, not for clients (the last rows of PROTOCOL 5.7).
    package let federation: Bool
    package let handle: @Sendable (Motherboard, Envelope, Inbound) throws -> Void

    package init(
        caller: Caller = .anyone, federation: Bool = false,
        handle: @escaping @Sendable (Motherboard, Envelope, Inbound) throws -> Void
    ) {
        self.caller = caller
        self.federation = federation
        self.handle = handle
    }
}
