import BusCore
import BoardKit
import FluxBus
import BoardKitTesting
import Foundation
import Synchronization

/// `soak SECONDS`: a long steady load on the real broker. Echo commands from several clients,
/// and acknowledged dispatches to a persistent store that are checked at the end: every request
/// must end in a reply or a typed error, and every acknowledged dispatch must be in the store.
struct SoakLoad {
    let fleet: TestFleet
    let seconds: Double

    struct Tally: Sendable {
        var sent = 0
        var replied = 0
        var errors: [String: Int] = [:]
        var dispatched = 0
        var dispatchAcknowledged = 0
    }

    final class SharedTally: Sendable {
        private let tally = Mutex(Tally())
        func withLock<T>(_ body: (inout Tally) -> T) -> T { tally.withLock { body(&$0) } }
    }

    struct CommentsState: Decodable { var comments: [String: [Comment]] }
    struct Comment: Decodable { var content: String }
    struct Snapshot: Decodable {
        var sequence: UInt64
        var state: CommentsState
    }

    func run(report: (String) -> Void) async throws {
        let tally = SharedTally()
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        let memoryStart = residentKiB(of: fleet.brokerPID) ?? 0
        let payload = echoPayload(bytes: 100)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                let client = try BusClient(address: fleet.address)
                for _ in 0..<8 {
                    group.addTask(executorPreference: client.executor) {
                        while monotonicNanoseconds() < deadline {
                            tally.withLock { $0.sent += 1 }
                            do {
                                _ = try await client.call("bench.echo", command: "echo", payload: payload, timeout: .seconds(5))
                                tally.withLock { $0.replied += 1 }
                            } catch let error as BusError {
                                tally.withLock { $0.errors[error.code.name, default: 0] += 1 }
                            }
                        }
                    }
                }
                group.addTask {
                    while monotonicNanoseconds() < deadline { try await Task.sleep(for: .milliseconds(200)) }
                    try await Task.sleep(for: .seconds(6))
                    client.close()
                }
            }
            group.addTask {
                try await fleet.withClient { client in
                    var index = 0
                    while monotonicNanoseconds() < deadline {
                        let body = Data(#"{"postID":1,"parent":0,"content":"soak \#(index)"}"#.utf8)
                        tally.withLock { $0.dispatched += 1 }
                        _ = try await client.dispatch(
                            store: "comments", action: "reply", payload: body, dispatchID: "soak-\(index)", timeout: .seconds(5))
                        tally.withLock { $0.dispatchAcknowledged += 1 }
                        index += 1
                    }
                }
            }
            var last = monotonicNanoseconds()
            while monotonicNanoseconds() < deadline {
                try await Task.sleep(for: .seconds(1))
                if monotonicNanoseconds() - last > 30_000_000_000 {
                    last = monotonicNanoseconds()
                    let now = tally.withLock { $0 }
                    progress(
                        "soak: \(now.replied) replies, \(now.dispatchAcknowledged) dispatches, broker RSS \(residentKiB(of: fleet.brokerPID) ?? 0) KiB"
                    )
                }
            }
            try await group.waitForAll()
        }
        let memoryEnd = residentKiB(of: fleet.brokerPID) ?? 0
        let stored = try await fleet.withClient { client in
            try JSONDecoder().decode(Snapshot.self, from: try await client.storeState("comments"))
        }
        let final = tally.withLock { $0 }
        let storedCount = stored.state.comments["1"]?.count ?? 0
        let unanswered = final.sent - final.replied - final.errors.values.reduce(0, +)
        let lost = unanswered + (final.errors["timeout"] ?? 0) + max(0, final.dispatchAcknowledged - storedCount)
        report(
            """
            soak of \(Int(seconds)) s on the real broker (4 clients × 8 echo commands in flight, 1 client dispatching to a persistent store)
            | figure | value |
            |---|---|
            | echo requests sent | \(final.sent) |
            | echo replies | \(final.replied) |
            | typed errors | \(final.errors.isEmpty ? "none" : final.errors.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", ")) |
            | dispatches sent / acknowledged | \(final.dispatched) / \(final.dispatchAcknowledged) |
            | acknowledged dispatches found in the store | \(storedCount) |
            | lost (no answer, timed out, or acknowledged but missing) | \(lost) |
            | broker RSS start → end (KiB) | \(memoryStart) → \(memoryEnd) |
            \(lost == 0 ? "HOLDS" : "MISSED") nothing lost
            """)
    }
}
