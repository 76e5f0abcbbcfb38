import Foundation

/// The routing part of an envelope. The broker reads only this; payloads pass through untouched.
public struct EnvelopeHeader: Sendable, Hashable, Codable {
    /// The protocol version this code speaks.
    public static let currentVersion: UInt8 = 3

    /// Protocol version of the sender.
    public var version: UInt8
    /// What the message is.
    public var kind: MessageKind
    /// Options, e.g. whether a reply is expected.
    public var flags: MessageFlags
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
    /// Optional field 1: the idempotency key of a `dispatch` (a retry with the same id is applied
    /// once); 1 to ``HeaderCodec/maximumDispatchIDBytes`` bytes of UTF-8.
    public var dispatchID: String?
    /// Optional field 4: on a `flowEvent`, the flow that delivered it.
    public var flowID: FlowID?
    /// Optional field 2: the W3C trace context the message belongs to (since version 3).
    public var trace: TraceContext?
    /// Optional field 3: the payload's media type (``PayloadFormat``), on a command and its
    /// reply; nil means JSON. 1 to ``HeaderCodec/maximumContentTypeBytes`` bytes of ASCII.
    public var contentType: String?
    /// Optional fields this version does not know, as received (tag, length, value each); sent on
    /// unchanged, so that peers newer than the broker can use fields it does not know yet.
    public var unknownFields: Data

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
        self.dispatchID = dispatchID
        self.flowID = flowID
        self.trace = trace
        self.contentType = contentType
        self.unknownFields = unknownFields
    }
}
