import FoundationEssentials

/// The routing part of an envelope. The broker reads only this; payloads pass through untouched.
public struct EnvelopeHeader: Sendable, Hashable, Codable {
    /// The protocol version this code speaks: a message is one frame, the header then the payload.
    public static let currentVersion: UInt8 = 4
    /// The version before it, still read (and answered in, by the broker) for one release: a
    /// message is two frames, the header and the payload.
    public static let previousVersion: UInt8 = 3

    /// The protocol version this header is read as: the current one for every decoded header (a
    /// version-3 message is read into the same fields). Not what goes on the wire: the sender's
    /// framing writes the version byte (``HeaderCodec/encode(_:version:)``).
    public var version: UInt8
    /// What the message is.
    public var kind: MessageKind
    /// Options, e.g. whether a reply is expected.
    public var flags: MessageFlags
    /// Whether the content type is `application/cbor`: every typed CBOR message and its reply
    /// carry it, so it is kept here rather than in the box of optional fields, where it would
    /// cost an allocation per header.
    private var isCBOR = false
    /// Chosen by the requester; the reply carries the same value. 0 when no reply is expected.
    public var correlationID: UInt64
    /// How long the sender will wait for a reply, in milliseconds; 0 means no deadline.
    public var timeoutMilliseconds: UInt32
    /// The board the message comes from (empty for clients such as busctl).
    public var source: String
    /// The board the message is for (empty when it is for the broker).
    public var target: String
    /// The motherboard scope of the source (on the wire, empty for the root).
    public var scope: Scope
    /// The payload's type name: input/output/command type, action name or control operation.
    public var typeName: String
    /// The optional fields, rare on the hot path, in one copy-on-write box: the header is copied
    /// at every step of a message's way through a process, and without them it is half the size
    /// (88 bytes instead of about 180), nil when a header has none of them.
    private var optional: OptionalFields?

    private final class OptionalFields: @unchecked Sendable {
        var dispatchID: String?
        var flowID: FlowID?
        var trace: TraceContext?
        var contentType: String?
        var linkTrail: [UInt64]?
        var onBehalfOf: String?
        var deliveryCount: UInt32?
        var traceState: String?
        var unknownFields = Data()

        init() {}

        init(copying other: OptionalFields) {
            (dispatchID, flowID, trace, contentType, linkTrail, onBehalfOf, deliveryCount, traceState, unknownFields) =
                (
                    other.dispatchID, other.flowID, other.trace, other.contentType, other.linkTrail, other.onBehalfOf, other.deliveryCount,
                    other.traceState, other.unknownFields
                )
        }

        var isEmpty: Bool {
            dispatchID == nil && flowID == nil && trace == nil && contentType == nil && linkTrail == nil && onBehalfOf == nil
                && deliveryCount == nil && traceState == nil && unknownFields.isEmpty
        }
    }

    /// Changes the optional fields, copying the box first when another header shares it. Clearing
    /// a field of a header that has none is nothing to do (no box is made).
    private mutating func setOptional(clearing: Bool, _ change: (OptionalFields) -> Void) {
        if optional == nil {
            if clearing { return }
            optional = OptionalFields()
        } else if !isKnownUniquelyReferenced(&optional) {
            optional = OptionalFields(copying: optional!)
        }
        change(optional!)
        if optional!.isEmpty { optional = nil }
    }

    /// Optional field 1: the idempotency key of a `dispatch` (a retry with the same id is applied
    /// once); 1 to ``HeaderCodec/maximumDispatchIDBytes`` bytes of UTF-8.
    public var dispatchID: String? {
        get { optional?.dispatchID }
        set { setOptional(clearing: newValue == nil) { $0.dispatchID = newValue } }
    }
    /// Optional field 4: on a `flowEvent`, the flow that delivered it.
    public var flowID: FlowID? {
        get { optional?.flowID }
        set { setOptional(clearing: newValue == nil) { $0.flowID = newValue } }
    }
    /// Optional field 5: the motherboards an action went through on its way up links (each one's
    /// link id, in order), so that one that comes back to a motherboard it left is dropped.
    public var linkTrail: [UInt64]? {
        get { optional?.linkTrail }
        set { setOptional(clearing: newValue == nil) { $0.linkTrail = newValue } }
    }

    /// Optional field 6: the remote principal a gateway of the broker sends this for (an MDP
    /// client's key name): the broker asks its access policy about that principal. Honoured only
    /// from the broker's own user and its gateways; a remote peer that sends it is refused.
    /// 1 to 255 bytes of printable ASCII.
    public var onBehalfOf: String? {
        get { optional?.onBehalfOf }
        set { setOptional(clearing: newValue == nil) { $0.onBehalfOf = newValue } }
    }

    /// Optional field 7: on an activation of an at-least-once board, which delivery of it this is
    /// (1 the first; more after its board ended before acknowledging it). The correlation id stays
    /// the same across deliveries: with this count, the board can tell a redelivery.
    public var deliveryCount: UInt32? {
        get { optional?.deliveryCount }
        set { setOptional(clearing: newValue == nil) { $0.deliveryCount = newValue } }
    }

    /// Optional field 8: the W3C `tracestate` of the trace context in field 2 (vendors' `key=value`
    /// entries, comma-separated): printable ASCII, 1 to ``TraceContext/maximumStateBytes`` bytes,
    /// only with a trace context. It goes wherever the trace context goes.
    public var traceState: String? {
        get { optional?.traceState }
        set { setOptional(clearing: newValue == nil) { $0.traceState = newValue } }
    }

