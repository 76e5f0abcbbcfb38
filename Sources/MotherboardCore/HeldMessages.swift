import BusCore
import DequeModule

/// Messages for the parent held while the uplink's own connection to it is still being made (or
/// made again): the parent can already be heard on the board connections, which connect on their
/// own, and a request sent up meanwhile would be refused by the socket (it sends only when
/// connected). Held messages leave in their order as soon as the connection takes them; one that
/// has not left by its deadline is given back, to be answered `unreachable`. Bounded, like the
/// socket's own queue.
struct HeldMessages {
    struct Held {
        var envelope: Envelope
        var deadline: ContinuousClock.Instant
    }

    let capacity: Int
    private var queue: Deque<Held> = []

    init(capacity: Int) {
        self.capacity = capacity
    }

    var isEmpty: Bool { queue.isEmpty }
    var count: Int { queue.count }

    /// Holds `envelope` until `deadline`; false when the queue is full.
    mutating func hold(_ envelope: Envelope, until deadline: ContinuousClock.Instant) -> Bool {
        guard queue.count < capacity else { return false }
        queue.append(Held(envelope: envelope, deadline: deadline))
        return true
    }

    /// Sends the held messages in order while `send` takes them; returns those whose deadline
    /// passed (`now` or earlier) before they could leave, oldest first.
    mutating func flush(now: ContinuousClock.Instant, send: (Envelope) -> Bool) -> [Held] {
        var expired: [Held] = []
        while let first = queue.first {
            if first.deadline <= now {
                expired.append(queue.removeFirst())
            } else if send(first.envelope) {
                queue.removeFirst()
            } else {
                break
            }
        }
        // Later ones may have shorter deadlines than the one that cannot leave yet.
        if !queue.isEmpty, queue.contains(where: { $0.deadline <= now }) {
            expired.append(contentsOf: queue.filter { $0.deadline <= now })
            queue.removeAll { $0.deadline <= now }
        }
        return expired
    }

    /// Takes every held message (the link went down).
    mutating func removeAll() -> [Held] {
        defer { queue.removeAll() }
        return Array(queue)
    }
}
