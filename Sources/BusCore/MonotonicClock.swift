import Glibc

/// Nanoseconds on CLOCK_MONOTONIC: the clock of every loop's ticks and timers, and of the
/// benchmarks. Inlined: socket loops read it on every turn.
@inlinable
package func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
