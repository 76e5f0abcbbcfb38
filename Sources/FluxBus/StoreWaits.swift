import BoardKit
import BusCore
import Flux
import Foundation

/// Waiting for a store to reach a state, by watching it (no polling), within a deadline: for
/// tests, and for tools that wait on a store the way `busctl wait` waits on a board.
extension BusClient {
    /// Watches a store until its state satisfies `condition` and returns that state; throws
    /// `timeout` when it does not within `timeout` (or the watch's error, when it fails).
    public func waitForState<State: Codable & Sendable>(
        of store: String, as _: State.Type, scope: Scope = .root, timeout: Duration = .seconds(10),
        until condition: @escaping @Sendable (State) -> Bool
    ) async throws -> State {
        try await first(within: timeout, store: store) {
            for try await update in self.watch(store, scope: scope, timeout: timeout) {
                let state = try PayloadCodec.decode(StoreSnapshot<State>.self, from: update.snapshot).state
                if condition(state) { return state }
            }
            return nil
        }
    }

    /// Watches a keyed store's records under `prefix` until they satisfy `condition` and returns
    /// them; throws `timeout` when they do not within `timeout`.
    public func waitForRecords<Record: Codable & Sendable>(
        of store: String, as _: Record.Type, prefix: String = "", scope: Scope = .root, timeout: Duration = .seconds(10),
        until condition: @escaping @Sendable ([String: Record]) -> Bool
    ) async throws -> [String: Record] {
        try await first(within: timeout, store: store) {
            var records: [String: Record] = [:]
            for try await update in self.watchRecords(Record.self, store: store, prefix: prefix, scope: scope, timeout: timeout) {
                if update.isSnapshot { records.removeAll() }
                for change in update.changes { records[change.key] = change.record }
                if condition(records) { return records }
            }
            return nil
        }
    }

    /// The value `watch` finds, or `timeout` once `timeout` has passed.
    private func first<T: Sendable>(
        within timeout: Duration, store: String, _ watch: @escaping @Sendable () async throws -> T?
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await watch() }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let value = try await group.next() ?? nil else {
                throw BusError(.timeout, "store '\(store.escapedForDisplay())' did not reach the state waited for within \(timeout)")
            }
            return value
        }
    }
}
