import CZeroMQ

/// Gives freed memory back to the system after large releases.
///
/// glibc keeps freed memory in its heap for reuse; after a burst (a peer's queue of large
/// answers freed when it left, 2 000 boards gone) a long-running broker would keep hundreds of MB
/// it no longer uses. Asked about every tick, this trims the heap when more than `threshold`
/// bytes lie free in it: a few microseconds to look, and nothing done in the steady state.
package struct HeapTrim: Sendable {
    package let threshold: Int
    /// How many times the heap was trimmed.
    package private(set) var trims = 0

    package init(threshold: Int = 16 << 20) {
        self.threshold = threshold
    }

    /// Bytes the heap holds free.
    package static var freeBytes: Int { Int(boardbus_heap_free_bytes()) }

    /// Trims the heap when more than the threshold lies free in it.
    package mutating func trimIfWorthwhile() {
        guard Self.freeBytes > threshold else { return }
        _ = boardbus_trim_heap()
        trims += 1
    }
}
