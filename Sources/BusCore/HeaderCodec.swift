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
        guard buffer.count <= maximumHeaderBytes else {
            throw BusError(.tooLarge, "header of \(buffer.count) bytes is over the limit of \(maximumHeaderBytes)")
        }
        guard buffer.count >= fixedSize else {
            throw BusError(.malformed, "header truncated: \(buffer.count) bytes, at least \(fixedSize) needed")
        }
        guard buffer[0] == magic.0, buffer[1] == magic.1 else {
            throw BusError(.malformed, "header does not start with the BoardBus magic 'BB'")
        }
        let version = buffer[2]
        guard version == EnvelopeHeader.currentVersion else {
            throw BusError(.malformed, "unsupported protocol version \(version); this peer speaks \(EnvelopeHeader.currentVersion)")
        }
        guard let kind = MessageKind(rawValue: buffer[3]) else {
            throw BusError(.malformed, "unknown message kind \(buffer[3])")
        }
        var reader = Reader(buffer: buffer, offset: 4)
        let flags = MessageFlags(rawValue: reader.readBigEndian(UInt16.self))
        let correlationID = reader.readBigEndian(UInt64.self)
        let timeout = reader.readBigEndian(UInt32.self)
        let source = try reader.readString(field: "source")
        let target = try reader.readString(field: "target")
        let scope = try reader.readString(field: "scope")
        let typeName = try reader.readString(field: "type name")
        guard reader.offset == buffer.count else {
            throw BusError(.malformed, "header has \(buffer.count - reader.offset) trailing bytes")
        }
        return EnvelopeHeader(
            version: version, kind: kind, flags: flags, correlationID: correlationID,
            timeoutMilliseconds: timeout, source: source, target: target, scope: scope, typeName: typeName
        )
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

    /// A bounds-checked cursor over the header bytes. The fixed part is checked once up front.
    private struct Reader {
        let buffer: UnsafeRawBufferPointer
        var offset: Int

        mutating func readBigEndian<T: FixedWidthInteger>(_: T.Type) -> T {
            let value = buffer.loadUnaligned(fromByteOffset: offset, as: T.self)
            offset += MemoryLayout<T>.size
            return T(bigEndian: value)
        }

        mutating func readString(field: String) throws -> String {
            guard buffer.count - offset >= 2 else {
                throw BusError(.malformed, "header truncated before the \(field) length")
            }
            let length = Int(readBigEndian(UInt16.self))
            guard length <= maximumFieldBytes else {
                throw BusError(.malformed, "\(field) field of \(length) bytes is over the limit of \(maximumFieldBytes)")
            }
            guard buffer.count - offset >= length else {
                throw BusError(.malformed, "header truncated inside the \(field) field")
            }
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + length)]).assumingMemoryBound(to: UInt8.self)
            offset += length
            // `String(decoding:)` is the fast path (no generic validation); it replaces invalid
            // sequences, so the text is valid UTF-8 exactly when it re-encodes to the same bytes.
            let text = String(decoding: bytes, as: UTF8.self)
            guard bytes.allSatisfy({ $0 < 0x80 }) || text.utf8.elementsEqual(bytes) else {
                throw BusError(.malformed, "\(field) field is not valid UTF-8")
            }
            return text
        }
    }
}
