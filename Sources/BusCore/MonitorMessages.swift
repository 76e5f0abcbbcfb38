import FoundationEssentials

/// Which routed messages a monitor shows. Each list matches when it is empty or when one of its
/// values matches; the lists combine with "and". `--board X` matches either end.
public struct MonitorFilter: BusPayload, Hashable {
    public var boards: [String]
    public var scopes: [String]
    /// Monitor kind names (``MonitorEvent/kind``): command, reply, error, activation, output,
    /// flow, action, dispatch, store, control.
    public var kinds: [String]
    /// Type, command, action or operation names (``MonitorEvent/type``).
    public var types: [String]
    /// Trace ids (32 hex digits).
    public var traces: [String]

    public init(boards: [String] = [], scopes: [String] = [], kinds: [String] = [], types: [String] = [], traces: [String] = []) {
        self.boards = boards
        self.scopes = scopes
        self.kinds = kinds
        self.types = types
        self.traces = traces
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        boards = try container.decodeIfPresent([String].self, forKey: .boards) ?? []
        scopes = try container.decodeIfPresent([String].self, forKey: .scopes) ?? []
        kinds = try container.decodeIfPresent([String].self, forKey: .kinds) ?? []
        types = try container.decodeIfPresent([String].self, forKey: .types) ?? []
        traces = try container.decodeIfPresent([String].self, forKey: .traces) ?? []
    }

    /// Whether the filter selects a message with these fields. The broker asks before it builds an
    /// event, so a monitor that selects little costs little.
    public func matches(kind: String, scope: String, source: String, target: String, type: String, trace: String?) -> Bool {
        (boards.isEmpty || boards.contains(source) || boards.contains(target))
            && (scopes.isEmpty || scopes.contains(scope))
            && (kinds.isEmpty || kinds.contains(kind))
            && (types.isEmpty || types.contains(type))
            && (traces.isEmpty || trace.map(traces.contains) ?? false)
    }

    public func matches(_ event: MonitorEvent) -> Bool {
        matches(kind: event.kind, scope: event.scope, source: event.source, target: event.target, type: event.type, trace: event.trace)
    }

    /// Refuses a kind or trace id that cannot match anything (a typo would show nothing, forever).
    public func validate() throws(BusError) {
        for kind in kinds where !MonitorEvent.kindNames.contains(kind) {
            throw BusError(.badArgument, "no message kind '\(kind.escapedForDisplay())' (kinds: \(MonitorEvent.kindNames.joined(separator: ", ")))")
        }
        for trace in traces where !TraceContext.isTraceID(trace) {
            throw BusError(.badArgument, "'\(trace.escapedForDisplay())' is not a trace id (32 lowercase hex digits, not all zero)")
        }
    }
}

/// `monitor` (control operation): start or renew a monitor on this connection. The broker then
/// pushes a `control` message of type `monitor.event` for each routed message the filter selects,
/// never more than `window` beyond the `read` count the monitor last reported: the monitor sends
/// this request again (no reply wanted) as it reads and at least every second. A monitor not
/// renewed for 5 seconds, or whose connection is gone, is forgotten.
public struct MonitorRequest: BusPayload, Hashable {
    public var filter: MonitorFilter
    /// Bytes of each payload to include (UTF-8, cut on a character boundary); 0 for none.
    public var payloadBytes: Int
    /// Events the broker may send beyond `read` before it drops and counts (1…100 000).
    public var window: Int
    /// Events this monitor has read so far.
    public var read: UInt64

    public static let defaultWindow = 1000
    public static let maximumPayloadBytes = 1 << 20

    public init(filter: MonitorFilter = .init(), payloadBytes: Int = 0, window: Int = MonitorRequest.defaultWindow, read: UInt64 = 0) {
        self.filter = filter
        self.payloadBytes = payloadBytes
        self.window = window
        self.read = read
    }

    public func validate() throws(BusError) {
        try filter.validate()
        guard (0...Self.maximumPayloadBytes).contains(payloadBytes) else {
            throw BusError(.badArgument, "payload length \(payloadBytes) is outside 0...\(Self.maximumPayloadBytes)")
        }
        guard (1...100_000).contains(window) else { throw BusError(.badArgument, "monitor window \(window) is outside 1...100000") }
    }
}

