/// Checks `condition` until it holds or `timeout` passes; returns whether it held. For state that
/// no event announces (another process's files, a count kept by a server): a test waits on it this
/// way, never with a fixed sleep, and the wait ends as soon as the condition holds.
public func eventually(
    timeout: Duration = .seconds(10), checkingEvery interval: Duration = .milliseconds(25), _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}
