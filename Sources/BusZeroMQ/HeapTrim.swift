import CBoardBusLinux
import CBoardBusZeroMQ
import Glibc

/// Gives freed memory back to the system after large releases.
///
/// glibc keeps freed memory in its heap for reuse; after a burst (a peer's queue of large
/// answers freed when it left, 2 000 boards gone) a long-running broker would keep hundreds of MB
/// it no longer uses. Asked about every tick, this trims the heap when more than `threshold`
/// bytes lie free in it, looking at most once a second, and doing nothing in the steady state.
package struct HeapTrim: Sendable {
    package let threshold: Int
    /// How many times the heap was trimmed.
    package private(set) var trims = 0

    package init(threshold: Int = 16 << 20) {
        self.threshold = threshold
    }

    /// Bytes the heap holds free.
    package static var freeBytes: Int { Int(boardbus_heap_free_bytes()) }

    /// When the heap was last looked at: at most once a second, since looking walks glibc's free
    /// lists (hundreds of microseconds in a broker that held 2 000 boards).
    private var lastLook: ContinuousClock.Instant?

    /// Trims the heap when more than the threshold lies free in it; looks at most once a second.
    package mutating func trimIfWorthwhile(now: ContinuousClock.Instant = .now) {
        if let lastLook, lastLook.duration(to: now) < .seconds(1) { return }
        lastLook = now
        guard Self.freeBytes > threshold else { return }
        _ = boardbus_trim_heap()
        trims += 1
    }
}
