import FoundationEssentials

/// A ZeroMQ routing id: how the broker's ROUTER socket names a connected peer.
///
/// The broker looks peers up, compares and copies their ids several times per message, so an id
/// of up to 16 bytes (libzmq generates 5; a peer may choose its own, of up to 255) is held in two
/// words: no `Data` to compare, hash or count references to. Longer ones are kept whole beside.
/// Every byte of an id goes into its hash (through the dictionary's seeded hasher), so peers that
/// choose their ids can make at most 17 hash alike (an id and the same bytes with zero bytes
/// added, whose counts differ). Inlinable: other modules (the broker's loop, its socket) use it
/// on every message.
@frozen
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    @usableFromInline let head: (UInt64, UInt64)
    @usableFromInline let count: Int
    /// The whole id, when it is longer than `head`.
    @usableFromInline let long: Long?

    @usableFromInline final class Long: Sendable {
        @usableFromInline let bytes: Data
        @usableFromInline init(_ bytes: Data) { self.bytes = bytes }
    }

    @inlinable
    public init(_ buffer: UnsafeRawBufferPointer) {
        var head: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &head) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer.prefix($0.count))) }
        self.head = head
        self.count = buffer.count
        self.long = buffer.count > MemoryLayout.size(ofValue: head) ? Long(Data(buffer)) : nil
    }

    @inlinable
    public init(_ bytes: Data) {
        self = bytes.withUnsafeBytes { PeerID($0) }
    }

    /// The id's bytes, without a copy.
    @inlinable
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        if let long { return try long.bytes.withUnsafeBytes(body) }
        return try Swift.withUnsafeBytes(of: head) { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
    }

    /// The id's bytes.
    public var bytes: Data { withUnsafeBytes { Data($0) } }

    @inlinable
    public static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        guard lhs.count == rhs.count, lhs.head == rhs.head else { return false }
        return lhs.long?.bytes == rhs.long?.bytes
    }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        if let long {
            long.bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        } else {
            // Not the count: the ids an id's hash is shared with are the same bytes with zero
            // bytes added, at most 16 of them.
            hasher.combine(head.0)
            hasher.combine(head.1)
        }
    }

    /// The id in hex (`00deadbeef`).
    public var description: String {
        withUnsafeBytes { bytes in
            bytes.map { byte in
                let digits = String(byte, radix: 16)
                return byte < 16 ? "0" + digits : digits
            }.joined()
        }
    }
}
