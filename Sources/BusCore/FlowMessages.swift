/// Flows, as boards register them and tools list them (JSON payloads of `control` messages).

/// What a flow does: which outputs (or completions) it matches and where they go.
///
/// Boardy's `registerFlowSteps(a ->> b)`, `registerFlow(matchedIdentifiers:)` and completion
/// flows are all flows: `sources` are the matched board ids; `outputType`, when set, makes it a
/// guaranteed flow that ignores outputs of any other type; `target` is the board to activate with
/// the output as input, or nil to deliver the output to the board that registered the flow (a
/// `flowEvent`), where the closure of Boardy runs.
public struct FlowSpec: BusPayload, Hashable {
    /// What fires a flow.
    public enum Trigger: String, Sendable, Hashable, Codable {
        /// An output (`sendToMotherboard`) of a source board.
        case output
        /// A source board's `complete(isDone)`; the payload is ``Completion``.
        case completion
    }

    public var sources: [BoardID]
    public var trigger: Trigger
    public var outputType: String?
    public var target: BoardID?

    public init(sources: [BoardID], trigger: Trigger = .output, outputType: String? = nil, target: BoardID? = nil) {
        self.sources = sources
        self.trigger = trigger
        self.outputType = outputType
        self.target = target
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sources = try container.decode([BoardID].self, forKey: .sources)
        trigger = try container.decodeIfPresent(Trigger.self, forKey: .trigger) ?? .output
        outputType = try container.decodeIfPresent(String.self, forKey: .outputType)
        target = try container.decodeIfPresent(BoardID.self, forKey: .target)
    }
}

/// A flow held by the broker.
public struct FlowInfo: BusPayload, Hashable, CustomStringConvertible {
    /// Unique in the broker's lifetime; flows run in ascending id order (registration order).
    public var id: FlowID
    /// The scope whose boards the flow matches and activates.
    public var scope: Scope
    /// The board that registered it, nil for flows of the manifest.
    public var owner: BoardID?
    public var spec: FlowSpec
    /// How many times it ran.
    public var runs: Int

    public init(id: FlowID, scope: Scope, owner: BoardID?, spec: FlowSpec, runs: Int = 0) {
        self.id = id
        self.scope = scope
        self.owner = owner
        self.spec = spec
        self.runs = runs
    }

    /// E.g. `auth.login ->> app.dashboard`, `a, b [Paid] ->> owner`, `pay.task ->| complete ->> audit`.
    public var description: String {
        let sources = spec.sources.map(\.rawValue).joined(separator: ", ")
        let type = spec.outputType.map { " [\($0)]" } ?? ""
        let trigger = spec.trigger == .completion ? " ->| complete" : ""
        let target = spec.target?.rawValue ?? "\(owner?.rawValue ?? "?") (event)"
        return "\(sources)\(type)\(trigger) ->> \(target)"
    }
}

/// The answer to `flows`.
public struct FlowList: BusPayload, Hashable {
    public var flows: [FlowInfo]
    /// Outputs that matched no flow, since the broker started.
    public var droppedOutputs: Int
    public init(flows: [FlowInfo], droppedOutputs: Int) {
        self.flows = flows
        self.droppedOutputs = droppedOutputs
    }
}

/// The question of `flow.remove`.
public struct FlowRemoval: BusPayload, Hashable {
    public var id: FlowID
    public init(id: FlowID) { self.id = id }
}

/// A flow's id: given by the broker, unique in its lifetime, ascending in registration order. On
/// the wire: a JSON number in payloads, and optional header field 4 of the `flowEvent` a flow delivers.
public struct FlowID: RawRepresentable, Hashable, Sendable, Comparable, Codable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    public let rawValue: UInt64

    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// Codable as a plain number through `RawRepresentable`.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public init(integerLiteral value: UInt64) { rawValue = value }

    public var description: String { "\(rawValue)" }

    public static func < (left: FlowID, right: FlowID) -> Bool { left.rawValue < right.rawValue }
}

/// The answer to `introspect ID`.
public struct Introspection: BusPayload, Hashable {
    public var board: BoardInfo
    public var outputTypes: [String]
    /// Flows whose sources or target name the board, or that it owns.
    public var flows: [FlowInfo]
    /// The shapes of its payloads, as JSON Schemas (when the board is live and declared them).
    public var schemas: BoardSchemas?
    public init(board: BoardInfo, outputTypes: [String], flows: [FlowInfo], schemas: BoardSchemas? = nil) {
        self.schemas = schemas
        self.board = board
        self.outputTypes = outputTypes
        self.flows = flows
    }
}

/// One scope of the tree (`tree`).
public struct ScopeNode: BusPayload, Hashable {
    public var name: Scope
    /// Nil for the root.
    public var parent: Scope?
    /// Live boards and manifest boards of this scope.
    public var boards: [BoardInfo]
    public init(name: Scope, parent: Scope?, boards: [BoardInfo]) {
        self.name = name
        self.parent = parent
        self.boards = boards
    }
}

/// The answer to `tree`: every scope, parents before children.
public struct ScopeTree: BusPayload, Hashable {
    public var scopes: [ScopeNode]
    public init(scopes: [ScopeNode]) { self.scopes = scopes }
}
