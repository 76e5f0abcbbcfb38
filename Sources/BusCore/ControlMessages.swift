import FoundationEssentials

/// The payloads of the broker's own messages (registration, `list`, `status`, acknowledgements).
/// They are JSON like every payload, so a client in any language can read them.

/// What a board tells the broker when it registers: who it is and what it handles.
public struct Registration: BusPayload, Hashable {
    public var id: BoardID
    public var pid: Int32
    /// The motherboard scope the board lives in.
    public var scope: Scope
    /// The input type the board accepts on activation, when it declares one (its first, when
    /// it takes several).
    public var inputType: String?
    /// Every input type it accepts, when it takes more than one (absent otherwise: older peers
    /// read `inputType`).
    public var inputTypes: [String]?
    /// The command names the board answers.
    public var commands: [String]
    /// The action names the board subscribes to.
    public var actions: [String]
    /// The output types the board declares it sends (for introspection).
    public var outputTypes: [String]
    /// The Flux stores the board owns; other processes reach them through the broker.
    public var stores: [String]
    /// The board's registration secret: the one the motherboard handed the process it started
    /// (`BOARDBUS_BOARD_SECRET`), else one the process made up. Only a registration with the
    /// secret of the live holder of an id can register that id again (a pid is no proof); a
    /// registration without one can take a free id only. Never shown by the broker.
    public var secret: String?
    /// The shapes of the payloads it takes and sends, derived from its Codable types (for
    /// `introspect`); absent from boards that declare none.
    public var schemas: BoardSchemas?
    /// Set by a gateway that serves several boards over one connection: each of its messages
    /// names the board it is from (source and scope), and the broker's name the board they are
    /// for (target and scope). A connection serves either one board or only such boards.
    public var sharesConnection: Bool?
    /// Set by a gateway for a board it serves from another host (the NATS gateway: the name the
    /// board's motherboard announced): `list` shows it as the board's host. Read only with
    /// ``sharesConnection``.
    public var host: String?

    public init(
        id: BoardID, pid: Int32, scope: Scope = .root, inputType: String? = nil, inputTypes: [String]? = nil, commands: [String] = [],
        actions: [String] = [], outputTypes: [String] = [], stores: [String] = [], secret: String? = nil, schemas: BoardSchemas? = nil,
        sharesConnection: Bool? = nil
    ) {
        self.inputTypes = inputTypes
        self.schemas = schemas
        self.sharesConnection = sharesConnection
        self.id = id
        self.pid = pid
        self.scope = scope
        self.inputType = inputType
        self.commands = commands
        self.actions = actions
        self.outputTypes = outputTypes
        self.stores = stores
        self.secret = secret
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(BoardID.self, forKey: .id)
        pid = try container.decode(Int32.self, forKey: .pid)
        scope = try container.decodeIfPresent(Scope.self, forKey: .scope) ?? .root
        inputType = try container.decodeIfPresent(String.self, forKey: .inputType)
        commands = try container.decodeIfPresent([String].self, forKey: .commands) ?? []
        actions = try container.decodeIfPresent([String].self, forKey: .actions) ?? []
        outputTypes = try container.decodeIfPresent([String].self, forKey: .outputTypes) ?? []
        stores = try container.decodeIfPresent([String].self, forKey: .stores) ?? []
        secret = try container.decodeIfPresent(String.self, forKey: .secret)
        schemas = try container.decodeIfPresent(BoardSchemas.self, forKey: .schemas)
        sharesConnection = try container.decodeIfPresent(Bool.self, forKey: .sharesConnection)
        inputTypes = try container.decodeIfPresent([String].self, forKey: .inputTypes)
        host = try container.decodeIfPresent(String.self, forKey: .host)
    }

    /// A new registration secret: 32 random bytes from the system's generator, as hex.
    public static func makeSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in
            let hex = String(generator.next(), radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }
}

