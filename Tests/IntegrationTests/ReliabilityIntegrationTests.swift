import BusCore
import BoardKit
import FluxBus
import BoardKitTesting
import BoardBusDemoCommentsIO
import Foundation
import BoardBusDemoGreeterIO
import Synchronization
import Testing

let supervisedManifest = """
    {
      "boards": [
        { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always", "restart": "on-failure" },
        { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" },
        { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "always", "restart": "always" },
        { "id": "demo.recorder", "executable": "BoardBusDemoRecorder", "start": "always", "arguments": ["--from", "auth.login"] }
      ]
    }
    """

/// Crashes of boards and of the broker: supervision, typed failures, recovery.
@Suite("Reliability", .serialized, .timeLimit(.minutes(3)))
struct ReliabilityIntegrationTests {
    @Test func aBoardKilledUnderLoadIsRestartedAndNoCallHangs() async throws {
        try await TestFleet.with(manifest: supervisedManifest) { fleet in
            let firstPID = try #require(fleet.pid(of: GreeterIO.id))
            let outcomes = Mutex<[String]>([])
            let stop = Atomic<Bool>(false)
            let load = Task {
                try await fleet.withClient { client in
                    var sequence = 0
                    while !stop.load(ordering: .acquiring) {
                        sequence += 1
                        do {
                            let pong = try await client.interact(with: GreeterIO.id, GreeterIO.Ping(sequence: sequence), timeout: .seconds(2))
                            outcomes.withLock { $0.append(pong.sequence == sequence ? "ok" : "wrong") }
                        } catch let error as BusError {
                            outcomes.withLock { $0.append(error.code.name) }
                            try await Task.sleep(for: .milliseconds(5))
                        }
                    }
                }
            }
            _ = await eventually { outcomes.withLock { $0.count } > 50 }
            #expect(kill(firstPID, SIGKILL) == 0)
            let back = try await fleet.withClient { client in
                try await eventually(timeout: .seconds(10)) {
                    let info = try await client.status(GreeterIO.id)
                    return info.state == .running && info.pid != firstPID
                }
            }
            #expect(back)
            _ = await eventually { outcomes.withLock { $0.suffix(20).allSatisfy { $0 == "ok" } } }
            stop.store(true, ordering: .releasing)
            try await load.value

            let seen = outcomes.withLock { $0 }
            // Every call either succeeded or failed with a typed error; none hung past its deadline.
            // A call the board took and did not answer is outcomeUnknown, not "not running".
            #expect(Set(seen).isSubset(of: ["ok", "boardNotRunning", "noSuchBoard", "outcomeUnknown"]), "\(Set(seen))")
            #expect(seen.filter { $0 == "ok" }.count > 60)
            // A caller that asks for retries gets an answer across a crash. Retries repeat only
            // what was not delivered: a ping sent to the dying process (outcomeUnknown) is safe to
            // repeat, so this caller repeats it itself.
            let secondPID = try #require(fleet.pid(of: GreeterIO.id))
            #expect(kill(secondPID, SIGKILL) == 0)
            let retried = try await fleet.withClient { client in
                while true {
                    do {
                        return try await client.interact(with: GreeterIO.id, GreeterIO.Ping(sequence: 99), timeout: .seconds(10), retries: true)
                    } catch let error as BusError where error.code == .outcomeUnknown {}
                }
            }
            #expect(retried.sequence == 99)
            let status = try await fleet.busctl("status", "demo.greeter", "--json")
            let info = try decode(BoardInfo.self, from: status)
            #expect(info.restarts == 2)
            #expect(info.lastExit == "signal 9")
            #expect(fleet.pid(of: GreeterIO.id) == info.pid)
        }
    }

    @Test func noAcknowledgedDispatchIsLostWhenTheStoreOwnerIsKilled() async throws {
        try await TestFleet.with(manifest: supervisedManifest) { fleet in
            let acknowledged = Mutex<[Int]>([])
            let retries = Mutex(0)
            // The writer stops at a gate after 30 acknowledged dispatches and goes on once the
            // owner is killed: what it sends next meets a dead owner and must be retried.
            let gate = Mutex<(reached: Bool, open: Bool)>((false, false))
            let writer = Task {
                try await fleet.withClient { client in
                    for index in 0..<120 {
                        if index == 30 {
                            gate.withLock { $0.reached = true }
                            while !gate.withLock({ $0.open }) { try await Task.sleep(for: .milliseconds(5)) }
                        }
                        let reply = CommentsIO.Reply(postID: 1, parent: 0, content: "c\(index)")
                        // Retried with the same id until acknowledged: effectively once.
                        for _ in 0..<100 {
                            do {
                                _ = try await client.dispatch(
                                    store: CommentsIO.store, action: "reply", payload: PayloadCodec.encode(reply),
                                    dispatchID: "d\(index)", timeout: .seconds(2))
                                acknowledged.withLock { $0.append(index) }
                                break
                            } catch let error as BusError where [.noSuchStore, .boardNotRunning, .timeout, .outcomeUnknown].contains(error.code) {
                                retries.withLock { $0 += 1 }
                                try await Task.sleep(for: .milliseconds(20))
                            }
                        }
                    }
                }
            }
            #expect(await eventually { gate.withLock { $0.reached } })
            let pid = try #require(fleet.pid(of: CommentsIO.id))
            #expect(kill(pid, SIGKILL) == 0)
            gate.withLock { $0.open = true }
            try await writer.value
            #expect(retries.withLock { $0 } >= 1, "no dispatch met the killed owner")
            #expect(acknowledged.withLock { $0 } == Array(0..<120))
            let state = try await fleet.withClient { client in
                try PayloadCodec.decode(StoreSnapshot<CommentsIO.State>.self, from: try await client.storeState(CommentsIO.store)).state
            }
            #expect(state.comments["1"]?.map(\.content) == (0..<120).map { "c\($0)" })
        }
    }

