import Foundation
import Synchronization

/// Runs `body` with a new directory of its own under the temporary directory (`boardbus-<name>-…`),
/// removed afterwards whether `body` returns or throws.
public func withTemporaryDirectory<T>(_ name: String, _ body: (String) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-\(name)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    return try await body(directory)
}

/// Runs `body` with an `ipc://` endpoint named `name` in a temporary directory of its own,
/// removed afterwards: for tests that bind raw sockets without a fleet.
public func withTemporaryEndpoint<T>(_ name: String, _ body: (String) async throws -> T) async throws -> T {
    try await withTemporaryDirectory(name) { directory in try await body("ipc://\(directory)/\(name).sock") }
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
public func using<Resource, T>(_ resource: Resource, stop: (Resource) async -> Void, _ body: (Resource) async throws -> T) async throws -> T {
    do {
        let result = try await body(resource)
        await stop(resource)
        return result
    } catch {
        await stop(resource)
        throw error
    }
}

/// What `operation` returns, or nil when `timeout` passes first. Returns at the timeout even when
/// the operation ignores cancellation (waiting on a `Task`'s value does): the operation is then
/// cancelled and left to finish on its own.
func value<T: Sendable>(within timeout: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    let race = Race<T?>()
    return await withCheckedContinuation { continuation in
        race.start(continuation)
        let work = Task {
            race.finish(with: await operation())
        }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            if race.finish(with: nil) { work.cancel() }
        }
        race.onFinish { timer.cancel() }
    }
}

/// Resumes a continuation once, with whichever result comes first.
private final class Race<T: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<T, Never>?, done: Bool, cleanup: (@Sendable () -> Void)?)>((nil, false, nil))

    func start(_ continuation: CheckedContinuation<T, Never>) {
        state.withLock { $0.continuation = continuation }
    }

    /// Registers what to do once finished (at once, when already finished).
    func onFinish(_ cleanup: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.done { return true }
            state.cleanup = cleanup
            return false
        }
        if runNow { cleanup() }
    }

    /// Whether this result was the first.
    @discardableResult
    func finish(with value: T) -> Bool {
        let (continuation, cleanup) = state.withLock { state -> (CheckedContinuation<T, Never>?, (@Sendable () -> Void)?) in
            guard !state.done else { return (nil, nil) }
            state.done = true
            defer {
                state.continuation = nil
                state.cleanup = nil
            }
            return (state.continuation, state.cleanup)
        }
        guard let continuation else { return false }
        continuation.resume(returning: value)
        cleanup?()
        return true
    }
}