/// One board as `list` and `status` show it.
public struct BoardInfo: BusPayload, Hashable {
    public var id: BoardID
    public var scope: Scope
    public var pid: Int32
    public var state: BoardState
    /// How the manifest starts it (`always`, `on-demand`), or `external` for a board no manifest names.
    public var start: String
    public var inputType: String?
    /// Every input type, for a board that takes several (absent otherwise).
    public var inputTypes: [String]?
    /// Activations nobody waited for that the board refused since it registered, and the last
    /// one's type and error (absent when none).
    public var refusedInputs: Int?
    public var lastRefusedInput: String?
    public var commands: [String]
    public var actions: [String]
    /// Seconds since the board registered (0 when not running).
    public var uptimeSeconds: Double
    /// Activations, commands and actions delivered to this board since it registered.
    public var activations: Int
    public var commandsHandled: Int
    public var actionsDelivered: Int
    /// How many times the broker restarted the board's process.
    public var restarts: Int
    /// How the board's last process ended (e.g. `signal 9`, `exit 1`), if one did.
    public var lastExit: String?
    /// For a board connected over tcp: its address (`10.0.0.2:41234`) and the name its key has
    /// in the allow-list, e.g. `10.0.0.2 (edge-b)`. Absent for boards on the broker's ipc socket.
    public var host: String?
    /// The broker's name for the board's connection while it runs (`:` and the routing id in
    /// hex, as monitors name a connection): the boards a gateway serves over one connection
    /// share it.
    public var connection: String?

    public init(
        id: BoardID, scope: Scope, pid: Int32, state: BoardState, start: String, inputType: String?,
        commands: [String], actions: [String], uptimeSeconds: Double, activations: Int, commandsHandled: Int,
        actionsDelivered: Int, restarts: Int = 0, lastExit: String? = nil, host: String? = nil, connection: String? = nil,
        inputTypes: [String]? = nil
    ) {
        self.connection = connection
        self.inputTypes = inputTypes
        self.id = id
        self.scope = scope
        self.pid = pid
        self.state = state
        self.start = start
        self.inputType = inputType
        self.commands = commands
        self.actions = actions
        self.uptimeSeconds = uptimeSeconds
        self.activations = activations
        self.commandsHandled = commandsHandled
        self.actionsDelivered = actionsDelivered
        self.restarts = restarts
        self.lastExit = lastExit
        self.host = host
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(BoardID.self, forKey: .id)
        scope = try container.decodeIfPresent(Scope.self, forKey: .scope) ?? .root
        pid = try container.decode(Int32.self, forKey: .pid)
        state = try container.decode(BoardState.self, forKey: .state)
        start = try container.decode(String.self, forKey: .start)
        inputType = try container.decodeIfPresent(String.self, forKey: .inputType)
        commands = try container.decodeIfPresent([String].self, forKey: .commands) ?? []
        actions = try container.decodeIfPresent([String].self, forKey: .actions) ?? []
        uptimeSeconds = try container.decodeIfPresent(Double.self, forKey: .uptimeSeconds) ?? 0
        activations = try container.decodeIfPresent(Int.self, forKey: .activations) ?? 0
        commandsHandled = try container.decodeIfPresent(Int.self, forKey: .commandsHandled) ?? 0
        actionsDelivered = try container.decodeIfPresent(Int.self, forKey: .actionsDelivered) ?? 0
        restarts = try container.decodeIfPresent(Int.self, forKey: .restarts) ?? 0
        lastExit = try container.decodeIfPresent(String.self, forKey: .lastExit)
        host = try container.decodeIfPresent(String.self, forKey: .host)
        connection = try container.decodeIfPresent(String.self, forKey: .connection)
        inputTypes = try container.decodeIfPresent([String].self, forKey: .inputTypes)
        refusedInputs = try container.decodeIfPresent(Int.self, forKey: .refusedInputs)
        lastRefusedInput = try container.decodeIfPresent(String.self, forKey: .lastRefusedInput)
    }
}

/// The answer to `list`.
public struct BoardList: BusPayload, Hashable {
    /// Live boards, sorted by id.
    public var boards: [BoardInfo]
    /// Always-on boards of the manifest that are not live yet.
    public var waitingFor: [BoardID]

