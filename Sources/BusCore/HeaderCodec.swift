import Foundation

/// The compact binary encoding of ``EnvelopeHeader`` (docs/PROTOCOL.md, "Header frame").
///
/// Layout, all integers big-endian:
/// ```
/// offset size field
///  0     2    magic "BB" (0x42 0x42)
///  2     1    version (1)
///  3     1    kind
///  4     2    flags
///  6     8    correlation id
/// 14     4    timeout in milliseconds (0 = none)
/// 18     -    source, target, scope, type name: each a u16 length then that many UTF-8 bytes
/// ```
/// A hand-written codec because the broker decodes a header on every hop; JSON would cost
/// several microseconds each time.
public enum HeaderCodec {
    /// Size of the fixed part before the strings.
    public static let fixedSize = 18
    /// Largest header accepted (four strings of at most 1 KiB each, plus the fixed part).
    public static let maximumHeaderBytes = 4096
    /// Longest string field, in UTF-8 bytes.
    public static let maximumFieldBytes = 1024

    static let magic: (UInt8, UInt8) = (0x42, 0x42)

    /// Encodes a header. Strings longer than ``maximumFieldBytes`` are a programming error on the
    /// sending side; they are cut to the limit rather than producing an undecodable frame.
    public static func encode(_ header: EnvelopeHeader) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: encodedSize(header)) { buffer, count in
            count = encode(header, into: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    /// The size of a header's encoding: what ``encode(_:into:)`` needs.
    @inlinable
    public static func encodedSize(_ header: EnvelopeHeader) -> Int {
        fixedSize + 8 + fieldSize(header.source) + fieldSize(header.target) + fieldSize(header.scope) + fieldSize(header.typeName)
    }

    @inlinable
    static func fieldSize(_ text: String) -> Int {
        min(text.utf8.count, maximumFieldBytes)
    }

    /// Encodes a header into `buffer`, which holds at least ``encodedSize(_:)`` bytes, without
    /// allocating: the transport encodes every message straight into the buffer it sends from.
    /// Returns the number of bytes written.
    public static func encode(_ header: EnvelopeHeader, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        precondition(buffer.count >= encodedSize(header), "header buffer too small")
        var writer = Writer(buffer: buffer)
        writer.write(magic.0)
        writer.write(magic.1)
        writer.write(header.version)
        writer.write(header.kind.rawValue)
        writer.writeBigEndian(header.flags.rawValue)
        writer.writeBigEndian(header.correlationID)
        writer.writeBigEndian(header.timeoutMilliseconds)
        writer.write(header.source)
        writer.write(header.target)
        writer.write(header.scope)
        writer.write(header.typeName)
        return writer.offset
    }

    /// Decodes a header frame; throws ``BusError`` with `malformed` or `tooLarge`.
    public static func decode(_ data: Data) throws -> EnvelopeHeader {
        try data.withUnsafeBytes { try decode(UnsafeRawBufferPointer($0)) }
    }

    /// Decodes a header from raw bytes; throws ``BusError`` with `malformed` or `tooLarge`.
    public static func decode(_ buffer: UnsafeRawBufferPointer) throws -> EnvelopeHeader {
        let layout = try HeaderLayout(buffer)
        return EnvelopeHeader(
            version: EnvelopeHeader.currentVersion, kind: layout.kind, flags: layout.flags, correlationID: layout.correlationID,
            timeoutMilliseconds: layout.timeoutMilliseconds,
            source: try string(buffer, layout.source, field: "source"), target: try string(buffer, layout.target, field: "target"),
            scope: try string(buffer, layout.scope, field: "scope"), typeName: try string(buffer, layout.typeName, field: "type name"))
    }

    private static func string(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>, field: String) throws -> String {
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[range]).assumingMemoryBound(to: UInt8.self)
        // `String(decoding:)` is the fast path (no generic validation); it replaces invalid
        // sequences, so the text is valid UTF-8 exactly when it re-encodes to the same bytes.
        let text = String(decoding: bytes, as: UTF8.self)
        guard bytes.allSatisfy({ $0 < 0x80 }) || text.utf8.elementsEqual(bytes) else {
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

        mutating func writeBigEndian<T: FixedWidthInteger>(_ value: T) {
            buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: T.self)
            offset += MemoryLayout<T>.size
        }

        mutating func write(_ text: String) {
            let length = fieldSize(text)
            writeBigEndian(UInt16(length))
            let copied: Void? = text.utf8.withContiguousStorageIfAvailable { utf8 in
                if let source = utf8.baseAddress {
                    (buffer.baseAddress! + offset).copyMemory(from: source, byteCount: length)
                }
            }
            if copied == nil {
                // A bridged or non-contiguous string: copy it out first.
                for (index, byte) in text.utf8.prefix(length).enumerated() { buffer[offset + index] = byte }
            }
            offset += length
        }
    }
}

