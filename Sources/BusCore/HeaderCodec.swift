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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fixedSize + 8 + header.source.utf8.count + header.target.utf8.count
            + header.scope.utf8.count + header.typeName.utf8.count)
        bytes.append(magic.0)
        bytes.append(magic.1)
        bytes.append(header.version)
        bytes.append(header.kind.rawValue)
        appendBigEndian(header.flags.rawValue, to: &bytes)
        appendBigEndian(header.correlationID, to: &bytes)
        appendBigEndian(header.timeoutMilliseconds, to: &bytes)
        appendString(header.source, to: &bytes)
        appendString(header.target, to: &bytes)
        appendString(header.scope, to: &bytes)
        appendString(header.typeName, to: &bytes)
        return bytes
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

    @inline(__always)
    private static func appendBigEndian<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    private static func appendString(_ text: String, to bytes: inout [UInt8]) {
        var utf8 = Array(text.utf8)
        if utf8.count > maximumFieldBytes { utf8.removeLast(utf8.count - maximumFieldBytes) }
        appendBigEndian(UInt16(utf8.count), to: &bytes)
        bytes.append(contentsOf: utf8)
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
            let slice = UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + length)])
            offset += length
            guard let text = String(validating: slice.bindMemory(to: UInt8.self), as: UTF8.self) else {
                throw BusError(.malformed, "\(field) field is not valid UTF-8")
            }
            return text
        }
    }
}
