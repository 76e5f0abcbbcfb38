import BusCore
import Foundation

/// The fleet manifest: which boards exist, how to start them, and the flows between them.
///
/// ```json
/// {
///   "boards": [
///     { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" },
///     { "id": "app.dashboard", "executable": "BoardBusDemoDashboard" }
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
        /// Started when first activated.
        case onDemand = "on-demand"
    }

    /// When the broker starts a board's process again after it ended (as systemd's `Restart=`).
    public enum RestartPolicy: String, Sendable, Hashable, Codable {
        case no
        /// After a crash or a non-zero exit, not after a clean exit or `complete`.
        case onFailure = "on-failure"
        /// After any end except `complete`.
        case always
    }

    /// At most `count` restarts within `windowSeconds`; beyond it the board stays down (`failed`).
    public struct RestartLimit: Sendable, Hashable, Codable {
        public var count: Int
        public var windowSeconds: Double
        public init(count: Int = 5, windowSeconds: Double = 60) {
            self.count = count
            self.windowSeconds = windowSeconds
        }
    }

    /// What the broker promises about an activation of a board (PROTOCOL 5.3).
    public enum DeliveryMode: String, Sendable, Hashable, Codable {
        /// Delivered once; lost if the board ends before it handled it (the default).
        case atMostOnce = "at-most-once"
        /// Kept until the board acknowledges it (answers it: its handler returned) and delivered
        /// again, with its delivery count, to the board's next instance when one ends holding it;
        /// after `maxDeliveries` deliveries, put on the dead-letter list.
        case atLeastOnce = "at-least-once"
    }

    /// One board the fleet can produce.
    public struct Board: Sendable, Hashable, Codable {
        public var id: BoardID
        /// The executable's file name, looked up in the broker's binary directory, or an absolute path.
        public var executable: String
        /// Extra arguments for the executable.
        public var arguments: [String]
        public var scope: Scope
        public var start: StartPolicy
        public var restart: RestartPolicy
        public var restartLimit: RestartLimit
        public var delivery: DeliveryMode
        /// With `at-least-once`: how many deliveries an activation gets before it is dead-lettered.
        public var maxDeliveries: Int
        /// With `at-least-once`: how long, in seconds, an activation its board failed (answered
        /// with a transient error) waits before it is delivered again: the first entry after the
        /// first failure, and so on, the last for every later one.
        public var backoff: [Double]
        /// How long the board may stay silent while its process runs (busy, PROTOCOL 5.1) before
        /// the broker ends it (SIGABRT, then SIGKILL); nil: never (the default).
        public var watchdogSeconds: Double?
        /// The longest `watchdogSeconds` (a day).
        public static let maximumWatchdogSeconds: Double = 86_400

        /// The deliveries an at-least-once activation gets by default.
        public static let defaultMaxDeliveries = 3
        /// The wait before each redelivery of a failed activation, by default (seconds).
        public static let defaultBackoff: [Double] = [1, 5, 30]
        /// The longest wait `backoff` may name (seconds), and its most entries.
        public static let maximumBackoffSeconds: Double = 3_600
        public static let maximumBackoffEntries = 16

        public init(
            id: BoardID, executable: String, arguments: [String] = [], scope: Scope = .root, start: StartPolicy = .always,
            restart: RestartPolicy = .no, restartLimit: RestartLimit = RestartLimit(), delivery: DeliveryMode = .atMostOnce,
            maxDeliveries: Int = Board.defaultMaxDeliveries, backoff: [Double] = Board.defaultBackoff, watchdogSeconds: Double? = nil
        ) {
            self.watchdogSeconds = watchdogSeconds
            self.delivery = delivery
            self.maxDeliveries = maxDeliveries
            self.backoff = backoff
            self.id = id
            self.executable = executable
            self.arguments = arguments
            self.scope = scope
            self.start = start
            self.restart = restart
            self.restartLimit = restartLimit
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decode(BoardID.self, forKey: .id)
            executable = try container.decode(String.self, forKey: .executable)
            arguments = try container.decodeIfPresent([String].self, forKey: .arguments) ?? []
            scope = try container.decodeIfPresent(Scope.self, forKey: .scope) ?? .root
            start = try container.decodeIfPresent(StartPolicy.self, forKey: .start) ?? .always
            restart = try container.decodeIfPresent(RestartPolicy.self, forKey: .restart) ?? .no
            restartLimit = try container.decodeIfPresent(RestartLimit.self, forKey: .restartLimit) ?? RestartLimit()
            delivery = try container.decodeIfPresent(DeliveryMode.self, forKey: .delivery) ?? .atMostOnce
            maxDeliveries = try container.decodeIfPresent(Int.self, forKey: .maxDeliveries) ?? Board.defaultMaxDeliveries
            backoff = try container.decodeIfPresent([Double].self, forKey: .backoff) ?? Board.defaultBackoff
            watchdogSeconds = try container.decodeIfPresent(Double.self, forKey: .watchdogSeconds)
        }
    }

    /// A scope of the tree: nested motherboards. The root scope always exists.
    public struct ScopeEntry: Sendable, Hashable, Codable {
        public var name: Scope
        /// The parent scope; the root when absent.
        public var parent: Scope

        public init(name: Scope, parent: Scope = .root) {
            self.name = name
            self.parent = parent
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            name = try container.decode(Scope.self, forKey: .name)
            parent = try container.decodeIfPresent(Scope.self, forKey: .parent) ?? .root
        }
    }

    /// A flow as the manifest writes it: either a chain `"a ->> b ->> c"` or an object
    /// `{"from": ["a", "b"], "output": "Type", "on": "output" | "complete", "to": "c", "scope": "s"}`.
    public enum Flow: Sendable, Hashable, Codable {
        case chain(String)
        case rule(Rule)

        public struct Rule: Sendable, Hashable, Codable {
            public var from: [BoardID]
            public var output: String?
            public var on: FlowSpec.Trigger
            public var to: BoardID
            public var scope: Scope

            public init(from: [BoardID], output: String? = nil, on: FlowSpec.Trigger = .output, to: BoardID, scope: Scope = .root) {
                self.from = from
                self.output = output
                self.on = on
                self.to = to
                self.scope = scope
            }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                if let single = try? container.decode(BoardID.self, forKey: .from) {
                    from = [single]
                } else {
                    from = try container.decode([BoardID].self, forKey: .from)
                }
                output = try container.decodeIfPresent(String.self, forKey: .output)
                let trigger = try container.decodeIfPresent(String.self, forKey: .on) ?? "output"
                switch trigger {
                case "output": on = .output
                case "complete", "completion": on = .completion
                default:
                    throw DecodingError.dataCorruptedError(forKey: .on, in: container, debugDescription: "'on' must be 'output' or 'complete'")
                }
                to = try container.decode(BoardID.self, forKey: .to)
                scope = try container.decodeIfPresent(Scope.self, forKey: .scope) ?? .root
            }
        }

        public init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                self = .chain(text)
            } else {
                self = .rule(try Rule(from: decoder))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .chain(let text):
                var container = encoder.singleValueContainer()
                try container.encode(text)
            case .rule(let rule): try rule.encode(to: encoder)
            }
        }
    }

    public var scopes: [ScopeEntry]
    public var boards: [Board]
    public var flows: [Flow]
    /// `HOST:PORT` to serve the broker's metrics on, over HTTP at `/metrics` (`--metrics-listen`
    /// overrides it).
    public var metricsListen: String?
    /// `tcp://ADDRESS:PORT` endpoints to listen on besides the ipc socket (`--listen` overrides).
    public var listen: [String] = []
    /// The parent motherboard this one serves its scopes for (`--attach` overrides).
    public var attach: Attach?
    /// Where to speak Majordomo (MDP 0.2): `ipc://mdp.sock` (relative: in the runtime directory)
    /// or `tcp://ADDRESS:PORT` (`--mdp` overrides).
    public var mdp: String?
    /// The access policy file for remote principals (relative: to the manifest's directory;
    /// `--policy` overrides; default `<state>/policy.json`).
    public var policy: String?
    /// The NATS cluster to join (`--nats` overrides).
    public var nats: NATS?
    /// The directory of the manifest file it was loaded from: relative key paths in `attach` are
    /// relative to it. Not part of the manifest's JSON.
    public var directory: String?

    private enum CodingKeys: String, CodingKey {
        case scopes, boards, flows, metricsListen, listen, attach, mdp, policy, nats
    }

    /// `"nats": {"servers": ["nats://10.0.0.1:4222", …], "fleet": "shop", "host": "edge-a",
    /// "credentials": FILE, "tlsCA": FILE}` (files relative to the manifest's directory).
    public struct NATS: Codable, Sendable, Hashable {
        public var servers: [String]
        /// The fleet's name on the cluster (default `boardbus`).
        public var fleet: String?
        /// This motherboard's name in the others' lists (default: the host name).
        public var host: String?
        /// A `.creds` file (user JWT and NKey seed).
        public var credentials: String?
        /// The certificate authority of the servers' TLS certificates.
        public var tlsCA: String?
        /// The access policy's principal for what comes through NATS (default `nats`).
        public var principal: String?
        /// The most requests from the cluster waiting for this motherboard at once (default 10 000).
        public var maximumInFlight: Int?

        public init(servers: [String]) {
            self.servers = servers
        }
    }

    /// `"attach": {"address": "tcp://10.0.0.1:7400", "serverKey": KEY-OR-FILE, "clientKey": FILE}`.
    public struct Attach: Codable, Sendable, Hashable {
        public var address: String
        /// The parent's public key (40 Z85 characters) or a file holding it.
        public var serverKey: String?
        /// This motherboard's key pair file (its public key is in the parent's allow-list).
        public var clientKey: String?
        /// The parent was started with `--insecure` (plaintext tcp).
        public var insecure: Bool?

        public init(address: String, serverKey: String? = nil, clientKey: String? = nil, insecure: Bool? = nil) {
            self.address = address
            self.serverKey = serverKey
            self.clientKey = clientKey
            self.insecure = insecure
        }
    }

    public init(scopes: [ScopeEntry] = [], boards: [Board] = [], flows: [Flow] = [], metricsListen: String? = nil) {
        self.scopes = scopes
        self.boards = boards
        self.flows = flows
        self.metricsListen = metricsListen
    }

    /// A manifest with chain flows only, e.g. `["a ->> b"]`.
    public init(scopes: [ScopeEntry] = [], boards: [Board] = [], flows chains: [String]) {
        self.init(scopes: scopes, boards: boards, flows: chains.map(Flow.chain))
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        scopes = try container.decodeIfPresent([ScopeEntry].self, forKey: .scopes) ?? []
        boards = try container.decodeIfPresent([Board].self, forKey: .boards) ?? []
        flows = try container.decodeIfPresent([Flow].self, forKey: .flows) ?? []
        metricsListen = try container.decodeIfPresent(String.self, forKey: .metricsListen)
        listen = try container.decodeIfPresent([String].self, forKey: .listen) ?? []
        attach = try container.decodeIfPresent(Attach.self, forKey: .attach)
        mdp = try container.decodeIfPresent(String.self, forKey: .mdp)
        policy = try container.decodeIfPresent(String.self, forKey: .policy)
        nats = try container.decodeIfPresent(NATS.self, forKey: .nats)
    }

    /// Reads and checks a manifest file.
    public static func load(path: String) throws -> FleetManifest {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw BusError(.badArgument, "cannot read manifest \(path): \(error.localizedDescription)")
        }
        var manifest = try parse(data, source: path)
        manifest.directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return manifest
    }

    /// Checks the scope tree, that ids are unique per scope, that flows are well formed, and that
    /// restart limits are numbers a duration can hold.
    public func validate() throws {
        _ = try ScopeTable(self)
        if let metricsListen { _ = try MetricsAddress(parsing: metricsListen) }
        for endpoint in listen where !endpoint.hasPrefix("tcp://") {
            throw BusError(.badArgument, "listen takes tcp://ADDRESS:PORT endpoints, not '\(endpoint)'")
        }
        if let mdp, !mdp.hasPrefix("ipc://"), !mdp.hasPrefix("tcp://") {
            throw BusError(.badArgument, "mdp must be an ipc:// or tcp:// endpoint, not '\(mdp)'")
        }
        if let attach, !attach.address.hasPrefix("tcp://") {
            throw BusError(.badArgument, "attach.address must be a tcp://HOST:PORT endpoint, not '\(attach.address)'")
        }
        try validateNumbers()
        var seen = Set<ScopedName>()
        for board in boards where !seen.insert(ScopedName(scope: board.scope, name: board.id.rawValue)).inserted {
            throw BusError(.badArgument, "manifest names board '\(board.id)' twice in scope '\(board.scope)'")
        }
        _ = try flowSpecs()
    }

    /// The manifest entry for an id in a scope.
    public func board(_ id: BoardID, scope: Scope = .root) -> Board? {
        boards.first { $0.id == id && $0.scope == scope }
    }

    /// The manifest entry for a name as written in a header.
    func board(named name: String, scope: Scope) -> Board? {
        boards.first { $0.id.rawValue == name && $0.scope == scope }
    }

    /// Every flow of the manifest with its scope, in declaration order (chains give one flow per edge).
    public func flowSpecs() throws -> [(scope: Scope, spec: FlowSpec)] {
        try flows.flatMap { flow -> [(scope: Scope, spec: FlowSpec)] in
            switch flow {
            case .chain(let text):
                return try FlowEdge.parseChain(text).map { (.root, FlowSpec(sources: [$0.source], target: $0.target)) }
            case .rule(let rule):
                guard !rule.from.isEmpty else { throw BusError(.badArgument, "a flow needs at least one source") }
                return [(rule.scope, FlowSpec(sources: rule.from, trigger: rule.on, outputType: rule.output, target: rule.to))]
            }
        }
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