    public init(boards: [BoardInfo], waitingFor: [BoardID]) {
        self.boards = boards
        self.waitingFor = waitingFor
    }
}

/// The question of `status ID` and `introspect ID`; the scope defaults to the root.
public struct StatusRequest: BusPayload, Hashable {
    public var id: BoardID
    public var scope: Scope
    public init(id: BoardID, scope: Scope = .root) {
        self.id = id
        self.scope = scope
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(BoardID.self, forKey: .id)
        scope = try container.decodeIfPresent(Scope.self, forKey: .scope) ?? .root
    }
}

/// The broker's acknowledgement of an output, an action or an activation.
public struct Delivery: BusPayload, Hashable {
    /// How many boards the message was delivered to (flows run, subscribers reached).
    public var delivered: Int
    public init(delivered: Int) { self.delivered = delivered }
}

/// The payload of `complete`.
public struct Completion: BusPayload, Hashable {
    public var isDone: Bool
    public init(isDone: Bool) { self.isDone = isDone }
}

/// Names of the broker's control operations (the header's type name on a `control` message).
public enum ControlOperation {
    public static let list = "list"
    public static let status = "status"
    public static let introspect = "introspect"
    public static let tree = "tree"
    public static let flows = "flows"
    public static let registerFlow = "flow.register"
    public static let removeFlow = "flow.remove"
    /// Start or renew a monitor (``MonitorRequest``); pushes ``MonitorPush``.
    public static let monitor = "monitor"
    /// The broker's metrics in the Prometheus text format (``MetricsText``).
    public static let metrics = "metrics"
    /// Answered with an empty `Delivery`: a liveness probe (an attached motherboard's link pings
    /// its parent with it).
    public static let ping = "ping"
    /// Start a manifest board that is not running (``StatusRequest``), one its restart limit
    /// stopped included (its restart count starts over); answered with its ``BoardInfo``.
    public static let restart = "restart"
    /// From the uplink of a motherboard that serves scopes of a parent motherboard, on its own
    /// motherboard's ipc socket (``UplinkAttach``): its boards are pushed to it from then on.
    public static let uplinkAttach = "uplink.attach"
    /// Pushed to the uplink: a board of a served scope registered (``Registration``, no secret).
    public static let uplinkBoard = "uplink.board"
    /// Pushed to the uplink: a board of a served scope left (``StatusRequest``).
    public static let uplinkGone = "uplink.gone"
    /// From the motherboard's own NATS gateway, on its in-process endpoint (``UplinkAttach``, with
    /// the gateway's secret): the boards of this motherboard, every scope's, are pushed to it from
    /// then on, but those it registered itself for other hosts.
    public static let exportAttach = "export.attach"
    /// Pushed to the exporting gateway: a board registered (``Registration``, no secret).
    public static let exportBoard = "export.board"
    /// Pushed to the exporting gateway: a board left (``StatusRequest``).
    public static let exportGone = "export.gone"
    /// From an attached motherboard's link, when it comes up (``LinkChain``: the attaching
    /// motherboard's link id): answered with the parent's chain (its link id, then those above
    /// it), or `badArgument` when the attaching motherboard is in it (attaching would make a cycle).
    public static let linkChain = "link.chain"
    /// From the uplink to its own motherboard (``LinkChain``): the chain of motherboards above it.
    public static let uplinkChain = "uplink.chain"
    /// The access policy's answer to a question (``PolicyCheck``), answered with ``PolicyAnswer``.
    public static let policyCheck = "policy.check"
    /// The access policy in force (``PolicyText``).
    public static let policyShow = "policy.show"
    /// Every store of the live boards, with its owner and actions (``StoreList``).
    public static let stores = "stores"
    /// The activations of at-least-once boards that ran out of deliveries (``DeadLetterList``).
    public static let deadLetters = "dead-letters"
    /// Delivers a dead letter again, as a new activation (``DeadLetterReplay``; answered ``Delivery``).
    public static let deadLettersReplay = "dead-letters.replay"
    public static let deadLettersShow = "dead-letters.show"
    public static let deadLettersDrop = "dead-letters.drop"
    /// From the board an at-least-once activation was handed to: it has taken it, and it is not
    /// delivered again whatever happens to the board (``DeliveryTaken``; answered ``Delivery``).
    public static let deliveryTaken = "delivery.taken"
    /// From a board: it refused an activation nobody waited for (a flow's input it was too busy
    /// for, one of a type it does not take), so that it is counted and shown, not lost unseen
    /// (``InputRefused``; answered nothing).
    public static let inputRefused = "input.refused"
}

