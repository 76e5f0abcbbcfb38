import BoardBusDemoDashboardIO
import BoardBusDemoGreeterIO
import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Synchronization
import Testing

/// Motherboards joined by a NATS cluster (`motherboard --nats`): real `nats-server` nodes on
/// 127.0.0.1, real motherboards and boards, and a hostile NATS client (nats-py); the NATS guide's
/// walkthrough (NATSReadmeTests) has the third-party client that calls a board.
@Suite(.serialized)
struct NATSIntegrationTests {
    static let hostA = #"{ "boards": [ { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" } ] }"#
    static let hostB = """
        { "boards": [
            { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" },
            { "id": "demo.annotations", "executable": "BoardBusDemoAnnotationFilter", "start": "always" } ] }
        """

    /// A's dashboard, activated by a flow from `auth.login`, on B with the greeter.
    static let dashboardHost = """
        { "boards": [ { "id": "app.dashboard", "executable": "BoardBusDemoDashboard", "start": "always" } ],
          "flows": [ "auth.login ->> app.dashboard" ] }
        """
    static let loginAndGreeterHost = """
        { "boards": [ { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" },
                      { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" } ] }
        """

    /// The user A's dashboard shows (nil before its first activation).
    static func dashboardUser(on fleet: TestFleet) async throws -> String? {
        try decode(DashboardIO.View.self, from: try await fleet.busctl("call", "app.dashboard", "show", "--json")).user
    }

