import HeapModule

/// What can wait in a ``DeadlineTable``.
package protocol Expiring {
    var deadline: ContinuousClock.Instant { get }
}

/// Requests in flight by correlation id, with a heap of their deadlines: a tick takes those past
/// theirs without looking at the others (one table kind for every gateway, instead of a
/// dictionary scanned whole on each tick). An entry removed, or given a later deadline, leaves
/// its old heap entry behind, skipped when it comes up.
package struct DeadlineTable<Value: Expiring>: Sequence {
    private var entries: [UInt64: Value] = [:]
    private var deadlines = Heap<Due>()
    /// How long past its deadline an entry is kept (an answer may still come, to be matched).
    private let grace: Duration

    private struct Due: Comparable {
        let at: ContinuousClock.Instant
        let id: UInt64
        static func < (left: Due, right: Due) -> Bool { left.at < right.at }
    }

    package init(keepingPastDeadline grace: Duration = .zero) { self.grace = grace }

    package var count: Int { entries.count }
    package var isEmpty: Bool { entries.isEmpty }
    package var keys: Dictionary<UInt64, Value>.Keys { entries.keys }

    package subscript(id: UInt64) -> Value? {
        get { entries[id] }
        set {
            let before = entries[id]?.deadline
            entries[id] = newValue
            if let newValue, newValue.deadline != before { deadlines.insert(Due(at: newValue.deadline, id: id)) }
            compactIfStale()
        }
    }

    @discardableResult
    package mutating func removeValue(forKey id: UInt64) -> Value? {
        defer { compactIfStale() }
        return entries.removeValue(forKey: id)
    }

    /// Heap entries, the stale ones included (for tests of the bound).
    var heapCount: Int { deadlines.count }

    /// Requests answered long before their deadlines (a peer may ask with one of weeks) leave their
    /// heap entries behind: past twice the live entries, the heap is made again from them alone,
    /// so it stays within a constant of the table however many come and go.
    private mutating func compactIfStale() {
        guard deadlines.count > 64, deadlines.count > 2 * entries.count else { return }
        deadlines = Heap(entries.map { Due(at: $0.value.deadline, id: $0.key) })
    }

    /// The entries whose deadline (and grace) is `now` or earlier, earliest first, removed.
    package mutating func takeExpired(now: ContinuousClock.Instant) -> [(id: UInt64, value: Value)] {
        var expired: [(id: UInt64, value: Value)] = []
        while let due = deadlines.min, due.at.advanced(by: grace) <= now {
            deadlines.removeMin()
            guard let value = entries[due.id], value.deadline == due.at else { continue }
            entries[due.id] = nil
            expired.append((due.id, value))
        }
        // Stale heap entries are dropped with their table once it is empty.
        if entries.isEmpty, !deadlines.isEmpty { deadlines = Heap() }
        return expired
    }

    package func makeIterator() -> Dictionary<UInt64, Value>.Iterator { entries.makeIterator() }
}