    @Test func theFleetReRegistersAfterTheBrokerIsKilledAndRestarted() async throws {
        try await TestFleet.with(manifest: supervisedManifest) { fleet in
            let before = try await fleet.withClient { try await $0.list() }
            #expect(before.boards.count == 4)
            let flowsBefore = try await fleet.withClient { try await $0.flows() }.flows.count
            // A watcher that lives through the restart.
            let watcher = try BusClient(address: fleet.address)
            defer { watcher.close() }
            var updates = watcher.watch(CommentsIO.store).makeAsyncIterator()
            let first = try #require(try await updates.next())
            try await fleet.restartBrokerAfterKill()
            let clock = ContinuousClock()
            let start = clock.now
            let after = try await fleet.withClient { client in
                try await client.waitForFleet(timeout: .seconds(10))
            }
            let elapsed = start.duration(to: clock.now)
            #expect(elapsed < .seconds(5), "re-registration took \(elapsed)")
            // The same processes, adopted: nothing was started twice.
            #expect(
                Dictionary(uniqueKeysWithValues: after.boards.map { ($0.id, $0.pid) })
                    == Dictionary(uniqueKeysWithValues: before.boards.map { ($0.id, $0.pid) }))
            // Boards registered their run-time flows again.
            let flowsAfter = try await eventually { try await fleet.withClient { try await $0.flows() }.flows.count == flowsBefore }
            #expect(flowsAfter)
            let call = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"again"}"#)
            #expect(call.standardOutput.contains("Hello, again!"))
            // The adopted board's log writer outlived the broker that started it: what the board
            // prints after the restart still reaches its log.
            _ = try await fleet.busctl("call", "demo.greeter", "probeAfterRestart", "{}")
            let log = "\(fleet.address.runtimeDirectory)/logs/demo.greeter.log"
            #expect(
                try await eventually {
                    String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self).contains("probeAfterRestart")
                })
            // The watcher renews its subscription with the new broker (within a second) and sees
            // the changes made after it: keep changing the store until it does.
            let writer = Task {
                try await fleet.withClient { client in
                    for index in 0..<50 where !Task.isCancelled {
                        _ = try await client.dispatch(
                            store: CommentsIO.store, action: "reply",
                            payload: PayloadCodec.encode(CommentsIO.Reply(postID: 2, parent: 0, content: "after \(index)")), retries: true)
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
            }
            let next = try await updates.next()
            writer.cancel()
            _ = await writer.result
            #expect((next?.sequence ?? 0) > first.sequence)

            // An adopted board killed with SIGKILL: the broker is not its parent and cannot know how
            // it ended, and says so (it said "lost (no longer running)"); it restarts it as usual.
            let adoptedPID = try #require(before.boards.first { $0.id == GreeterIO.id }?.pid)
            #expect(kill(adoptedPID, SIGKILL) == 0)
            let restarted = try await eventually {
                let status = try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json"))
                return status.pid != adoptedPID && status.state == .running
            }
            #expect(restarted)
            let status = try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json"))
            #expect(status.lastExit?.contains("exit status unknown (adopted") == true, "\(status.lastExit ?? "nil")")
        }
    }

    /// A board stopped by its restart limit stays down until `busctl restart` starts it again
    /// (only a new broker did before); a running board is not restarted.
    @Test func busctlRestartBringsBackABoardItsRestartLimitStopped() async throws {
        let manifest = """
            { "boards": [ { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always", "restart": "on-failure",
                            "restartLimit": { "count": 1, "windowSeconds": 60 } } ] }
            """
        try await TestFleet.with(manifest: manifest) { fleet in
            func status() async throws -> BoardInfo { try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json")) }
            // Killed twice: restarted once, then the limit holds.
            for round in 0..<2 {
                let pid = try await status().pid
                #expect(pid > 0 && kill(pid, SIGKILL) == 0)
                let next = try await eventually(timeout: .seconds(20)) {
                    let info = try await status()
                    return round == 0 ? (info.state == .running && info.pid != pid) : info.state == .failed
                }
                let seen = try await status()
                #expect(next, "round \(round): \(seen)")
            }
            let refused = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"x"}"#)
            #expect(refused.standardError.hasPrefix("busctl: boardNotRunning:"))

            let restart = try await fleet.busctl("restart", "demo.greeter")
            #expect(restart.exitCode == 0, "\(restart.standardError)")
            #expect(try await eventually { try await status().state == .running })
            let call = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"back"}"#)
            #expect(call.standardOutput.contains("Hello, back!"))
            let again = try await fleet.busctl("restart", "demo.greeter")
            #expect(again.exitCode != 0 && again.standardError.hasPrefix("busctl: badArgument:"), "\(again.standardError)")
        }
    }
}
