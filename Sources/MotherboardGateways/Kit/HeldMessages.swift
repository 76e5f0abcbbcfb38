import BusCore
import DequeModule

/// Messages for the parent held while the uplink's own connection to it is still being made (or
/// made again), or while the parent pushes back: the parent can already be heard on the board
/// connections, which connect on their own, and a message sent up meanwhile would be refused by
/// the socket (it sends only when connected). Held messages leave in their order as soon as the
/// connection takes them; one that has not left by its deadline is given back, to be answered
/// `unreachable`. Bounded in messages and in bytes, like the socket's own queue.
struct HeldMessages {
    struct Held {
        var envelope: Envelope
        /// When it was held (to take the wait off the deadline it travels with).
        var since: ContinuousClock.Instant
        var deadline: ContinuousClock.Instant
        var bytes: Int { envelope.payload.count + HeaderCodec.fixedSize }
    }

    /// What became of a held message the flush offered to the connection.
    enum Outcome {
        /// It left the queue: sent, or failed and answered for.
        case left
        /// The connection does not take it now: it and the ones after it wait.
        case refused
    }

    let capacity: Int
    let byteCapacity: Int
    private var queue: Deque<Held> = []
    private var bytes = 0
    /// The earliest deadline in the queue (deadlines are not in queue order): no scan before it.
    private var earliestDeadline: ContinuousClock.Instant?

    init(capacity: Int, byteCapacity: Int) {
        self.capacity = capacity
        self.byteCapacity = byteCapacity
    }

    var isEmpty: Bool { queue.isEmpty }
    var count: Int { queue.count }

    /// Holds `envelope` until `deadline`; false when the queue is full.
    mutating func hold(_ envelope: Envelope, now: ContinuousClock.Instant, until deadline: ContinuousClock.Instant) -> Bool {
        let held = Held(envelope: envelope, since: now, deadline: deadline)
        guard queue.count < capacity, bytes + held.bytes <= byteCapacity else { return false }
        queue.append(held)
        bytes += held.bytes
        earliestDeadline = min(earliestDeadline ?? deadline, deadline)
        return true
    }

    /// Offers the held messages to `send` in order until it refuses one; returns those whose
    /// deadline passed (`now` or earlier) before they could leave, oldest first.
    mutating func flush(now: ContinuousClock.Instant, send: (Held) -> Outcome) -> [Held] {
        var expired: [Held] = []
        if let earliest = earliestDeadline, earliest <= now {
            // Later ones may have shorter deadlines than those before them.
            expired = queue.filter { $0.deadline <= now }
            queue.removeAll { $0.deadline <= now }
            recount()
        }
        while let first = queue.first, send(first) == .left {
            queue.removeFirst()
            bytes -= first.bytes
        }
        if queue.isEmpty { earliestDeadline = nil }
        return expired
    }

    /// Takes every held message (the link went down).
    mutating func removeAll() -> [Held] {
        defer {
            queue.removeAll()
            recount()
        }
        return Array(queue)
    }

    private mutating func recount() {
        bytes = queue.reduce(0) { $0 + $1.bytes }
        earliestDeadline = queue.map(\.deadline).min()
    }
}