/// The report of `input.refused`: the activation's type name and the board's error.
public struct InputRefused: BusPayload, Hashable {
    public var type: String
    public var error: BusError
    public init(type: String, error: BusError) {
        self.type = type
        self.error = error
    }
}

/// The question of `delivery.taken`: the activation's correlation id as the board was handed it.
public struct DeliveryTaken: BusPayload, Hashable {
    public var id: UInt64
    public init(id: UInt64) { self.id = id }
}

/// An activation that ran out of deliveries: its board ended `attempts` times while holding it.
public struct DeadLetter: BusPayload, Hashable {
    public var id: UInt64
    public var board: BoardID
    public var scope: Scope
    /// The activation's type name.
    public var type: String
    public var attempts: Int
    /// Why its last delivery ended.
    public var reason: String
    public var payloadBytes: Int
    /// When it was dead-lettered, in seconds since 1970.
    public var time: Double
    /// The same time in ISO 8601, UTC, to the millisecond (`2026-12-02T14:10:00.123Z`): set by the
    /// broker in what it answers.
    public var at: String?
    /// The error its board answered its last delivery with, when it answered one (a failure, or
    /// an error it gave up with); absent when its board ended holding it.
    public var lastError: BusError?

    public init(
        id: UInt64, board: BoardID, scope: Scope, type: String, attempts: Int, reason: String, payloadBytes: Int, time: Double,
        lastError: BusError? = nil
    ) {
        self.id = id
        self.board = board
        self.scope = scope
        self.type = type
        self.attempts = attempts
        self.reason = reason
        self.payloadBytes = payloadBytes
        self.time = time
        self.lastError = lastError
    }

    /// `time` in ISO 8601, UTC, to the millisecond.
    public static func isoTime(_ time: Double) -> String {
        guard time.isFinite, abs(time) < 1e11 else { return "-" }
        let format = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        return Date(timeIntervalSince1970: time).formatted(format)
    }
}

/// The answer to `dead-letters.show`: a letter and its activation's payload, as JSON where it
/// is JSON, else in base64.
public struct DeadLetterDetail: BusPayload, Hashable {
    public var letter: DeadLetter
    /// The payload's JSON text, when it is JSON.
    public var payloadJSON: String?
    /// The payload in base64, when it is not JSON.
    public var payloadBase64: String?
    /// The payload's content type (header field 3), when its sender gave one.
    public var contentType: String?
    public init(letter: DeadLetter, payloadJSON: String? = nil, payloadBase64: String? = nil, contentType: String? = nil) {
        self.letter = letter
        self.payloadJSON = payloadJSON
        self.payloadBase64 = payloadBase64
        self.contentType = contentType
    }
}

/// The answer to `dead-letters`: oldest first.
public struct DeadLetterList: BusPayload, Hashable {
    public var letters: [DeadLetter]
    public init(letters: [DeadLetter]) { self.letters = letters }
}

/// The question of `dead-letters.replay`.
public struct DeadLetterReplay: BusPayload, Hashable {
    public var id: UInt64
    public init(id: UInt64) { self.id = id }
}

/// One store of a live board, as `stores` lists it.
public struct StoreInfo: BusPayload, Hashable {
    public var store: String
    public var scope: Scope
    /// The board that owns it.
    public var board: BoardID
    /// Its actions (empty when its owner did not describe it).
    public var actions: [String]
    /// Its state's shape in one line, when its owner described it.
    public var state: String?
    public init(store: String, scope: Scope, board: BoardID, actions: [String], state: String?) {
        self.store = store
        self.scope = scope
        self.board = board
        self.actions = actions
        self.state = state
    }
}

