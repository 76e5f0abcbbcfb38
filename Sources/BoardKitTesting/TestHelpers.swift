import Foundation

/// Runs `body` with an `ipc://` endpoint named `name` in a temporary directory of its own,
/// removed afterwards: for tests that bind raw sockets without a fleet.
public func withTemporaryEndpoint<T>(_ name: String, _ body: (String) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-\(name)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    return try await body("ipc://\(directory)/\(name).sock")
}

/// Runs blocking work (raw socket loops, `poll`) on a new thread, never on the concurrency pool:
/// on two cores the pool has two threads, and a test that blocks one slows every other test in
/// the process.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

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

/// Runs `body` with `resource`, then `stop`s it, whether `body` returns or throws: how the test
/// fleets' `with` always clean up.
func using<Resource, T>(_ resource: Resource, stop: (Resource) async -> Void, _ body: (Resource) async throws -> T) async throws -> T {
    do {
        let result = try await body(resource)
        await stop(resource)
        return result
    } catch {
        await stop(resource)
        throw error
    }
}

/// What `operation` returns, or nil when `timeout` passes first (the operation is then cancelled).
func value<T: Sendable>(within timeout: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await operation() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
