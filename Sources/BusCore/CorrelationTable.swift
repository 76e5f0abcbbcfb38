/// A table keyed by correlation ids, for ids handed out in increasing order (1, 2, 3…) and
/// mostly answered about in that order: the requests a client or the broker waits on.
///
/// An id lives in the slot its low bits name in a ring, so a look-up is an index and a compare,
/// with no hashing and nothing moved on removal (a dictionary removal shifts the entries after it
/// in their cluster). When an id's slot is held by a live id, the ring doubles if it is at least
/// half full (doubling keeps live ids apart: ids apart in the small ring are apart in the big
/// one); otherwise the occupant — a request answered long after those after it — moves to an
/// overflow dictionary, where it is found the slower way. Any ids are correct, in any order;
/// increasing ones are fast. The ring never shrinks and stops at ``maximumSlots``: after a burst
/// of thousands in flight it keeps that size (for the broker's requests about 600 KiB, scanned
/// on each expiry pass).
public struct CorrelationTable<Value> {
    /// The most slots the ring grows to; more ids in flight at once go to the overflow.
    @inlinable
    public static var maximumSlots: Int { 4096 }

    @usableFromInline var ids: [UInt64]
    @usableFromInline var values: [Value?]
    @usableFromInline var mask: Int
    /// How many of the ring's slots hold a value.
    @usableFromInline var inRing = 0
    @usableFromInline var overflow: [UInt64: Value] = [:]

    @inlinable
    public init(slots: Int = 16) {
        let size = CorrelationTable.powerOfTwo(atLeast: max(1, min(Self.maximumSlots, slots)))
        ids = Array(repeating: 0, count: size)
        values = Array(repeating: nil, count: size)
        mask = size - 1
    }

    /// How many ids have a value.
    @inlinable
    public var count: Int { inRing + overflow.count }
    @inlinable
    public var isEmpty: Bool { count == 0 }
    /// The ring's size now (for tests and memory accounting).
    public var slotCount: Int { values.count }

    @inlinable @inline(__always) func slot(_ id: UInt64) -> Int { Int(truncatingIfNeeded: id) & mask }

    @inlinable
    public subscript(id: UInt64) -> Value? {
        get {
            let index = slot(id)
            if ids[index] == id, let value = values[index] { return value }
            return overflow.isEmpty ? nil : overflow[id]
        }
        set {
            if let newValue { insert(newValue, for: id) } else { _ = removeValue(forKey: id) }
        }
    }

    /// Sets the value of `id` (replacing one it has).
    @inlinable
    public mutating func insert(_ value: consuming Value, for id: UInt64) {
        // An id that had to make room comes back to the ring.
        if !overflow.isEmpty { overflow.removeValue(forKey: id) }
        var index = slot(id)
        if values[index] == nil {
            inRing += 1
        } else if ids[index] != id {
            while inRing * 2 >= values.count, values.count < Self.maximumSlots {
                grow()
                index = slot(id)
                if values[index] == nil { break }
            }
            if values[index] == nil {
                inRing += 1
            } else {
                // The occupant is a laggard (or the ring is at its limit): it moves out of the way.
                overflow[ids[index]] = values[index].take()
            }
        }
        ids[index] = id
        values[index] = consume value
    }

    /// Removes and returns the value of `id`, if it has one.
    @inlinable @discardableResult
    public mutating func removeValue(forKey id: UInt64) -> Value? {
        removeValue(forKey: id) { _ in true }
    }

    /// Removes and returns the value of `id` if `accept` takes it; otherwise leaves it where it
    /// is (a reply from the wrong peer must not move a request around).
    @inlinable
    public mutating func removeValue(forKey id: UInt64, if accept: (Value) -> Bool) -> Value? {
        // Taken out and, when refused, put back in the same place: moved, never copied.
        let index = slot(id)
        if ids[index] == id, let value = values[index].take() {
            guard accept(value) else {
                values[index] = consume value
                return nil
            }
            inRing -= 1
            return value
        }
        guard !overflow.isEmpty, let value = overflow.removeValue(forKey: id) else { return nil }
        guard accept(value) else {
            overflow[id] = consume value
            return nil
        }
        return value
    }

    /// Removes every value `matches` picks; returns them with their ids, oldest (smallest) id first.
    @inlinable
    public mutating func removeAll(where matches: (Value) -> Bool) -> [(id: UInt64, value: Value)] {
        var taken: [(id: UInt64, value: Value)] = []
        if inRing > 0 {
            for index in values.indices {
                guard let value = values[index], matches(value) else { continue }
                taken.append((ids[index], value))
                values[index] = nil
                inRing -= 1
            }
        }
        if !overflow.isEmpty {
            // Picked first, then removed: removing while iterating would copy the dictionary.
            let picked = overflow.filter { matches($0.value) }
            for (id, value) in picked {
                taken.append((id, value))
                overflow[id] = nil
            }
        }
        return taken.sorted { $0.id < $1.id }
    }

    /// Removes every value; returns them, oldest id first.
    @inlinable
    public mutating func removeAll() -> [Value] {
        removeAll { _ in true }.map(\.value)
    }

    /// Every id with a value, smallest first.
    @inlinable
    public var keys: [UInt64] {
        var all = values.indices.compactMap { values[$0] == nil ? nil : ids[$0] }
        all.append(contentsOf: overflow.keys)
        return all.sorted()
    }

    @inlinable
    static func powerOfTwo(atLeast count: Int) -> Int {
        count <= 1 ? 1 : 1 << (Int.bitWidth - (count - 1).leadingZeroBitCount)
    }

    @inlinable
    mutating func grow() {
        let size = values.count * 2
        var newIDs = Array(repeating: UInt64(0), count: size)
        var newValues = [Value?](repeating: nil, count: size)
        let newMask = size - 1
        for index in values.indices {
            guard let value = values[index].take() else { continue }
            let id = ids[index]
            let target = Int(truncatingIfNeeded: id) & newMask
            newIDs[target] = id
            newValues[target] = value
        }
        ids = newIDs
        values = newValues
        mask = newMask
    }
}

extension CorrelationTable: Sendable where Value: Sendable {}