    /// Each motherboard lists the other's boards with its host; commands, activations and store
    /// requests reach them, a store is watched across hosts, errors come back typed.
    @Test func boardsOfTwoHostsAreReachedThroughTheCluster() async throws {
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    _ = try await a.waitForListing("demo.annotations", host: "host-b")
                    _ = try await b.waitForListing("auth.login", host: "host-a")
                    // Local boards have no host.
                    #expect(try await a.listedBoards().first { $0.id.rawValue == "auth.login" }?.host == nil)

                    let greeting = try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#)
                    #expect(greeting.exitCode == 0)
                    #expect(greeting.standardOutput.contains("Hello, Ann!"))
                    // An error of the board's motherboard comes back with its code.
                    let unknown = try await a.busctl("call", "demo.greeter", "nope")
                    #expect(unknown.exitCode != 0)
                    #expect(unknown.standardError.contains("unknownCommand"))
                    let mistyped = try await a.busctl("call", "demo.greeter", "greet", #"{"name":5}"#)
                    #expect(mistyped.exitCode != 0)
                    #expect(!mistyped.standardError.contains("timeout"))

                    // An activation, then what the board saw.
                    #expect(try await a.busctl("activate", "demo.greeter", #"{"name":"Bo"}"#).exitCode == 0)
                    let welcomed = try await eventually(timeout: .seconds(10)) {
                        let stats = try await b.busctl("call", "demo.greeter", "stats", "--json")
                        return (try? decode(GreeterIO.Seen.self, from: stats))?.welcomed == ["Bo"]
                    }
                    #expect(welcomed)

                    // A store on the other host: dispatch (its sequence number), then its state.
                    let dispatched = try await a.busctl("dispatch", "annotationFilter", "toggle", #"{"filter":"photos"}"#)
                    #expect(dispatched.exitCode == 0, "\(dispatched.standardError)")
                    let state = try await a.busctl("state", "annotationFilter")
                    #expect(state.exitCode == 0)
                    #expect(state.standardOutput.contains("photos"))
                    // A watch here: the snapshot, then a change made on the store's own host.
                    let watcher = try await ChildProcess(
                        executable: "\(a.binaryDirectory)/busctl", arguments: ["state", "annotationFilter", "--watch", "--count", "2"],
                        environment: a.environment, directory: a.directory, name: "watch")
                    try await watcher.waitForOutput("photos", timeout: .seconds(15))
                    #expect(try await b.busctl("dispatch", "annotationFilter", "toggle", #"{"filter":"videos"}"#).exitCode == 0)
                    let watched = try await watcher.wait(timeout: .seconds(15))
                    #expect(watched.exitCode == 0, "\(watched.standardError)")
                    let lines = watched.standardOutput.split(separator: "\n")
                    #expect(lines.count == 2 && lines.last?.contains("videos") == true, "\(watched.standardOutput)")

                }
                // B stopped: it withdrew its boards (A heard it leave, not fall silent).
                _ = try await a.waitForListing("demo.greeter", host: nil, timeout: .seconds(5))
                #expect(a.brokerLog.contains("a motherboard of the fleet left"))
                #expect(!a.brokerLog.contains("a motherboard of the fleet is silent"))
                let gone = try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#)
                #expect(gone.exitCode != 0)
            }
        }
    }

    /// Actions reach subscribers on every host (counted in the sender's delivery), outputs run the
    /// flows of the other motherboards, and a board calls a board of another host.
    @Test func actionsOutputsAndBoardToBoardCallsCrossHosts() async throws {
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.dashboardHost, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.loginAndGreeterHost, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await a.waitForListing("auth.login", host: "host-b")
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    _ = try await b.waitForListing("app.dashboard", host: "host-a")
                    // A's action reaches B's greeter, and A's delivery counts it.
                    let action = try await a.busctl("action", "app.announce", #"{"text":"from A"}"#, "--json")
                    #expect(action.exitCode == 0, "\(action.standardError)")
                    #expect(try decode(Delivery.self, from: action).delivered == 1, "\(action.standardOutput)")
                    let announced = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    #expect(announced.announcements == ["from A"])

                    // Login on B, activated from A: its output runs A's flow to A's dashboard; its
                    // action reaches B's greeter once.
                    #expect(try await a.busctl("activate", "auth.login", #"{"username":"ann"}"#).exitCode == 0)
                    let shown = try await eventually(timeout: .seconds(10)) {
                        (try? await Self.dashboardUser(on: a)) == "ann"
                    }
                    #expect(shown)
                    let seen = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    #expect(seen.loginsSeen == ["ann"])
                    // The dashboard (on A) calls the greeter (on B), board to board.
                    let greeted = try await b.busctl("call", "app.dashboard", "greetUser", "--json")
                    #expect(greeted.exitCode == 0, "\(greeted.standardError)")
                    #expect(greeted.standardOutput.contains("Hello, ann!"), "\(greeted.standardOutput)")
                    // An action sent on B reaches no subscriber on A: delivered to B's greeter only, once.
                    let fromB = try await b.busctl("action", "app.announce", #"{"text":"from B"}"#, "--json")
                    #expect(try decode(Delivery.self, from: fromB).delivered == 1)
                    let after = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    #expect(after.announcements == ["from A", "from B"])
                }
            }
        }
    }

    /// What comes through NATS is principal `nats` to the access policy: a motherboard whose
    /// policy grants it one command refuses the rest `forbidden`, actions included.
    @Test func theAccessPolicyDecidesWhatTheClusterMayDo() async throws {
        let narrow =
            #"{"rules": [{"name": "greet only", "allow": ["call"], "principals": ["nats"], "targets": ["demo.greeter"], "commands": ["greet"]}]}"#
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b", policy: narrow)) {
                    b in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    #expect(try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#).exitCode == 0)
                    for denied in [
                        ["call", "demo.greeter", "stats"], ["activate", "demo.greeter", #"{"name":"Bo"}"#], ["state", "annotationFilter"],
                    ] {
                        let result = try await a.run("busctl", arguments: denied)
                        #expect(result.exitCode != 0 && result.standardError.contains("forbidden"), "\(denied): \(result.standardError)")
                        #expect(result.standardError.contains("nats"), "the refusal names the principal: \(result.standardError)")
                    }
                    // An action from A reaches none of B's subscribers.
                    let action = try await a.busctl("action", "app.announce", #"{"text":"denied"}"#, "--json")
                    #expect(try decode(Delivery.self, from: action).delivered == 0)
                    let seen = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    #expect(seen.announcements.isEmpty && seen.welcomed.isEmpty)
                    // B's own clients are the broker's user: not the cluster's principal.
                    #expect(try await b.busctl("call", "demo.greeter", "stats").exitCode == 0)
                    // The other way, A's open policy lets B's clients in.
                    #expect(try await b.busctl("call", "auth.login", "users").exitCode == 0)
                }
            }
        }
    }

    /// Past the server's `max_payload` (64 KiB here): a request is refused `tooLarge` at once (it
    /// was `unreachable`), and so is an answer, at once and to its caller (it was dropped at debug
    /// level and the caller waited out its deadline, 8 s); both name the limit.
    @Test func requestsAndAnswersPastTheServersMaxPayloadAreTooLargeAtOnce() async throws {
        let config = { (directory: String) in try "max_payload: 65536\n".write(toFile: "\(directory)/limits.conf", atomically: true, encoding: .utf8)
        }
        try await NATSCluster.with(nodes: 1, arguments: ["-c", "{dir}/limits.conf"], prepare: config) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    let large = String(repeating: "n", count: 70_000)
                    let request = try await a.busctl("call", "demo.greeter", "greet", #"{"name":"\#(large)"}"#, "--timeout", "20")
                    #expect(request.exitCode == 1 && request.standardError.contains("tooLarge"), "\(request.standardError)")
                    #expect(request.standardError.contains("max_payload of 65536"), "\(request.standardError)")
                    // The greeter's stats grow past the limit with three names of 30 000 bytes.
                    for _ in 0..<3 {
                        let name = String(repeating: "w", count: 30_000)
                        #expect(try await b.busctl("activate", "demo.greeter", #"{"name":"\#(name)"}"#).exitCode == 0)
                    }
                    let answer = try await a.busctl("call", "demo.greeter", "stats", "--timeout", "20")
                    #expect(answer.exitCode == 1 && answer.standardError.contains("tooLarge"), "\(answer.standardError)")
                    #expect(answer.standardError.contains("max_payload of 65536"), "\(answer.standardError)")
                    // Answered `tooLarge`, not left to its 20 s deadline (`timeout`).
                    let small = try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#)
                    #expect(small.exitCode == 0, "\(small.standardError)")
                }
            }
        }
    }

    /// What the cluster may leave waiting on a motherboard is bounded: past `--nats-max-in-flight`
    /// requests that a board holds, the next is answered `busy` at once; the held ones time out.
    @Test func requestsFromTheClusterWaitingOnAMotherboardAreBounded() async throws {
        let hold = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/hold_board.py").path
        let holding = #"{ "boards": [ { "id": "py.hold", "executable": "/usr/bin/python3", "arguments": ["\#(hold)"], "start": "always" } ] }"#
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                let b = try nats.arguments(fleet: fleet, host: "host-b") + ["--nats-max-in-flight", "3"]
                try await TestFleet.with(manifest: holding, brokerArguments: b) { holder in
                    _ = try await a.waitForListing("py.hold", host: "host-b")
                    let codes = try await withThrowingTaskGroup(of: String.self) { group in
                        for _ in 0..<3 {
                            group.addTask {
                                let held = try await a.busctl("call", "py.hold", "hold", "--timeout", "4")
                                return held.standardError.components(separatedBy: ":").dropFirst().first?.trimmingCharacters(in: .whitespaces) ?? "ok"
                            }
                        }
                        // The fourth once the three are held on B.
                        let held = try await eventually(timeout: .seconds(20), checkingEvery: .milliseconds(100)) {
                            (try? decode(BoardInfo.self, from: try await holder.busctl("status", "py.hold", "--json")))?.commandsHandled == 3
                        }
                        #expect(held)
                        let fourth = try await a.busctl("call", "py.hold", "hold", "--timeout", "4")
                        #expect(fourth.standardError.contains("busy"), "\(fourth.standardError)")
                        var codes: [String] = []
                        for try await code in group { codes.append(code) }
                        return codes
                    }
                    #expect(codes == ["timeout", "timeout", "timeout"], "\(codes)")
                    // Once B's broker has timed them out too, the cluster is served again.
                    let served = try await eventually(timeout: .seconds(10), checkingEvery: .milliseconds(200)) {
                        try await a.busctl("call", "py.hold", "hold", "--timeout", "1").standardError.contains("timeout")
                    }
                    #expect(served)
                }
            }
        }
    }

    /// A plain NATS program that announces a board and answers on its subject is a board of the
    /// fleet: listed with its host, called from busctl, its errors typed; gone when it withdraws.
    @Test func aNATSResponderServesAsABoard() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/nats_board.py").path
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                let board = try await ChildProcess(
                    executable: "/usr/bin/python3", arguments: [script, nats.url(0), fleet], environment: a.environment, directory: a.directory,
                    name: "nats-board")
                do {
                    try await board.waitForOutput("READY", timeout: .seconds(20))
                    _ = try await a.waitForListing("py.echo", host: "python")
                    let echoed = try await a.busctl("call", "py.echo", "echo", #"{"x":[1,"é"]}"#)
                    #expect(echoed.exitCode == 0, "\(echoed.standardError)")
                    #expect(echoed.standardOutput.contains("é"))
                    let failed = try await a.busctl("call", "py.echo", "fail")
                    #expect(failed.exitCode != 0)
                    #expect(failed.standardError.contains("rejected: py.echo says no"), "\(failed.standardError)")
                    // Any other command: the board says it has none such.
                    #expect(try await a.busctl("call", "py.echo", "other").standardError.contains("unknownCommand"))
                    await board.stop()
                    _ = try await a.waitForListing("py.echo", host: nil, timeout: .seconds(5))
                } catch {
                    await board.stop()
                    throw error
                }
            }
        }
    }

    /// A motherboard killed with SIGKILL says nothing: its boards leave the others' lists when its
    /// announcements stop (3.5 s), and return when it is back.
    @Test func aKilledMotherboardsBoardsLeaveAndReturn() async throws {
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    var gone = Duration.zero
                    let started = ContinuousClock.now
                    try await b.restartBrokerAfterKill {
                        gone = try await a.waitForListing("demo.greeter", host: nil, timeout: .seconds(15))
                        let call = try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#)
                        #expect(call.exitCode != 0)
                    }
                    let back = try await a.waitForListing("demo.greeter", host: "host-b")
                    let restarted = started.duration(to: .now)
                    #expect(try await a.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#).exitCode == 0)
                    print(
                        "NATS: a killed motherboard's boards left the other's list after \(gone); back \(back) after its restart (\(restarted) in all)"
                    )
                }
            }
        }
    }

    /// One board id is one board across hosts: a second board with an id another motherboard
    /// serves is refused, with that host in the error; neither side's list changes.
    @Test func aSecondBoardWithAnIdTheClusterServesIsRefused() async throws {
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    let second = try await a.run("BoardBusDemoGreeter", arguments: [], timeout: .seconds(20))
                    #expect(second.exitCode != 0)
                    #expect(second.standardError.contains("idInUse") || second.standardError.contains("served by the motherboard on host-b"))
                    #expect(second.standardError.contains("host-b"), "\(second.standardError)")
                    #expect(try await a.listedBoards().first { $0.id.rawValue == "demo.greeter" }?.host == "host-b")
                    #expect(try await b.listedBoards().first { $0.id.rawValue == "demo.greeter" }?.host == nil)
                }
            }
        }
    }

    /// A 3-node cluster loses the node one motherboard is connected to, under a loop of calls:
    /// libnats reconnects to another node, calls go on, each is answered once or fails with
    /// `unreachable` / `timeout`, and the board ran no call twice.
    @Test func callsGoOnWhenTheNATSNodeOfAMotherboardDies() async throws {
        try await NATSCluster.with(nodes: 3) { nats in
            let fleet = uniqueFleetName()
            // A knows node 0 only (it learns the others from the cluster); B is on node 2.
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments([nats.url(0)], fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments([nats.url(2)], fleet: fleet, host: "host-b")) {
                    b in
                    _ = try await a.waitForListing("demo.greeter", host: "host-b")
                    // Eight callers at once, so that calls are in flight when the node dies.
                    let tally = SharedTally()
                    try await a.withClient { client in
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for caller in 0..<8 {
                                group.addTask {
                                    for index in 0..<2000 {
                                        let name = "c\(caller)n\(index)"
                                        do {
                                            let reply = try await client.call(
                                                GreeterIO.id, command: "greet", payload: Data(#"{"name":"\#(name)"}"#.utf8), timeout: .seconds(2))
                                            let right = String(decoding: reply, as: UTF8.self).contains("Hello, \(name)!")
                                            tally.state.withLock { $0.answered(right: right) }
                                        } catch let error as BusError {
                                            tally.state.withLock { $0.failures[error.code.name, default: 0] += 1 }
                                        }
                                        if tally.state.withLock({ $0.answeredAfterKill >= 400 }) { return }
                                    }
                                }
                            }
                            group.addTask {
                                _ = await eventually(timeout: .seconds(30)) { tally.state.withLock { $0.answered >= 200 } }
                                await nats.kill(node: 0)
                                tally.state.withLock { $0.killedAt = .now }
                            }
                            try await group.waitForAll()
                        }
                    }
                    let (answered, failures, firstAfterKill, wrong) = tally.state.withLock { ($0.answered, $0.failures, $0.firstAfterKill, $0.wrong) }
                    #expect(wrong == 0, "answers to other calls")
                    #expect(tally.state.withLock { $0.answeredAfterKill } >= 400, "calls did not go on after the node died: \(failures)")
                    // Nothing but unreachable or timeout, never another error, never a lost answer.
                    #expect(Set(failures.keys).isSubset(of: ["unreachable", "timeout"]), "\(failures)")
                    // The board ran each answered call once, and at most the failed ones besides.
                    let stats = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    let failed = failures.values.reduce(0, +)
                    #expect(
                        stats.greetings >= answered && stats.greetings <= answered + failed,
                        "\(stats.greetings) greetings, \(answered) answered, \(failed) failed")
                    print(
                        "NATS: node killed under a call loop: \(answered) answered, failures \(failures), first answer \(firstAfterKill.map { "\($0)" } ?? "none") after the kill"
                    )
                }
            }
        }
    }
}

/// The calls of the node-kill test, counted by its callers together.
final class SharedTally: Sendable {
    let state = Mutex(CallTally())
}

struct CallTally {
    var answered = 0
    var wrong = 0
    var failures: [String: Int] = [:]
    var killedAt: ContinuousClock.Instant?
    var answeredAfterKill = 0
    var firstAfterKill: Duration?

    mutating func answered(right: Bool) {
        answered += 1
        if !right { wrong += 1 }
        guard let killedAt else { return }
        answeredAfterKill += 1
        if firstAfterKill == nil { firstAfterKill = killedAt.duration(to: .now) }
    }
}