/// The answer to `stores`.
public struct StoreList: BusPayload, Hashable {
    public var stores: [StoreInfo]
    public init(stores: [StoreInfo]) { self.stores = stores }
}

/// The payload of `policy.check`: may `principal` do `operation` on `target` (`command` for `call`)?
public struct PolicyCheck: BusPayload, Hashable {
    public var principal: String
    public var operation: String
    public var target: String
    public var command: String?
    public init(principal: String, operation: String, target: String, command: String? = nil) {
        self.principal = principal
        self.operation = operation
        self.target = target
        self.command = command
    }
}

/// The answer to `policy.check`: the decision, the rule that made it, the policy file it is from.
public struct PolicyAnswer: BusPayload, Hashable {
    public var allowed: Bool
    public var rule: String
    public var source: String?
    public init(allowed: Bool, rule: String, source: String?) {
        self.allowed = allowed
        self.rule = rule
        self.source = source
    }
}

/// The answer to `policy.show`: the policy file's text (empty when there is none: every remote
/// principal is denied everything) and its path.
public struct PolicyText: BusPayload, Hashable {
    public var source: String?
    public var text: String
    public init(source: String?, text: String) {
        self.source = source
        self.text = text
    }
}

/// Link ids of motherboards (``EnvelopeHeader/linkTrail``), nearest first.
public struct LinkChain: BusPayload, Hashable {
    public var ids: [UInt64]
    public init(ids: [UInt64]) { self.ids = ids }
}

/// How the uplink proves to its own motherboard that it is the uplink: the secret the motherboard
/// made for it at start (both live in one process; the secret never leaves it).
public struct UplinkAttach: BusPayload, Hashable {
    public var secret: String
    public init(secret: String) { self.secret = secret }
}

/// The broker's answer to a successful `register`: the cadence the board must keep.
public struct RegistrationAccepted: BusPayload, Hashable {
    /// How often the board should send a heartbeat.
    public var heartbeatIntervalMilliseconds: Int
    /// After this long without hearing from the board, the broker drops it.
    public var livenessTimeoutMilliseconds: Int

    public init(heartbeatIntervalMilliseconds: Int, livenessTimeoutMilliseconds: Int) {
        self.heartbeatIntervalMilliseconds = heartbeatIntervalMilliseconds
        self.livenessTimeoutMilliseconds = livenessTimeoutMilliseconds
    }
}

/// Where a board is in its life, as `list` and `status` show it. A stable wire name, like
/// ``BusError/Code``: a peer that receives a state it does not know keeps its name.
public struct BoardState: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    /// The wire name, e.g. `running`.
    public let name: String

    public init(name: String) { self.name = name }

    /// The wire name (Codable as a plain string through `RawRepresentable`).
    public init(rawValue: String) { name = rawValue }
    public var rawValue: String { name }

    /// Registered and live.
    public static let running = BoardState(name: "running")
    /// Registered, silent past the liveness timeout, but its process runs and its connection
    /// answers: a handler holds its thread. Requests to it wait, each until its own deadline.
    public static let busy = BoardState(name: "busy")
    /// Its process was started and has not registered yet.
    public static let starting = BoardState(name: "starting")
    /// Its process ended and the broker waits out the back-off before starting it again.
    public static let restarting = BoardState(name: "restarting")
    /// Its restart limit was reached: it stays down.
    public static let failed = BoardState(name: "failed")
    /// Not running (never started, completed, or ended without a restart).
    public static let stopped = BoardState(name: "stopped")
    /// On another host whose link is down: kept (not gone), answered `unreachable`, until it
    /// registers again.
    public static let unreachable = BoardState(name: "unreachable")

    public var description: String { name }
}

/// The answer to `metrics`: the broker's metrics in the Prometheus text exposition format.
public struct MetricsText: BusPayload, Hashable {
    /// The format's content type (`text/plain; version=0.0.4`).
    public var format: String
    public var text: String

    public init(format: String = "text/plain; version=0.0.4", text: String) {
        self.format = format
        self.text = text
    }
}
