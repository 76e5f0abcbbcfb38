import BusCore

/// The flows the broker holds, in registration order: the manifest's first, then those boards
/// register at run time. Every matching flow runs, in that order.
struct FlowTable {
    private(set) var flows: [FlowInfo] = []
    private var nextID: FlowID = 1

    @discardableResult
    mutating func add(scope: Scope, owner: BoardID?, spec: FlowSpec) -> FlowInfo {
        let flow = FlowInfo(id: nextID, scope: scope, owner: owner, spec: spec)
        nextID = FlowID(nextID.rawValue + 1)
        flows.append(flow)
        return flow
    }

    /// Removes a flow; a board may remove only its own, a tool (no owner) any run-time one.
    mutating func remove(id: FlowID, requester: BoardID?) throws {
        guard let index = flows.firstIndex(where: { $0.id == id }) else {
            throw BusError(.badArgument, "no flow \(id)")
        }
        let flow = flows[index]
        if let requester, flow.owner != requester {
            throw BusError(.unauthorized, "flow \(id) belongs to \(flow.owner.map { "'\($0)'" } ?? "the manifest")")
        }
        flows.remove(at: index)
    }

    /// Removes every flow a board registered (it completed or died; a new instance registers its own).
    mutating func removeFlows(ownedBy owner: ScopedName) {
        flows.removeAll { $0.owner?.rawValue == owner.name && $0.scope == owner.scope }
    }

    /// The flows of `trigger` from `source` in `scope`, in order.
    func matching(scope: Scope, source: String, trigger: FlowSpec.Trigger) -> [FlowInfo] {
        flows.filter { flow in
            flow.scope == scope && flow.spec.trigger == trigger && flow.spec.sources.contains { $0.rawValue == source }
        }
    }

    mutating func countRun(_ id: FlowID) {
        if let index = flows.firstIndex(where: { $0.id == id }) { flows[index].runs += 1 }
    }

    /// Flows that name a board as a source or target, or that it owns.
    func touching(_ board: ScopedName) -> [FlowInfo] {
        flows.filter { flow in
            flow.scope == board.scope
                && (flow.spec.sources.contains { $0.rawValue == board.name } || flow.spec.target?.rawValue == board.name
                    || flow.owner?.rawValue == board.name)
        }
    }
}
