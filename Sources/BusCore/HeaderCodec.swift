import FoundationEssentials

/// The compact binary encoding of ``EnvelopeHeader`` (docs/PROTOCOL.md, "Header frame").
///
/// Layout, all integers big-endian:
/// ```
/// offset size field
///  0     2    magic "BB" (0x42 0x42)
///  2     1    version (4; 3 is still read)
///  3     1    kind
///  4     2    flags
///  6     8    correlation id
/// 14     4    timeout in milliseconds (0 = none)
/// 18     -    source, target, scope, type name: each a u16 length then that many UTF-8 bytes
///  -     -    optional fields: each a u8 tag, a u16 length, the value (tag 1: dispatch id,
///             UTF-8; tag 2: W3C trace context, 25 bytes; tag 3: payload content type, ASCII;
///             tag 4: flow id, u64; tag 5: link trail, 1 to 16 u64; unknown tags are kept and
///             passed on)
/// ```
/// In version 4 the header ends with a 0 byte (where a tag would be) and the payload follows in
/// the same frame (``WireFraming``); in version 3 the optional fields run to the end of the header
/// frame and the payload is a second frame. These functions read and write the header's bytes
/// alone, without the 0 byte.
/// The fixed part is the same in every version, so a receiver can read a bad header's correlation
/// id and flags and answer it. Nothing is ever cut: a field over its limit is refused with
/// `badArgument` before anything is sent.
///
/// A hand-written codec because the broker decodes a header on every hop; JSON would cost
/// several microseconds each time.
public enum HeaderCodec {
    /// Size of the fixed part before the strings.
    public static let fixedSize = 18
    /// Largest header accepted, in bytes.
    public static let maximumHeaderBytes = 8192
    /// Longest of the four string fields (source, target, scope, type name), in UTF-8 bytes.
    public static let maximumFieldBytes = 1024
    /// Longest dispatch id, in UTF-8 bytes (and the shortest is 1).
    public static let maximumDispatchIDBytes = 255
    /// Longest payload content type, in bytes (and the shortest is 1).
    public static let maximumContentTypeBytes = 255
    /// The most motherboards an action goes up through: one more link is refused.
    public static let maximumLinkHops = 16

    /// Longest value of an optional field, in bytes.
    public static let maximumOptionalFieldBytes = 1024

    /// Tags of the optional fields this version knows.
    public enum OptionalField {
        /// The dispatch id (``EnvelopeHeader/dispatchID``).
        public static let dispatchID: UInt8 = 1
        /// The flow that delivered a `flowEvent` (``EnvelopeHeader/flowID``): 8 bytes, big-endian.
        public static let flowID: UInt8 = 4
        /// The trace context (``EnvelopeHeader/trace``): trace id (16 bytes), parent span id (8),
        /// flags (1). Since version 3.
        public static let trace: UInt8 = 2
        /// The payload's content type (``EnvelopeHeader/contentType``): ASCII, 1–255 bytes.
        public static let contentType: UInt8 = 3
        /// The motherboards an action went up through (``EnvelopeHeader/linkTrail``): 1 to
        /// ``HeaderCodec/maximumLinkHops`` link ids, 8 bytes each, big-endian.
        public static let linkTrail: UInt8 = 5
        /// The principal a gateway acts for (``EnvelopeHeader/onBehalfOf``): printable ASCII, 1–255 bytes.
        public static let onBehalfOf: UInt8 = 6
        /// Which delivery of an activation this is (``EnvelopeHeader/deliveryCount``): u32, 4 bytes, big-endian, at least 1.
        public static let deliveryCount: UInt8 = 7
        /// The trace context's W3C `tracestate` (``EnvelopeHeader/traceState``): printable ASCII, 1–512 bytes; only with field 2.
        public static let traceState: UInt8 = 8

        /// Whether this version reads `tag` into a field of its own (else it keeps it as unknown).
        static func isKnown(_ tag: UInt8) -> Bool { (1...8).contains(tag) }
    }

    @usableFromInline static let magic: (UInt8, UInt8) = (0x42, 0x42)

