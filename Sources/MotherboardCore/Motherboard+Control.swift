import BusCore
import Foundation

extension Motherboard {
    /// Questions for the broker itself, and run-time flow registration.
    func answerControl(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) {
        do {
            switch envelope.header.typeName {
            case ControlOperation.list:
                let waiting = manifest.boards.filter {
                    $0.start == .always && registry[ScopedName(scope: $0.scope, name: $0.id.rawValue)] == nil
                }.map(\.id)
                let lost = unreachable.values.map(unreachableInfo)
                let boards = (registry.sorted.map { info(for: $0, now: now) } + lost).sorted { ($0.scope, $0.id) < ($1.scope, $1.id) }
                reply(to: envelope, from: peer, with: BoardList(boards: boards, waitingFor: waiting))
            case ControlOperation.status:
                let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
                reply(to: envelope, from: peer, with: try boardInfo(ScopedName(scope: request.scope, name: request.id.rawValue), now: now))
            case ControlOperation.introspect:
                let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
                let name = ScopedName(scope: request.scope, name: request.id.rawValue)
                let board = try boardInfo(name, now: now)
                reply(
                    to: envelope, from: peer,
                    with: Introspection(
                        board: board, outputTypes: registry[name]?.registration.outputTypes ?? [], flows: flows.touching(name),
                        schemas: registry[name]?.registration.schemas))
            case ControlOperation.tree:
                reply(to: envelope, from: peer, with: tree(now: now))
            case ControlOperation.flows:
                reply(to: envelope, from: peer, with: FlowList(flows: flows.flows, droppedOutputs: counters.droppedOutputs))
            case ControlOperation.registerFlow:
                guard let owner = registry.board(for: peer) else {
                    throw BusError(.notRegistered, "only a registered board can register a flow; it owns the flow")
                }
                let spec = try PayloadCodec.decode(FlowSpec.self, from: envelope.payload)
                guard !spec.sources.isEmpty else { throw BusError(.badArgument, "a flow needs at least one source") }
                reply(to: envelope, from: peer, with: flows.add(scope: owner.scope, owner: owner.id, spec: spec))
            case ControlOperation.removeFlow:
                let removal = try PayloadCodec.decode(FlowRemoval.self, from: envelope.payload)
                try flows.remove(id: removal.id, requester: registry.board(for: peer)?.id)
                reply(to: envelope, from: peer, with: Delivery(delivered: 0))
            case ControlOperation.metrics:
                refreshMetrics()
                reply(to: envelope, from: peer, with: MetricsText(text: metrics.exposition()))
            case ControlOperation.monitor:
                try startMonitor(envelope, from: peer, now: now)
            case ControlOperation.ping:
                reply(to: envelope, from: peer, with: Delivery(delivered: 0))
            case ControlOperation.uplinkAttach:
                try attachUplink(envelope, from: peer)
            case ControlOperation.linkChain:
                try answerLinkChain(envelope, from: peer)
            case ControlOperation.uplinkChain:
                guard peerKind(of: peer, sender: registry.board(for: peer)) == .uplink else {
                    throw BusError(.unauthorized, "only this motherboard's own uplink says what is above it")
                }
                ancestors = try PayloadCodec.decode(LinkChain.self, from: envelope.payload).ids
                reply(to: envelope, from: peer, with: Delivery(delivered: 0))
            default:
                throw BusError(.malformed, "unknown control operation '\(envelope.header.typeName)'")
            }
        } catch let error as BusError {
            reply(to: envelope, from: peer, error: error)
        } catch {
            reply(to: envelope, from: peer, error: BusError(.malformed, "\(error)"))
        }
    }

    /// A live board's info, or a stopped manifest board's, or `noSuchBoard`.
    private func boardInfo(_ name: ScopedName, now: ContinuousClock.Instant) throws -> BoardInfo {
        if let board = registry[name] { return info(for: board, now: now) }
        if let lost = unreachable[name] { return unreachableInfo(lost) }
        if let entry = manifest.board(named: name.name, scope: name.scope) { return stoppedInfo(entry) }
        throw notLiveError(name)
    }

    private func tree(now: ContinuousClock.Instant) -> ScopeTree {
        ScopeTree(
            scopes: scopes.names.map { scope in
                var boards = registry.sorted.filter { $0.scope == scope }.map { info(for: $0, now: now) }
                boards += unreachable.values.filter { $0.board.scope == scope }.map(unreachableInfo)
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
        return BoardInfo(
            id: registration.id, scope: registration.scope, pid: registration.pid, state: board.busySince == nil ? .running : .busy,
            start: manifest.board(registration.id, scope: registration.scope)?.start.rawValue ?? "external",
            inputType: registration.inputType, commands: registration.commands, actions: registration.actions,
            uptimeSeconds: Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18,
            activations: board.activations, commandsHandled: board.commandsHandled, actionsDelivered: board.actionsDelivered,
            restarts: supervisor.records[board.name]?.restarts ?? 0, lastExit: supervisor.records[board.name]?.lastExit, host: board.host)
    }
}
