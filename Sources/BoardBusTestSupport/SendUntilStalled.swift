import Glibc

/// Calls `send` until it has not been taken for `patience` in a row, at most for `limit`;
/// whether it stalled. For a socket whose peer stopped reading: once the peer's queue is at its
/// high-water mark and the kernel's buffers are full, the sender's own queue stays full.
public func sendUntilStalled(
    patience: Duration = .milliseconds(500), limit: Duration = .seconds(30), _ send: () throws -> Bool
) rethrows -> Bool {
    let clock = ContinuousClock()
    let end = clock.now.advanced(by: limit)
    var refusedSince: ContinuousClock.Instant?
    while clock.now < end {
        if try send() {
            refusedSince = nil
            continue
        }
        let since = refusedSince ?? clock.now
        if since.duration(to: clock.now) >= patience { return true }
        refusedSince = since
        usleep(10_000)
    }
    return false
}