    /// Encodes a header; throws `badArgument` when a field is over its limit (nothing is cut).
    /// `version` is the version byte written: the current one, or 3 for a version-3 peer.
    public static func encode(_ header: EnvelopeHeader, version: UInt8 = EnvelopeHeader.currentVersion) throws(BusError) -> [UInt8] {
        let size = try validatedSize(header)
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            count = write(header, version: version, into: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    /// The size of a header's encoding: what ``encode(_:into:)`` needs.
    @inlinable
    public static func encodedSize(_ header: EnvelopeHeader) -> Int {
        fixedSize + 8 + header.source.utf8.count + header.target.utf8.count + header.scope.name.utf8.count + header.typeName.utf8.count
            + (header.dispatchID.map { 3 + $0.utf8.count } ?? 0) + (header.flowID == nil ? 0 : 11)
            + (header.trace == nil ? 0 : 3 + TraceContext.encodedSize) + (header.contentType.map { 3 + $0.utf8.count } ?? 0)
            + (header.linkTrail.map { 3 + 8 * $0.count } ?? 0) + (header.onBehalfOf.map { 3 + $0.utf8.count } ?? 0)
            + (header.deliveryCount == nil ? 0 : 7) + (header.traceState.map { 3 + $0.utf8.count } ?? 0) + header.unknownFields.count
    }

    /// Checks every field against its limit; returns the encoded size. A sender calls it before
    /// queueing a message, so that the caller gets the refusal, not a timeout.
    public static func validatedSize(_ header: EnvelopeHeader) throws(BusError) -> Int {
        try checkLength(header.source, "source")
        try checkLength(header.target, "target")
        try checkLength(header.scope.name, "scope")
        try checkLength(header.typeName, "type name")
        if let id = header.dispatchID { try checkDispatchID(id) }
        if let type = header.contentType { try checkContentType(type) }
        if let principal = header.onBehalfOf, !isValidPrincipal(principal.utf8) {
            throw BusError(.badArgument, "on behalf of: \(principalRule)")
        }
        if header.deliveryCount == 0 { throw BusError(.badArgument, "a delivery count starts at 1") }
        if let state = header.traceState {
            guard TraceContext.isValidState(state.utf8) else { throw BusError(.badArgument, "trace state: \(traceStateRule)") }
            guard header.trace != nil else { throw BusError(.badArgument, "a trace state (field 8) goes with a trace context (field 2)") }
        }
        if let trail = header.linkTrail, !(1...maximumLinkHops).contains(trail.count) {
            throw BusError(.badArgument, "a link trail has 1 to \(maximumLinkHops) motherboards, not \(trail.count)")
        }
        if !header.unknownFields.isEmpty {
            let refusal = header.unknownFields.withUnsafeBytes { bytes -> BusError? in
                var offset = 0
                do {
                    while offset < bytes.count {
                        let (tag, _) = try HeaderLayout.optionalField(bytes, &offset)
                        if OptionalField.isKnown(tag) {
                            return BusError(.badArgument, "optional field \(tag) is a known field: set it by name, not among the unknown ones")
                        }
                    }
                    return nil
                } catch {
                    return BusError(.badArgument, "unknown optional fields are not well formed: \(error)")
                }
            }
            if let refusal { throw refusal }
        }
        let size = encodedSize(header)
        guard size <= maximumHeaderBytes else {
            throw BusError(.badArgument, "header of \(size) bytes is over the limit of \(maximumHeaderBytes) bytes")
        }
        return size
    }

    /// Refuses (`badArgument`) a dispatch id that is empty (it would make no retry safe) or
    /// longer than ``maximumDispatchIDBytes``.
    public static func checkDispatchID(_ id: String) throws(BusError) {
        let count = id.utf8.count
        guard count >= 1 else {
            throw BusError(.badArgument, "an empty dispatch id cannot make a retry safe; give a non-empty id or none")
        }
        guard count <= maximumDispatchIDBytes else {
            throw BusError(.badArgument, "dispatch id of \(count) bytes is over the limit of \(maximumDispatchIDBytes) bytes")
        }
    }

    /// Refuses (`badArgument`) a content type that is empty, longer than
    /// ``maximumContentTypeBytes`` or not printable ASCII (a media type is).
    public static func checkContentType(_ type: String) throws(BusError) {
        guard isValidContentType(type) else { throw BusError(.badArgument, contentTypeRule) }
    }

    /// The content type's rule, for a sender's value and a received field alike.
    static func isValidContentType(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard (1...maximumContentTypeBytes).contains(bytes.count) else { return false }
        for byte in bytes where byte < 0x20 || byte > 0x7E { return false }
        return true
    }

    /// The same for a sender's value; the content type BoardKit labels CBOR with passes at once.
    static func isValidContentType(_ type: String) -> Bool {
        if type == PayloadFormat.cborContentType { return true }
        var type = type
        return type.withUTF8 { isValidContentType(UnsafeRawBufferPointer($0)) }
    }

    static let contentTypeRule = "content type must be 1 to \(maximumContentTypeBytes) bytes of printable ASCII"

    /// A principal's name, as field 6 carries it: 1 to 255 bytes of printable ASCII, no space.
    package static func isValidPrincipal<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        (1...255).contains(bytes.count) && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    static let principalRule = "a principal is 1 to 255 bytes of printable ASCII without spaces"

    static let traceStateRule = "a trace state is 1 to \(TraceContext.maximumStateBytes) bytes of printable ASCII"

    private static func checkLength(_ text: String, _ field: String) throws(BusError) {
        let count = text.utf8.count
        guard count <= maximumFieldBytes else {
            throw BusError(.badArgument, "\(field) of \(count) bytes is over the limit of \(maximumFieldBytes) bytes")
        }
    }

    /// Encodes a header into `buffer`, which holds at least ``encodedSize(_:)`` bytes, without
    /// allocating: the transport encodes every message straight into the buffer it sends from.
    /// Throws `badArgument` when a field is over its limit. Returns the number of bytes written.
    public static func encode(_ header: EnvelopeHeader, into buffer: UnsafeMutableRawBufferPointer) throws(BusError) -> Int {
        let size = try validatedSize(header)
        precondition(buffer.count >= size, "header buffer too small")
        return write(header, into: buffer)
    }

    /// Writes a header already checked by ``validatedSize(_:)`` into a buffer of at least that
    /// size: for a sender that checked it once and must not pay for the check twice.
    /// `version` is the framing's (the header's own ``EnvelopeHeader/version`` is not written).
    package static func write(
        _ header: EnvelopeHeader, version: UInt8 = EnvelopeHeader.currentVersion, into buffer: UnsafeMutableRawBufferPointer
    ) -> Int {
        var writer = Writer(buffer: buffer)
        writer.write(magic.0)
        writer.write(magic.1)
        writer.write(version)
        writer.write(header.kind.rawValue)
        writer.writeBigEndian(header.flags.rawValue)
        writer.writeBigEndian(header.correlationID)
        writer.writeBigEndian(header.timeoutMilliseconds)
        writer.write(header.source)
        writer.write(header.target)
        writer.write(header.scope.name)
        writer.write(header.typeName)
        if let id = header.dispatchID {
            writer.write(OptionalField.dispatchID)
            writer.write(id)
        }
        if let flow = header.flowID {
            writer.write(OptionalField.flowID)
            writer.writeBigEndian(UInt16(8))
            writer.writeBigEndian(flow.rawValue)
        }
        if let trace = header.trace {
            writer.write(OptionalField.trace)
            writer.writeBigEndian(UInt16(TraceContext.encodedSize))
            writer.writeBigEndian(trace.traceIDHigh)
            writer.writeBigEndian(trace.traceIDLow)
            writer.writeBigEndian(trace.spanID)
            writer.write(trace.flags)
        }
        if let type = header.contentType {
            writer.write(OptionalField.contentType)
            writer.write(type)
        }
        if let trail = header.linkTrail {
            writer.write(OptionalField.linkTrail)
            writer.writeBigEndian(UInt16(8 * trail.count))
            for link in trail { writer.writeBigEndian(link) }
        }
        if let principal = header.onBehalfOf {
            writer.write(OptionalField.onBehalfOf)
            writer.write(principal)
        }
        if let count = header.deliveryCount {
            writer.write(OptionalField.deliveryCount)
            writer.writeBigEndian(UInt16(4))
            writer.writeBigEndian(count)
        }
        if let state = header.traceState {
            writer.write(OptionalField.traceState)
            writer.write(state)
        }
        // Not `for byte in`: a `Data`'s iterator costs more to make than most headers to write.
        if !header.unknownFields.isEmpty { header.unknownFields.withUnsafeBytes { writer.write($0) } }
        return writer.offset
    }

    /// Decodes a header (a version-3 header frame, or the header part of a version-4 frame);
    /// throws ``BusError`` with `malformed` or `tooLarge`.
    public static func decode(_ data: Data) throws -> EnvelopeHeader {
        try data.withUnsafeBytes { try decode(UnsafeRawBufferPointer($0)) }
    }

    /// Decodes a header from raw bytes; throws ``BusError`` with `malformed` or `tooLarge`.
    public static func decode(_ buffer: UnsafeRawBufferPointer) throws -> EnvelopeHeader {
        var names = RecentNames()
        return try decode(buffer, recent: &names)
    }

    /// The names of the last header a receiver decoded. A connection's messages name the same
    /// boards, scope and types again and again: a name whose bytes are the last one's is taken
    /// as it is (one comparison), not decoded and checked again.
    package struct RecentNames: Sendable {
        var source = ""
        var target = ""
        var scope = ""
        var typeName = ""
        /// The four names as the last header had them on the wire, lengths included: a header
        /// whose names are these bytes names the same four (one comparison for all of them).
        var wire: [UInt8] = []

        package init() {}
    }

    /// ``decode(_:)``, taking each name that repeats the last header's from `recent`, and
    /// leaving this header's names there.
    package static func decode(_ buffer: UnsafeRawBufferPointer, recent: inout RecentNames) throws -> EnvelopeHeader {
        let layout = try HeaderLayout(buffer)
        let names = UnsafeRawBufferPointer(rebasing: buffer[fixedSize..<layout.typeName.upperBound])
        if !recent.wire.withUnsafeBytes({ $0.hasSameBytes(as: names) }) {
            // All four or none: a name kept must go with the bytes kept.
            let source = try name(buffer, layout.source, last: recent.source, field: "source")
            let target = try name(buffer, layout.target, last: recent.target, field: "target")
            let scope = try name(buffer, layout.scope, last: recent.scope, field: "scope")
            recent.typeName = try name(buffer, layout.typeName, last: recent.typeName, field: "type name")
            (recent.source, recent.target, recent.scope) = (source, target, scope)
            recent.wire.removeAll(keepingCapacity: true)
            recent.wire.append(contentsOf: names)
        }
        var header = EnvelopeHeader(
            version: EnvelopeHeader.currentVersion, kind: layout.kind, flags: layout.flags, correlationID: layout.correlationID,
            timeoutMilliseconds: layout.timeoutMilliseconds, source: recent.source, target: recent.target, scope: Scope(recent.scope),
            typeName: recent.typeName)
        if !layout.optionalFields.isEmpty {
            if let id = layout.dispatchID { header.dispatchID = try string(buffer, id, field: "dispatch id") }
            if let flow = layout.flowID { header.flowID = FlowID(HeaderLayout.bigEndian(buffer, at: flow.lowerBound, as: UInt64.self)) }
            if let trace = layout.trace { header.trace = TraceContext(bytes: UnsafeRawBufferPointer(rebasing: buffer[trace])) }
            if let state = layout.traceState { header.traceState = try string(buffer, state, field: "trace state") }
            if let type = layout.contentType { header.contentType = contentType(buffer, type) }
            if let trail = layout.linkTrail {
                header.linkTrail = stride(from: trail.lowerBound, to: trail.upperBound, by: 8).map {
                    HeaderLayout.bigEndian(buffer, at: $0, as: UInt64.self)
                }
            }
            if let principal = layout.onBehalfOf { header.onBehalfOf = try string(buffer, principal, field: "on behalf of") }
            if let count = layout.deliveryCount { header.deliveryCount = HeaderLayout.bigEndian(buffer, at: count.lowerBound, as: UInt32.self) }
            header.unknownFields = layout.unknownFields(in: buffer)
        }
        return header
    }

    /// A content type (checked to be printable ASCII by the layout); the one every CBOR message
    /// carries is the shared constant, so that reading it allocates nothing.
    private static func contentType(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>) -> String {
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[range])
        if PayloadFormat.cborContentType.hasUTF8(bytes) { return PayloadFormat.cborContentType }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A name: `last` when its bytes are these (valid UTF-8, then, and the same text), else
    /// decoded and checked.
    private static func name(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>, last: String, field: String) throws -> String {
        if last.hasUTF8(UnsafeRawBufferPointer(rebasing: buffer[range])) { return last }
        return try string(buffer, range, field: field)
    }

    private static func string(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>, field: String) throws -> String {
        guard let text = String(validUTF8: UnsafeRawBufferPointer(rebasing: buffer[range])) else {
            throw BusError(.malformed, "\(field) field is not valid UTF-8")
        }
        return text
    }

    /// A cursor that writes into a buffer already checked to be large enough.
    private struct Writer {
        let buffer: UnsafeMutableRawBufferPointer
        var offset = 0

        mutating func write(_ byte: UInt8) {
            buffer[offset] = byte
            offset += 1
        }

        mutating func write(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
            (buffer.baseAddress! + offset).copyMemory(from: source, byteCount: bytes.count)
            offset += bytes.count
        }

        mutating func writeBigEndian<T: FixedWidthInteger>(_ value: T) {
            buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: T.self)
            offset += MemoryLayout<T>.size
        }

        mutating func write(_ text: String) {
            let length = text.utf8.count
            writeBigEndian(UInt16(length))
            // Most names of an answer are empty (no target, root scope, no type name).
            guard length > 0 else { return }
            let copied: Void? = text.utf8.withContiguousStorageIfAvailable { utf8 in
                if let source = utf8.baseAddress {
                    (buffer.baseAddress! + offset).copyMemory(from: source, byteCount: length)
                }
            }
            if copied == nil {
                // A bridged or non-contiguous string: copy it out first.
                for (index, byte) in text.utf8.enumerated() { buffer[offset + index] = byte }
            }
            offset += length
        }
    }
}
