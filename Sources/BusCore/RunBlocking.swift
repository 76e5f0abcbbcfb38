import Dispatch
import Synchronization

/// Runs `body` to its end from a synchronous `main` and returns what it returned: the main
/// thread waits while `body` runs on the concurrency pool.
///
/// BoardBus's executables use it instead of an async `main`, whose main thread ends in
/// libdispatch's `dispatch_main` (a `sigsuspend` on a mask in read-only memory, which valgrind
/// 3.19 — Debian 12's — cannot run: `scripts/bench --counts` measures these executables under it).
/// Nothing in them runs on the main actor.
public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let result = await Result(catching: body)
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return try outcome.withLock { $0! }.get()
}

extension Result where Failure == any Error {
    fileprivate init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
