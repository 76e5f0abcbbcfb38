/// The last value noted for a few peers, kept in front of a dictionary keyed by ``PeerID`` so
/// that a peer's next message finds it without hashing.
///
/// The broker looks the sender of every message up in its tables; a dictionary hashes every byte
/// of the id through the seeded hasher, about 300 instructions a look-up. Here a peer has one
/// slot, chosen by folding its id's bytes (libzmq's ids count up, so peers that connected one
/// after the other get different slots); another peer folding to the same slot takes it over,
/// and the dictionary answers for the peer it pushed out. Ids longer than 16 bytes are not kept.
/// Peers that choose their ids can only make themselves miss. The owner clears it whenever the
/// dictionary behind it changes. Public, as ``CorrelationTable`` is: an `@inlinable package`
/// generic was not specialised in the modules that use it.
@frozen
public struct PeerMemo<Value> {
    @usableFromInline
    struct Slot {
        @usableFromInline var head: (UInt64, UInt64)
        @usableFromInline var count: Int
        @usableFromInline var value: Value

        @inlinable
        init(head: (UInt64, UInt64), count: Int, value: Value) {
            (self.head, self.count, self.value) = (head, count, value)
        }
    }

    @usableFromInline static var slotCount: Int { 64 }
    @usableFromInline var slots: [Slot?]
    /// Whether any slot is taken (clearing an empty memo costs nothing).
    @usableFromInline var isEmpty = true

    @inlinable
    public init() {
        slots = Array(repeating: nil, count: Self.slotCount)
    }

    @inlinable
    static func slot(of peer: PeerID) -> Int {
        var folded = peer.head.0 ^ peer.head.1 ^ UInt64(truncatingIfNeeded: peer.count)
        folded ^= folded >> 32
        folded ^= folded >> 16
        folded ^= folded >> 8
        return Int(truncatingIfNeeded: folded) & (slotCount - 1)
    }

    /// The value noted for `peer`, or nil when it has none here (the dictionary knows).
    @inlinable
    public func value(for peer: PeerID) -> Value? {
        guard peer.long == nil, let slot = slots[Self.slot(of: peer)], slot.count == peer.count, slot.head == peer.head else {
            return nil
        }
        return slot.value
    }

    /// Notes `value` for `peer` (what the dictionary holds for it, or would answer).
    @inlinable
    public mutating func note(_ value: Value, for peer: PeerID) {
        guard peer.long == nil else { return }
        slots[Self.slot(of: peer)] = Slot(head: peer.head, count: peer.count, value: value)
        isEmpty = false
    }

    /// Forgets every value (the dictionary behind changed).
    @inlinable
    public mutating func removeAll() {
        guard !isEmpty else { return }
        for index in slots.indices { slots[index] = nil }
        isEmpty = true
    }
}
