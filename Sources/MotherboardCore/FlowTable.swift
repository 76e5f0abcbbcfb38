import BusCore

/// The flows the broker holds, in registration order (ascending id): the manifest's first, then
/// those boards register at run time. Every matching flow runs, in that order.
///
/// Indexed by source and by owner, so that routing an output looks up the flows of its source
/// instead of scanning every flow, and a board that leaves takes its flows without a scan.
struct FlowTable {
    private var byID: [FlowID: FlowInfo] = [:]
    /// Ids of the flows each source (scope, board, trigger) fires, ascending.
    private var bySource: [SourceKey: [FlowID]] = [:]
    /// Ids of the flows each board registered.
    private var byOwner: [ScopedName: [FlowID]] = [:]
    private var nextID: FlowID = 1

    private struct SourceKey: Hashable {
        var source: ScopedName
        var trigger: FlowSpec.Trigger
    }

    /// Every flow, in registration order.
    var flows: [FlowInfo] { byID.values.sorted { $0.id < $1.id } }

    var count: Int { byID.count }

    @discardableResult
    mutating func add(scope: Scope, owner: BoardID?, spec: FlowSpec) -> FlowInfo {
        let flow = FlowInfo(id: nextID, scope: scope, owner: owner, spec: spec)
        nextID = FlowID(nextID.rawValue + 1)
        byID[flow.id] = flow
        for key in Self.sourceKeys(of: flow) { bySource[key, default: []].append(flow.id) }
        if let owner { byOwner[ScopedName(scope: scope, name: owner.rawValue), default: []].append(flow.id) }
        return flow
    }

    /// Removes a flow; a board may remove only its own, a tool (no owner) any run-time one.
    mutating func remove(id: FlowID, requester: BoardID?) throws {
        guard let flow = byID[id] else {
            throw BusError(.badArgument, "no flow \(id)")
        }
        if let requester, flow.owner != requester {
            throw BusError(.unauthorized, "flow \(id) belongs to \(flow.owner.map { "'\($0)'" } ?? "the manifest")")
        }
        unindex(flow)
        if let owner = flow.owner { byOwner.removeFromList(at: ScopedName(scope: flow.scope, name: owner.rawValue)) { $0 == id } }
    }

    /// Removes every flow a board registered (it completed or died; a new instance registers its own).
    mutating func removeFlows(ownedBy owner: ScopedName) {
        guard let ids = byOwner.removeValue(forKey: owner) else { return }
        for id in ids {
            if let flow = byID[id] { unindex(flow) }
        }
    }

    /// The flows of `trigger` from `source` in `scope`, in order.
    func matching(scope: Scope, source: String, trigger: FlowSpec.Trigger) -> [FlowInfo] {
        let key = SourceKey(source: ScopedName(scope: scope, name: source), trigger: trigger)
        return bySource[key]?.compactMap { byID[$0] } ?? []
    }

    mutating func countRun(_ id: FlowID) {
        byID[id]?.runs += 1
    }

    /// Flows that name a board as a source or target, or that it owns.
    func touching(_ board: ScopedName) -> [FlowInfo] {
        flows.filter { flow in
            flow.scope == board.scope
                && (flow.spec.sources.contains { $0.rawValue == board.name } || flow.spec.target?.rawValue == board.name
                    || flow.owner?.rawValue == board.name)
        }
    }

    private mutating func unindex(_ flow: FlowInfo) {
        byID[flow.id] = nil
        for key in Self.sourceKeys(of: flow) { bySource.removeFromList(at: key) { $0 == flow.id } }
    }

    private static func sourceKeys(of flow: FlowInfo) -> Set<SourceKey> {
        Set(flow.spec.sources.map { SourceKey(source: ScopedName(scope: flow.scope, name: $0.rawValue), trigger: flow.spec.trigger) })
    }
}