    /// Optional field 2: the W3C trace context the message belongs to (since version 3).
    public var trace: TraceContext? {
        get { optional?.trace }
        set { setOptional(clearing: newValue == nil) { $0.trace = newValue } }
    }
    /// Optional field 3: the payload's media type (``PayloadFormat``), on a command and its
    /// reply; nil means JSON. 1 to ``HeaderCodec/maximumContentTypeBytes`` bytes of ASCII.
    public var contentType: String? {
        get { isCBOR ? PayloadFormat.cborContentType : optional?.contentType }
        set {
            // Most headers have no optional field and no content type: nothing to compare or box.
            guard newValue != nil || optional != nil else { return isCBOR = false }
            isCBOR = newValue == PayloadFormat.cborContentType
            let boxed = isCBOR ? nil : newValue
            setOptional(clearing: boxed == nil) { $0.contentType = boxed }
        }
    }
    /// Optional fields this version does not know, as received (tag, length, value each); sent on
    /// unchanged, so that peers newer than the broker can use fields it does not know yet.
    public var unknownFields: Data {
        get { optional?.unknownFields ?? Data() }
        set { setOptional(clearing: newValue.isEmpty) { $0.unknownFields = newValue } }
    }

    public init(
        version: UInt8 = EnvelopeHeader.currentVersion,
        kind: MessageKind,
        flags: MessageFlags = [],
        correlationID: UInt64 = 0,
        timeoutMilliseconds: UInt32 = 0,
        source: String = "",
        target: String = "",
        scope: Scope = .root,
        typeName: String = "",
        dispatchID: String? = nil,
        flowID: FlowID? = nil,
        trace: TraceContext? = nil,
        contentType: String? = nil,
        linkTrail: [UInt64]? = nil,
        unknownFields: Data = Data()
    ) {
        self.version = version
        self.kind = kind
        self.flags = flags
        self.correlationID = correlationID
        self.timeoutMilliseconds = timeoutMilliseconds
        self.source = source
        self.target = target
        self.scope = scope
        self.typeName = typeName
        // The optional fields start empty (no box); only those given are set.
        if dispatchID != nil { self.dispatchID = dispatchID }
        if flowID != nil { self.flowID = flowID }
        if trace != nil { self.trace = trace }
        if contentType != nil { self.contentType = contentType }
        if linkTrail != nil { self.linkTrail = linkTrail }
        if !unknownFields.isEmpty { self.unknownFields = unknownFields }
    }
}

extension EnvelopeHeader {
    public static func == (a: EnvelopeHeader, b: EnvelopeHeader) -> Bool {
        a.version == b.version && a.kind == b.kind && a.flags == b.flags && a.correlationID == b.correlationID
            && a.timeoutMilliseconds == b.timeoutMilliseconds && a.source == b.source && a.target == b.target && a.scope == b.scope
            && a.typeName == b.typeName && a.dispatchID == b.dispatchID && a.flowID == b.flowID && a.trace == b.trace
            && a.contentType == b.contentType && a.linkTrail == b.linkTrail && a.unknownFields == b.unknownFields
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        hasher.combine(correlationID)
        hasher.combine(source)
        hasher.combine(target)
        hasher.combine(typeName)
        hasher.combine(dispatchID)
    }

    private enum CodingKeys: String, CodingKey {
        case version, kind, flags, correlationID, timeoutMilliseconds, source, target, scope, typeName, dispatchID, flowID, trace,
            contentType, linkTrail, unknownFields
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            version: try container.decode(UInt8.self, forKey: .version), kind: try container.decode(MessageKind.self, forKey: .kind),
            flags: try container.decode(MessageFlags.self, forKey: .flags),
            correlationID: try container.decode(UInt64.self, forKey: .correlationID),
            timeoutMilliseconds: try container.decode(UInt32.self, forKey: .timeoutMilliseconds),
            source: try container.decode(String.self, forKey: .source), target: try container.decode(String.self, forKey: .target),
            scope: try container.decode(Scope.self, forKey: .scope), typeName: try container.decode(String.self, forKey: .typeName),
            dispatchID: try container.decodeIfPresent(String.self, forKey: .dispatchID),
            flowID: try container.decodeIfPresent(FlowID.self, forKey: .flowID),
            trace: try container.decodeIfPresent(TraceContext.self, forKey: .trace),
            contentType: try container.decodeIfPresent(String.self, forKey: .contentType),
            linkTrail: try container.decodeIfPresent([UInt64].self, forKey: .linkTrail),
            unknownFields: try container.decodeIfPresent(Data.self, forKey: .unknownFields) ?? Data())
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(kind, forKey: .kind)
        try container.encode(flags, forKey: .flags)
        try container.encode(correlationID, forKey: .correlationID)
        try container.encode(timeoutMilliseconds, forKey: .timeoutMilliseconds)
        try container.encode(source, forKey: .source)
        try container.encode(target, forKey: .target)
        try container.encode(scope, forKey: .scope)
        try container.encode(typeName, forKey: .typeName)
        try container.encodeIfPresent(dispatchID, forKey: .dispatchID)
        try container.encodeIfPresent(flowID, forKey: .flowID)
        try container.encodeIfPresent(trace, forKey: .trace)
        try container.encodeIfPresent(contentType, forKey: .contentType)
        try container.encodeIfPresent(linkTrail, forKey: .linkTrail)
        try container.encode(unknownFields, forKey: .unknownFields)
    }
}
