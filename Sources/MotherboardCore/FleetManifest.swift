import BusCore
import Foundation

/// The fleet manifest: which boards exist, how to start them, and the flows between them.
///
/// ```json
/// {
///   "boards": [
///     { "id": "auth.login", "executable": "Login", "start": "always" },
///     { "id": "app.dashboard", "executable": "Dashboard" }
///   ],
///   "flows": [ "auth.login ->> app.dashboard" ]
/// }
/// ```
/// A flow string `a ->> b ->> c` declares one flow per edge, as Boardy's `registerFlowSteps`.
public struct FleetManifest: Sendable, Hashable, Codable {
    /// How a board's process is started.
    public enum StartPolicy: String, Sendable, Hashable, Codable {
        /// Started with the broker.
        case always
        /// Started when first activated (not yet supported: such boards are started by hand).
        case onDemand = "on-demand"
    }

    /// One board the fleet can produce.
    public struct Board: Sendable, Hashable, Codable {
        public var id: BoardID
        /// The executable's file name, looked up in the broker's binary directory, or an absolute path.
        public var executable: String
        /// Extra arguments for the executable.
        public var arguments: [String]
        public var scope: String
        public var start: StartPolicy

        public init(id: BoardID, executable: String, arguments: [String] = [], scope: String = "", start: StartPolicy = .always) {
            self.id = id
            self.executable = executable
            self.arguments = arguments
            self.scope = scope
            self.start = start
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decode(BoardID.self, forKey: .id)
            executable = try container.decode(String.self, forKey: .executable)
            arguments = try container.decodeIfPresent([String].self, forKey: .arguments) ?? []
            scope = try container.decodeIfPresent(String.self, forKey: .scope) ?? ""
            start = try container.decodeIfPresent(StartPolicy.self, forKey: .start) ?? .always
        }
    }

    public var boards: [Board]
    /// Flow declarations as written, e.g. `"auth.login ->> app.dashboard"`.
    public var flows: [String]

    public init(boards: [Board] = [], flows: [String] = []) {
        self.boards = boards
        self.flows = flows
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        boards = try container.decodeIfPresent([Board].self, forKey: .boards) ?? []
        flows = try container.decodeIfPresent([String].self, forKey: .flows) ?? []
    }

    /// Reads and checks a manifest file.
    public static func load(path: String) throws -> FleetManifest {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw BusError(.badArgument, "cannot read manifest \(path): \(error.localizedDescription)")
        }
        let manifest: FleetManifest
        do {
            manifest = try JSONDecoder().decode(FleetManifest.self, from: data)
        } catch {
            throw BusError(.badArgument, "manifest \(path) is not valid: \(error)")
        }
        try manifest.validate()
        return manifest
    }

    /// Checks ids are unique and flows are well formed.
    public func validate() throws {
        var seen = Set<BoardID>()
        for board in boards where !seen.insert(board.id).inserted {
            throw BusError(.badArgument, "manifest names board '\(board.id)' twice")
        }
        _ = try flowEdges()
    }

    /// The manifest entry for an id.
    public func board(_ id: BoardID) -> Board? {
        boards.first { $0.id == id }
    }

    /// Every flow edge, in declaration order.
    public func flowEdges() throws -> [FlowEdge] {
        try flows.flatMap { try FlowEdge.parseChain($0) }
    }
}

/// One step of a flow: an output of `source` activates `target` with that output as input.
public struct FlowEdge: Sendable, Hashable, Codable, CustomStringConvertible {
    public var source: BoardID
    public var target: BoardID

    public init(source: BoardID, target: BoardID) {
        self.source = source
        self.target = target
    }

    /// Parses `a ->> b ->> c` into the edges `a ->> b` and `b ->> c`.
    public static func parseChain(_ text: String) throws -> [FlowEdge] {
        let parts = text.components(separatedBy: "->>").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.count >= 2 else {
            throw BusError(.badArgument, "flow '\(text)' must look like 'a ->> b'")
        }
        let ids = try parts.map { try BoardID(validating: $0) }
        return zip(ids, ids.dropFirst()).map { FlowEdge(source: $0, target: $1) }
    }

    public var description: String { "\(source) ->> \(target)" }
}
