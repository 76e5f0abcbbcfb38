import FoundationEssentials

/// Where the fields of an encoded header are, after the frame's structure has been checked (size,
/// magic, version, kind, field lengths, no trailing bytes): everything ``HeaderCodec/decode(_:)``
/// checks but the strings' UTF-8, which it leaves as byte ranges.
///
/// A router reads the fixed fields and the names in place and rewrites the correlation id in the
/// received frame (``setCorrelationID(_:in:)``), without building an ``EnvelopeHeader``.
package struct HeaderLayout: Sendable, Hashable {
    package let kind: MessageKind
    package let flags: MessageFlags
    package let correlationID: UInt64
    package let timeoutMilliseconds: UInt32
    /// Byte ranges of the four strings in the frame.
    package let source: Range<Int>
    package let target: Range<Int>
    package let scope: Range<Int>
    package let typeName: Range<Int>
    /// Where the optional fields are (empty when there are none), and the dispatch id among them.
    package let optionalFields: Range<Int>
    package let dispatchID: Range<Int>?
    package let flowID: Range<Int>?
    package let trace: Range<Int>?
    package let contentType: Range<Int>?
    package let linkTrail: Range<Int>?
    package let onBehalfOf: Range<Int>?
    package let deliveryCount: Range<Int>?
    package let traceState: Range<Int>?

    /// Offset of the correlation id in the frame.
    static let correlationOffset = 6

    /// Checks the frame's structure; throws ``BusError`` with `malformed` or `tooLarge`.
    package init(_ buffer: UnsafeRawBufferPointer) throws(BusError) {
        guard buffer.count <= HeaderCodec.maximumHeaderBytes else {
            throw BusError(.tooLarge, "header of \(buffer.count) bytes is over the limit of \(HeaderCodec.maximumHeaderBytes)")
        }
        guard buffer.count >= HeaderCodec.fixedSize else {
            throw BusError(.malformed, "header truncated: \(buffer.count) bytes, at least \(HeaderCodec.fixedSize) needed")
        }
        guard buffer[0] == HeaderCodec.magic.0, buffer[1] == HeaderCodec.magic.1 else {
            throw BusError(.malformed, "header does not start with the BoardBus magic 'BB'")
        }
        let version = buffer[2]
        guard version == EnvelopeHeader.currentVersion || version == EnvelopeHeader.previousVersion else {
            throw BusError(
                .unsupportedVersion,
                "unsupported protocol version \(version); this peer speaks \(EnvelopeHeader.currentVersion) "
                    + "and reads \(EnvelopeHeader.previousVersion) (docs/PROTOCOL.md §3)")
        }
        guard let kind = MessageKind(rawValue: buffer[3]) else {
            throw BusError(.malformed, "unknown message kind \(buffer[3])")
        }
        self.kind = kind
        flags = MessageFlags(rawValue: Self.bigEndian(buffer, at: 4, as: UInt16.self))
        correlationID = Self.bigEndian(buffer, at: Self.correlationOffset, as: UInt64.self)
        timeoutMilliseconds = Self.bigEndian(buffer, at: 14, as: UInt32.self)
        var offset = HeaderCodec.fixedSize
        source = try Self.field(buffer, &offset, .source)
        target = try Self.field(buffer, &offset, .target)
        scope = try Self.field(buffer, &offset, .scope)
        typeName = try Self.field(buffer, &offset, .typeName)
        optionalFields = offset..<buffer.count
        var dispatchID: Range<Int>?
        var flowID: Range<Int>?
        var trace: Range<Int>?
        var contentType: Range<Int>?
        var linkTrail: Range<Int>?
        var onBehalfOf: Range<Int>?
        var deliveryCount: Range<Int>?
        var traceState: Range<Int>?
        while offset < buffer.count {
            let (tag, value) = try Self.optionalField(buffer, &offset)
            switch tag {
            case HeaderCodec.OptionalField.dispatchID:
                guard dispatchID == nil else { throw BusError(.malformed, "header has two dispatch ids") }
                guard (1...HeaderCodec.maximumDispatchIDBytes).contains(value.count) else {
                    throw BusError(.malformed, "dispatch id of \(value.count) bytes is outside 1...\(HeaderCodec.maximumDispatchIDBytes)")
                }
                dispatchID = value
            case HeaderCodec.OptionalField.flowID:
                guard flowID == nil else { throw BusError(.malformed, "header has two flow ids") }
                guard value.count == 8 else { throw BusError(.malformed, "flow id of \(value.count) bytes (it has 8)") }
                flowID = value
            case HeaderCodec.OptionalField.trace:
                guard trace == nil else { throw BusError(.malformed, "header has two trace contexts") }
                guard value.count == TraceContext.encodedSize,
                    TraceContext(bytes: UnsafeRawBufferPointer(rebasing: buffer[value])) != nil
                else {
                    throw BusError(
                        .malformed,
                        value.count == TraceContext.encodedSize
                            ? "trace context with an all-zero trace or span id"
                            : "trace context of \(value.count) bytes: it has \(TraceContext.encodedSize)")
                }
                trace = value
            case HeaderCodec.OptionalField.contentType:
                guard contentType == nil else { throw BusError(.malformed, "header has two content types") }
                guard HeaderCodec.isValidContentType(UnsafeRawBufferPointer(rebasing: buffer[value])) else {
                    throw BusError(.malformed, HeaderCodec.contentTypeRule)
                }
                contentType = value
            case HeaderCodec.OptionalField.linkTrail:
                guard linkTrail == nil else { throw BusError(.malformed, "header has two link trails") }
                guard value.count % 8 == 0, (1...HeaderCodec.maximumLinkHops).contains(value.count / 8) else {
                    throw BusError(.malformed, "link trail of \(value.count) bytes (1 to \(HeaderCodec.maximumLinkHops) ids of 8 bytes)")
                }
                linkTrail = value
            case HeaderCodec.OptionalField.onBehalfOf:
                guard onBehalfOf == nil else { throw BusError(.malformed, "header has two principals it is sent on behalf of") }
                guard HeaderCodec.isValidPrincipal(UnsafeRawBufferPointer(rebasing: buffer[value])) else {
                    throw BusError(.malformed, "on behalf of: \(HeaderCodec.principalRule)")
                }
                onBehalfOf = value
            case HeaderCodec.OptionalField.deliveryCount:
                guard deliveryCount == nil else { throw BusError(.malformed, "header has two delivery counts") }
                guard value.count == 4, Self.bigEndian(buffer, at: value.lowerBound, as: UInt32.self) >= 1 else {
                    throw BusError(.malformed, "a delivery count is 4 bytes, at least 1")
                }
                deliveryCount = value
            case HeaderCodec.OptionalField.traceState:
                guard traceState == nil else { throw BusError(.malformed, "header has two trace states") }
                guard TraceContext.isValidState(UnsafeRawBufferPointer(rebasing: buffer[value])) else {
                    throw BusError(.malformed, HeaderCodec.traceStateRule)
                }
                traceState = value
            default:
                continue
            }
        }
        if traceState != nil, trace == nil { throw BusError(.malformed, "a trace state (field 8) without a trace context (field 2)") }
        self.traceState = traceState
        self.onBehalfOf = onBehalfOf
        self.deliveryCount = deliveryCount
        self.dispatchID = dispatchID
        self.flowID = flowID
        self.trace = trace
        self.contentType = contentType
        self.linkTrail = linkTrail
    }

    /// The correlation id to answer a header that is not valid with, when its fixed part can be
    /// read and it asks for an answer: the magic is there, the reply-expected flag is set, the
    /// kind is not an answer itself, and the id is not 0. Nil otherwise (the message is dropped).
    package static func answerableCorrelationID(_ buffer: UnsafeRawBufferPointer) -> UInt64? {
        guard buffer.count >= HeaderCodec.fixedSize, buffer[0] == HeaderCodec.magic.0, buffer[1] == HeaderCodec.magic.1 else { return nil }
        let flags = MessageFlags(rawValue: bigEndian(buffer, at: 4, as: UInt16.self))
        let id = bigEndian(buffer, at: correlationOffset, as: UInt64.self)
        guard flags.contains(.replyExpected), id != 0,
            buffer[3] != MessageKind.reply.rawValue, buffer[3] != MessageKind.error.rawValue
        else { return nil }
        return id
    }

    /// One optional field (a u8 tag, a u16 length, the value) at `offset`, which moves past it.
    static func optionalField(_ buffer: UnsafeRawBufferPointer, _ offset: inout Int) throws(BusError) -> (tag: UInt8, value: Range<Int>) {
        guard buffer.count - offset >= 3 else {
            throw BusError(.malformed, "header has \(buffer.count - offset) trailing bytes (an optional field needs a tag and a length)")
        }
        let tag = buffer[offset]
        guard tag != 0 else { throw BusError(.malformed, "optional field with tag 0") }
        offset += 1
        return (tag, try field(buffer, &offset, .optional(tag), limit: HeaderCodec.maximumOptionalFieldBytes))
    }

    /// The optional fields of tags this version does not know, as they are in the frame.
    func unknownFields(in buffer: UnsafeRawBufferPointer) -> Data {
        var unknown = Data()
        var offset = optionalFields.lowerBound
        while offset < optionalFields.upperBound {
            let start = offset
            guard let (tag, _) = try? Self.optionalField(buffer, &offset) else { break }
            if !HeaderCodec.OptionalField.isKnown(tag) {
                unknown.append(contentsOf: buffer[start..<offset])
            }
        }
        return unknown
    }

    /// Whether every string is ASCII (then it is valid UTF-8 without further checks).
    package func stringsAreASCII(in buffer: UnsafeRawBufferPointer) -> Bool {
        func ascii(_ range: Range<Int>) -> Bool { UnsafeRawBufferPointer(rebasing: buffer[range]).isASCII }
        // The four strings follow each other, each after its two length bytes: those are below
        // 0x80 too while every string is shorter than 128 bytes, and the run is checked at once.
        let strings = ascii((source.lowerBound - 2)..<typeName.upperBound) || ascii(source) && ascii(target) && ascii(scope) && ascii(typeName)
        return strings && dispatchID.map(ascii) ?? true
    }

    /// The correlation id of a frame at least ``HeaderCodec/fixedSize`` long (0 when shorter).
    package static func correlationID(in buffer: UnsafeRawBufferPointer) -> UInt64 {
        buffer.count >= HeaderCodec.fixedSize ? bigEndian(buffer, at: correlationOffset, as: UInt64.self) : 0
    }

    /// Writes a new correlation id into the frame the layout was read from.
    package static func setCorrelationID(_ id: UInt64, in buffer: UnsafeMutableRawBufferPointer) {
        buffer.storeBytes(of: id.bigEndian, toByteOffset: correlationOffset, as: UInt64.self)
    }

    static func bigEndian<T: FixedWidthInteger>(_ buffer: UnsafeRawBufferPointer, at offset: Int, as: T.Type) -> T {
        T(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// Which field ``field(_:_:_:limit:)`` reads, named only in its errors (a closure making the
    /// name cost a context on every call, four or more a message).
    private enum FieldName: CustomStringConvertible {
        case source, target, scope, typeName
        case optional(UInt8)

        var description: String {
            switch self {
            case .source: "source"
            case .target: "target"
            case .scope: "scope"
            case .typeName: "type name"
            case .optional(let tag): "optional field \(tag)"
            }
        }
    }

    /// A u16 length and that many bytes (at most `limit`), starting at `offset`, which moves past them.
    @inline(__always)
    private static func field(
        _ buffer: UnsafeRawBufferPointer, _ offset: inout Int, _ name: FieldName, limit: Int = HeaderCodec.maximumFieldBytes
    ) throws(BusError) -> Range<Int> {
        guard buffer.count - offset >= 2 else {
            throw BusError(.malformed, "header truncated before the \(name) length")
        }
        let length = Int(bigEndian(buffer, at: offset, as: UInt16.self))
        offset += 2
        guard length <= limit else {
            throw BusError(.malformed, "\(name) field of \(length) bytes is over the limit of \(limit)")
        }
        guard buffer.count - offset >= length else {
            throw BusError(.malformed, "header truncated inside the \(name) field")
        }
        defer { offset += length }
        return offset..<(offset + length)
    }
}