/// Where the fields of an encoded header are, after the frame's structure has been checked (size,
/// magic, version, kind, field lengths, no trailing bytes): everything ``HeaderCodec/decode(_:)``
/// checks but the strings' UTF-8, which it leaves as byte ranges.
///
/// A router reads the fixed fields and the names in place and rewrites the correlation id in the
/// received frame (``setCorrelationID(_:in:)``), without building an ``EnvelopeHeader``.
public struct HeaderLayout: Sendable, Hashable {
    public let kind: MessageKind
    public let flags: MessageFlags
    public let correlationID: UInt64
    public let timeoutMilliseconds: UInt32
    /// Byte ranges of the four strings in the frame.
    public let source: Range<Int>
    public let target: Range<Int>
    public let scope: Range<Int>
    public let typeName: Range<Int>

    /// Offset of the correlation id in the frame.
    static let correlationOffset = 6

    /// Checks the frame's structure; throws ``BusError`` with `malformed` or `tooLarge`.
    public init(_ buffer: UnsafeRawBufferPointer) throws(BusError) {
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
        guard version == EnvelopeHeader.currentVersion else {
            throw BusError(.malformed, "unsupported protocol version \(version); this peer speaks \(EnvelopeHeader.currentVersion)")
        }
        guard let kind = MessageKind(rawValue: buffer[3]) else {
            throw BusError(.malformed, "unknown message kind \(buffer[3])")
        }
        self.kind = kind
        flags = MessageFlags(rawValue: Self.bigEndian(buffer, at: 4, as: UInt16.self))
        correlationID = Self.bigEndian(buffer, at: Self.correlationOffset, as: UInt64.self)
        timeoutMilliseconds = Self.bigEndian(buffer, at: 14, as: UInt32.self)
        var offset = HeaderCodec.fixedSize
        source = try Self.field(buffer, &offset, "source")
        target = try Self.field(buffer, &offset, "target")
        scope = try Self.field(buffer, &offset, "scope")
        typeName = try Self.field(buffer, &offset, "type name")
        guard offset == buffer.count else {
            throw BusError(.malformed, "header has \(buffer.count - offset) trailing bytes")
        }
    }

    /// Whether every string is ASCII (then it is valid UTF-8 without further checks).
    public func stringsAreASCII(in buffer: UnsafeRawBufferPointer) -> Bool {
        func ascii(_ range: Range<Int>) -> Bool { UnsafeRawBufferPointer(rebasing: buffer[range]).allSatisfy { $0 < 0x80 } }
        return ascii(source) && ascii(target) && ascii(scope) && ascii(typeName)
    }

    /// Writes a new correlation id into the frame the layout was read from.
    public static func setCorrelationID(_ id: UInt64, in buffer: UnsafeMutableRawBufferPointer) {
        buffer.storeBytes(of: id.bigEndian, toByteOffset: correlationOffset, as: UInt64.self)
    }

    private static func bigEndian<T: FixedWidthInteger>(_ buffer: UnsafeRawBufferPointer, at offset: Int, as: T.Type) -> T {
        T(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// A u16 length and that many bytes, starting at `offset`, which moves past them.
    private static func field(_ buffer: UnsafeRawBufferPointer, _ offset: inout Int, _ name: String) throws(BusError) -> Range<Int> {
        guard buffer.count - offset >= 2 else {
            throw BusError(.malformed, "header truncated before the \(name) length")
        }
        let length = Int(bigEndian(buffer, at: offset, as: UInt16.self))
        offset += 2
        guard length <= HeaderCodec.maximumFieldBytes else {
            throw BusError(.malformed, "\(name) field of \(length) bytes is over the limit of \(HeaderCodec.maximumFieldBytes)")
        }
        guard buffer.count - offset >= length else {
            throw BusError(.malformed, "header truncated inside the \(name) field")
        }
        defer { offset += length }
        return offset..<(offset + length)
    }
}
