import BusCore

/// The flows the broker holds, in registration order (ascending id): the manifest's first, then
/// those boards register at run time. Every matching flow runs, in that order.
///
/// Indexed by source and by owner, so that routing an output looks up the flows of its source
/// instead of scanning every flow, and a board that leaves takes its flows without a scan.
struct FlowTable {
    private var byID = FlowsByID()
    /// Ids of the flows each source (scope, board, trigger) fires, ascending.
    private var bySource: [SourceKey: FlowIDs] = [:]
    /// Ids of the flows each board registered.
    private var byOwner: [ScopedName: FlowIDs] = [:]
    private var nextID: FlowID = 1

    private struct SourceKey: Hashable {
        var source: ScopedName
        var trigger: FlowSpec.Trigger
    }

    /// Every flow, in registration order.
    var flows: [FlowInfo] { byID.all }

    var count: Int { byID.count }

    @discardableResult
    mutating func add(scope: Scope, owner: BoardID?, spec: FlowSpec) -> FlowInfo {
        let flow = FlowInfo(id: nextID, scope: scope, owner: owner, spec: spec)
        nextID = FlowID(nextID.rawValue + 1)
        byID[flow.id] = flow
        for key in Self.sourceKeys(of: flow) { bySource[key] = bySource[key].appending(flow.id) }
        if let owner {
            let key = ScopedName(scope: scope, name: owner.rawValue)
            byOwner[key] = byOwner[key].appending(flow.id)
        }
        return flow
    }

    /// Removes a flow; a board may remove only its own, a tool (no owner) any run-time one.
    /// Removes flow `id` for `requester`: a board removes only its own flows; the broker's own
    /// user's clients (`isAdministrator`) any.
    mutating func remove(id: FlowID, requester: BoardID?, isAdministrator: Bool) throws {
        guard let flow = byID[id] else {
            throw BusError(.badArgument, "no flow \(id)")
        }
        if !isAdministrator, flow.owner == nil || flow.owner != requester {
            throw BusError(
                .unauthorized,
                "flow \(id) belongs to \(flow.owner.map { "'\($0)'" } ?? "the manifest")\(requester == nil ? ": a remote principal removes only the flows its own board registered" : "")"
            )
        }
        unindex(flow)
        if let owner = flow.owner {
            let key = ScopedName(scope: flow.scope, name: owner.rawValue)
            byOwner[key] = byOwner[key]?.removing(id)
        }
    }

    /// Removes every flow a board registered (it completed or died; a new instance registers its own).
    mutating func removeFlows(ownedBy owner: ScopedName) {
        guard let ids = byOwner.removeValue(forKey: owner) else { return }
        for id in ids.all {
            if let flow = byID[id] { unindex(flow) }
        }
    }

    /// The flows of `trigger` from `source` in `scope`, in order.
    func matching(scope: Scope, source: String, trigger: FlowSpec.Trigger) -> [FlowInfo] {
        let key = SourceKey(source: ScopedName(scope: scope, name: source), trigger: trigger)
        switch bySource[key] {
        case nil: return []
        case .one(let id): return byID[id].map { [$0] } ?? []
        case .many(let ids): return ids.compactMap { byID[$0] }
        }
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
        for key in Self.sourceKeys(of: flow) { bySource[key] = bySource[key]?.removing(flow.id) }
    }

    private static func sourceKeys(of flow: FlowInfo) -> Set<SourceKey> {
        Set(flow.spec.sources.map { SourceKey(source: ScopedName(scope: flow.scope, name: $0.rawValue), trigger: flow.spec.trigger) })
    }
}

/// The flow ids under one key of an index, ascending: nearly always one (a board registers a flow
/// from itself), held without an array, which would be a heap allocation per key (about 100
/// bytes a flow with two indexes, at 2 000 flows).
enum FlowIDs: Equatable {
    case one(FlowID)
    case many([FlowID])

    var all: [FlowID] {
        switch self {
        case .one(let id): [id]
        case .many(let ids): ids
        }
    }

    /// Without `id`; nil once nothing is left.
    func removing(_ id: FlowID) -> FlowIDs? {
        let left = all.filter { $0 != id }
        switch left.count {
        case 0: return nil
        case 1: return .one(left[0])
        default: return .many(left)
        }
    }
}

extension Optional where Wrapped == FlowIDs {
    /// With `id` added at the end (ids are added in ascending order).
    func appending(_ id: FlowID) -> FlowIDs {
        switch self {
        case nil: .one(id)
        case .one(let first): .many([first, id])
        case .many(let ids): .many(ids + [id])
        }
    }
}

/// The flows by id, in one array in ascending id order (ids are handed out ascending, so a new
/// flow goes at the end): half the memory of a dictionary, whose table is at most three quarters
/// full (about 110 bytes a flow at 2 000 flows); looked up by binary search over a parallel array
/// of ids. A removed flow leaves a hole, and the holes are squeezed out once they are half of the
/// array: a board leaving costs a look-up, not a shift of every later flow (2 000 boards leaving
/// in registration order would otherwise move the table n²/2 times).
struct FlowsByID {
    private var ids: [FlowID] = []
    private var flows: [FlowInfo?] = []
    private var holes = 0

    var count: Int { ids.count - holes }

    /// Every flow, in ascending id order.
    var all: [FlowInfo] { flows.compactMap { $0 } }

    subscript(id: FlowID) -> FlowInfo? {
        get {
            let index = self.index(of: id)
            return index < ids.count && ids[index] == id ? flows[index] : nil
        }
        set {
            let index = self.index(of: id)
            let present = index < ids.count && ids[index] == id
            switch (newValue, present) {
            case (let flow?, true):
                if flows[index] == nil { holes -= 1 }
                flows[index] = flow
            case (let flow?, false):
                ids.insert(id, at: index)
                flows.insert(flow, at: index)
            case (nil, true):
                guard flows[index] != nil else { return }
                flows[index] = nil
                holes += 1
                if holes > 32 && holes * 2 > ids.count { squeeze() }
            case (nil, false):
                break
            }
        }
    }

    /// Where `id` is or would go.
    private func index(of id: FlowID) -> Int {
        var (low, high) = (0, ids.count)
        while low < high {
            let middle = (low + high) / 2
            if ids[middle] < id { low = middle + 1 } else { high = middle }
        }
        return low
    }

    private mutating func squeeze() {
        let kept = flows.compactMap { $0 }
        ids = kept.map(\.id)
        flows = kept
        holes = 0
    }
}