/// One routed message, as a monitor shows it.
public struct MonitorEvent: BusPayload, Hashable {
    /// When the broker routed it: seconds since 1970 (UTC).
    public var time: Double
    /// The scope it acts in (``rootScope`` for the root).
    public var scope: String
    /// command, reply, error, activation, output, flow, action, dispatch, store or control.
    public var kind: String
    /// Board ids; a connection that is not a board shows as `:` and its routing id in hex, the
    /// broker itself as `motherboard`.
    public var source: String
    public var target: String
    /// Type, command, action, store operation or control operation name; the code for an error.
    public var type: String
    public var correlationID: UInt64
    public var payloadBytes: Int
    /// For an error: its code.
    public var error: String?
    /// For an answer to a request the broker forwarded: microseconds from forwarding to answer.
    public var roundTripMicroseconds: Int?
    /// The W3C trace id and the sender's span id, when the message carries a trace context.
    public var trace: String?
    public var span: String?
    /// The W3C `tracestate` carried with the trace context (header field 8).
    public var traceState: String?
    public var dispatchID: String?
    /// For store traffic (dispatch, store): the store's name (the target is its owner board).
    public var store: String?
    /// The payload's first bytes as text, when the monitor asked for them, and whether it was cut.
    public var payload: String?
    public var payloadCut: Bool?

    public init(
        time: Double, scope: String, kind: String, source: String, target: String, type: String, correlationID: UInt64, payloadBytes: Int,
        error: String? = nil, roundTripMicroseconds: Int? = nil, trace: String? = nil, span: String? = nil, dispatchID: String? = nil,
        store: String? = nil, payload: String? = nil, payloadCut: Bool? = nil, traceState: String? = nil
    ) {
        self.traceState = traceState
        self.time = time
        self.scope = scope
        self.kind = kind
        self.source = source
        self.target = target
        self.type = type
        self.correlationID = correlationID
        self.payloadBytes = payloadBytes
        self.error = error
        self.roundTripMicroseconds = roundTripMicroseconds
        self.trace = trace
        self.span = span
        self.dispatchID = dispatchID
        self.store = store
        self.payload = payload
        self.payloadCut = payloadCut
    }

    /// How the root scope is shown and filtered.
    public static let rootScope = "/"

    /// The monitor kinds, in the order of ``MessageKind``.
    public static let kindNames = ["command", "reply", "error", "activation", "output", "flow", "action", "dispatch", "store", "control"]

    /// The monitor kind of a message kind (nil for heartbeats, which monitors do not show).
    public static func kindName(_ kind: MessageKind) -> String? {
        switch kind {
        case .command: "command"
        case .reply: "reply"
        case .error: "error"
        case .activate: "activation"
        case .output: "output"
        case .flowEvent: "flow"
        case .action: "action"
        case .dispatch: "dispatch"
        case .store: "store"
        case .control, .register, .unregister, .complete: "control"
        case .heartbeat: nil
        }
    }

    /// The first `limit` bytes of `payload` as text, cut before a character that would not fit
    /// whole (a multi-byte character is never split); bytes that are not UTF-8 are replaced.
    public static func excerpt(_ payload: Data, limit: Int) -> (text: String, cut: Bool) {
        guard payload.count > limit else { return (String(decoding: payload, as: UTF8.self), false) }
        var end = limit
        // Back off continuation bytes (10xxxxxx) so that the cut falls before a character's lead byte.
        while end > 0, payload[payload.startIndex + end] & 0xC0 == 0x80 { end -= 1 }
        return (String(decoding: payload.prefix(end), as: UTF8.self), true)
    }

    /// One line for a person: time, scope, kind, source → target, type, correlation id, size,
    /// round trip, trace, payload. Every field a peer chooses is escaped
    /// (``Swift/String/escapedForDisplay(limit:)``): a newline or an escape sequence in a type
    /// name, an id or a payload cannot make a second line or drive the terminal.
    public var line: String {
        func shown(_ text: String) -> String { text.escapedForDisplay(limit: .max) }
        var parts = [
            Self.clock(time), shown(scope), Self.padded(shown(kind), to: 10),
            "\(shown(source)) → \(shown(target))", type.isEmpty ? "-" : shown(type),
        ]
        parts.append(DeliveryID.shown(correlationID))
        parts.append("\(payloadBytes)B")
        if let roundTripMicroseconds { parts.append(Self.duration(roundTripMicroseconds)) }
        if let store { parts.append("store=\(shown(store))") }
        if let trace { parts.append("trace=\(shown(trace))") }
        if let dispatchID { parts.append("id=\(dispatchID.escapedForDisplay())") }
        var text = parts.joined(separator: " ")
        if let payload { text += " " + payload.escapedForDisplay(limit: .max) + (payloadCut == true ? "…" : "") }
        return text
    }

    /// Whether `time` is one a clock shows: finite, from 1970 to the year 5000.
    public static func isShowableTime(_ time: Double) -> Bool {
        time.isFinite && time >= 0 && time < 95_617_584_000
    }

    private static func clock(_ time: Double) -> String {
        guard isShowableTime(time) else { return "??:??:??.??????" }
        let seconds = Int(time.rounded(.down))
        let micro = Int(((time - Double(seconds)) * 1_000_000).rounded(.down))
        let day = ((seconds % 86_400) + 86_400) % 86_400
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let fraction = String(micro)
        return "\(two(day / 3600)):\(two(day / 60 % 60)):\(two(day % 60)).\(String(repeating: "0", count: max(0, 6 - fraction.count)))\(fraction)"
    }

    private static func duration(_ microseconds: Int) -> String {
        guard microseconds >= 10_000 else { return "\(microseconds)µs" }
        let tenths = (microseconds + 50) / 100
        return "\(tenths / 10).\(tenths % 10)ms"
    }

    /// `text` cut or filled with spaces to `width` characters.
    private static func padded(_ text: String, to width: Int) -> String {
        text.count >= width ? String(text.prefix(width)) : text + String(repeating: " ", count: width - text.count)
    }
}

/// What the broker pushes to a monitor (`control` `monitor.event`): an event, and how many events
/// the filter selected but were not sent since the previous push because the monitor had not
/// read its window (0 almost always). A push with only `dropped` reports drops when no event follows.
public struct MonitorPush: BusPayload, Hashable {
    public var dropped: Int
    public var event: MonitorEvent?

    public init(dropped: Int = 0, event: MonitorEvent?) {
        self.dropped = dropped
        self.event = event
    }

    public static let typeName = "monitor.event"
}

extension MonitorPush {
    /// The push as JSON, written by hand: the broker writes one per message a monitor is shown,
    /// and Foundation's encoder costs microseconds each. Decodes with any JSON decoder to the
    /// same value (the keys are the Codable ones).
    public func encodedJSON() -> Data {
        var out = "{\"dropped\":\(dropped)"
        if let event {
            out += ",\"event\":{"
            out += "\"time\":\(event.time),\"scope\":"
            Self.append(event.scope, to: &out)
            out += ",\"kind\":"
            Self.append(event.kind, to: &out)
            out += ",\"source\":"
            Self.append(event.source, to: &out)
            out += ",\"target\":"
            Self.append(event.target, to: &out)
            out += ",\"type\":"
            Self.append(event.type, to: &out)
            out += ",\"correlationID\":\(event.correlationID),\"payloadBytes\":\(event.payloadBytes)"
            for (key, value) in [
                ("error", event.error), ("trace", event.trace), ("span", event.span), ("traceState", event.traceState),
                ("dispatchID", event.dispatchID), ("store", event.store), ("payload", event.payload),
            ] {
                guard let value else { continue }
                out += ",\"\(key)\":"
                Self.append(value, to: &out)
            }
            if let roundTrip = event.roundTripMicroseconds { out += ",\"roundTripMicroseconds\":\(roundTrip)" }
            if let cut = event.payloadCut { out += ",\"payloadCut\":\(cut)" }
            out += "}"
        }
        out += "}"
        return Data(out.utf8)
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped.
    static func append(_ text: String, to out: inout String) {
        out += "\""
        var plain = true
        for byte in text.utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            plain = false
            break
        }
        if plain {
            out += text
        } else {
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                default:
                    if scalar.value < 0x20 {
                        let hex = String(scalar.value, radix: 16)
                        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                    } else {
                        out.unicodeScalars.append(scalar)
                    }
                }
            }
        }
        out += "\""
    }
}
