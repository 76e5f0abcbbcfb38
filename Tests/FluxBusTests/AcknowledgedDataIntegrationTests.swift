import BoardKit
import BoardKitTesting
import BusCore
import BoardBusDemoCommentsIO
import FluxBus
import Foundation
import GRDB
import Testing

/// The comments board in the root scope and in scope `eu`, each restarted after any end. Restarts
/// more than a second apart start again at the shortest back-off.
let twoScopesManifest = """
    {
      "scopes": [{ "name": "eu" }],
      "boards": [
        { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "always", "restart": "always",
          "restartLimit": { "count": 100, "windowSeconds": 1 } },
        { "id": "demo.comments", "executable": "BoardBusDemoComments", "scope": "eu", "start": "always", "restart": "always",
          "restartLimit": { "count": 100, "windowSeconds": 1 } }
      ]
    }
    """

typealias CommentsSnapshot = StoreSnapshot<CommentsIO.State>

/// What BoardBus acknowledged is what its stores hold: per scope, across `kill -9` of the owner
/// and of the broker, in a state directory that outlives the runtime directory, and while a
/// board waits for its database rather than being declared dead.
@Suite(
    "Acknowledged data is never lost", .serialized,
    .timeLimit(.minutes(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_STEPS"] == nil ? 4 : 60)))
struct AcknowledgedDataIntegrationTests {
    static func reply(_ content: String) -> String { #"{"postID":1,"parent":0,"content":"\#(content)"}"# }

    static func contents(_ fleet: TestFleet, scope: Scope) async throws -> (sequence: UInt64, contents: [String]) {
        var arguments = ["state", "comments", "--json"]
        if !scope.isRoot { arguments += ["--scope", scope.name] }
        let result = try await fleet.run("busctl", arguments: arguments)
        let snapshot = try result.decodedOutput(as: CommentsSnapshot.self)
        return (snapshot.sequence, snapshot.state.comments["1"]?.map(\.content) ?? [])
    }

    static func dispatch(_ fleet: TestFleet, _ content: String, id: String, scope: Scope, timeout: String = "10") async throws
        -> ChildProcess.Result
    {
        var arguments = ["dispatch", "comments", "reply", reply(content), "--id", id, "--timeout", timeout]
        if !scope.isRoot { arguments += ["--scope", scope.name] }
        return try await fleet.run("busctl", arguments: arguments, timeout: .seconds(60))
    }

    /// Kills a scope's comments board with SIGKILL and waits until its restarted process serves
    /// the store again.
    static func killOwner(_ fleet: TestFleet, scope: Scope) async throws {
        let pid = try #require(fleet.pid(of: CommentsIO.id, scope: scope))
        #expect(kill(pid, SIGKILL) == 0)
        let back = try await eventually(timeout: .seconds(20)) {
            guard let now = fleet.pid(of: CommentsIO.id, scope: scope), now != pid else { return false }
            return (try? await contents(fleet, scope: scope)) != nil
        }
        #expect(back, "the comments board of scope \(scope) did not come back")
    }

    /// Issue: `demo.comments` in the root and in `eu` shared one database row: an id applied in
    /// one scope was "already applied" in the other, and after `kill -9` the root's store held
    /// eu's state, its acknowledged comment gone and its sequence going backwards.
    @Test func theSameStoreBoardInTwoScopesKeepsTwoStoresThroughDuplicatesAndKill9() async throws {
        try await TestFleet.with(manifest: twoScopesManifest) { fleet in
            func expectState(root: [String], eu: [String], _ step: String) async throws {
                let (rootSequence, rootContents) = try await Self.contents(fleet, scope: .root)
                let (euSequence, euContents) = try await Self.contents(fleet, scope: "eu")
                #expect(rootContents == root && rootSequence == UInt64(root.count), "root after \(step): \(rootSequence) \(rootContents)")
                #expect(euContents == eu && euSequence == UInt64(eu.count), "eu after \(step): \(euSequence) \(euContents)")
            }
            #expect(try await Self.dispatch(fleet, "ROOT-1", id: "r1", scope: .root).standardOutput.contains("reply applied"))
            try await expectState(root: ["ROOT-1"], eu: [], "r1 in the root")
            #expect(try await Self.dispatch(fleet, "EU-1", id: "e1", scope: "eu").standardOutput.contains("reply applied"))
            try await expectState(root: ["ROOT-1"], eu: ["EU-1"], "e1 in eu")
            // The root's id is new to eu.
            let crossed = try await Self.dispatch(fleet, "EU-2", id: "r1", scope: "eu")
            #expect(crossed.standardOutput.contains("reply applied"), "\(crossed.standardOutput) \(crossed.standardError)")
            try await expectState(root: ["ROOT-1"], eu: ["EU-1", "EU-2"], "r1 in eu")
            // A repeated id is refused in its own scope only.
            #expect(try await Self.dispatch(fleet, "AGAIN", id: "e1", scope: "eu").standardOutput.contains("already applied"))
            try await expectState(root: ["ROOT-1"], eu: ["EU-1", "EU-2"], "e1 again in eu")

            try await Self.killOwner(fleet, scope: .root)
            try await expectState(root: ["ROOT-1"], eu: ["EU-1", "EU-2"], "kill -9 of the root's board")
            #expect(try await Self.dispatch(fleet, "AGAIN", id: "r1", scope: .root).standardOutput.contains("already applied"))
            #expect(try await Self.dispatch(fleet, "ROOT-2", id: "e1", scope: .root).standardOutput.contains("reply applied"))
            try await expectState(root: ["ROOT-1", "ROOT-2"], eu: ["EU-1", "EU-2"], "e1 in the root")

            try await Self.killOwner(fleet, scope: "eu")
            try await expectState(root: ["ROOT-1", "ROOT-2"], eu: ["EU-1", "EU-2"], "kill -9 of eu's board")
            try await fleet.restartBrokerAfterKill()
            _ = try await fleet.busctl("wait", "--timeout", "30")
            try await expectState(root: ["ROOT-1", "ROOT-2"], eu: ["EU-1", "EU-2"], "kill -9 of the broker")
            #expect(try await Self.dispatch(fleet, "AGAIN", id: "r1", scope: "eu").standardOutput.contains("already applied"))
        }
    }

    /// Issue: stores and the CURVE key pair lived in the runtime directory, which systemd removes
    /// whenever the service stops: every store emptied, the server key changed.
    @Test func storesAndTheServerKeyOutliveTheRuntimeDirectory() async throws {
        let state = try DurableStoreFixture()
        defer { state.remove() }
        let environment = ["BOARDBUS_STATE_DIR": state.directory]
        let manifest = """
            { "listen": ["tcp://127.0.0.1:*"],
              "boards": [{ "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "always" }] }
            """
        func serverKey(_ fleet: TestFleet) async throws -> String {
            let result = try await fleet.busctl("keys", "server")
            #expect(result.exitCode == 0, "\(result.standardError)")
            return result.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        var firstRuntime = ""
        let key = try await TestFleet.with(manifest: manifest, brokerEnvironment: environment) { fleet in
            firstRuntime = fleet.address.runtimeDirectory
            #expect(try await Self.dispatch(fleet, "KEPT", id: "k1", scope: .root).exitCode == 0)
            return try await serverKey(fleet)
        }
        #expect(key.count == 40)
        // The first fleet's runtime directory is gone with it, as systemd removes it.
        #expect(!FileManager.default.fileExists(atPath: firstRuntime))
        try await TestFleet.with(manifest: manifest, brokerEnvironment: environment) { fleet in
            #expect(fleet.address.runtimeDirectory != firstRuntime)
            #expect(try await Self.contents(fleet, scope: .root).contents == ["KEPT"])
            #expect(try await Self.dispatch(fleet, "KEPT", id: "k1", scope: .root).standardOutput.contains("already applied"))
            #expect(try await serverKey(fleet) == key)
            // One fleet per state directory: a second broker on it refuses to start.
            let second = try await fleet.run(
                "motherboard", arguments: ["--runtime-dir", "\(fleet.directory)/second", "--state-dir", state.directory, "--exit-with-parent"],
                timeout: .seconds(30))
            #expect(second.exitCode != 0)
            #expect(second.standardError.contains("in use by another motherboard"), "\(second.standardError)")
        }
    }

    /// Issue: while another process held the store's write lock for 3 s, the dispatch failed
    /// after 2.5 s with `boardNotRunning` ("stopped before answering"), then was applied when the
    /// lock went. The board is busy, not gone: the dispatch is answered once the lock goes.
    @Test func aBoardWaitingForItsDatabaseIsBusyNotDeadAndItsDispatchIsAnswered() async throws {
        try await TestFleet.with(manifest: twoScopesManifest) { fleet in
            let pid = try #require(fleet.pid(of: CommentsIO.id))
            let (lock, dispatch) = try await Self.dispatchBehindALock(fleet, "SLOW", id: "slow-1", timeout: "15")
            // Held past the liveness timeout: the broker shows the board busy, and keeps it.
            let busy = try await eventually(timeout: .seconds(10)) { try await Self.state(fleet) == "busy" }
            #expect(busy)
            try lock.release()
            let result = try await dispatch.wait(timeout: .seconds(30))
            #expect(result.exitCode == 0 && result.standardOutput.contains("reply applied"), "\(result.standardOutput) \(result.standardError)")
            #expect(try await Self.dispatch(fleet, "SLOW", id: "slow-1", scope: .root).standardOutput.contains("already applied"))
            #expect(fleet.pid(of: CommentsIO.id) == pid)
            #expect(try await eventually { try await Self.state(fleet) == "running" })
            #expect(!fleet.brokerLog.contains("board dropped"), "\(fleet.brokerLog)")
        }
    }

    /// A dispatch delivered to a board that then dies is `outcomeUnknown` (never an error that
    /// reads "not delivered"), and busctl says to retry with the same id, which applies it once.
    @Test func aDispatchWhoseBoardDiesAfterDeliveryIsOutcomeUnknownAndItsRetryAppliesOnce() async throws {
        try await TestFleet.with(manifest: twoScopesManifest) { fleet in
            let pid = try #require(fleet.pid(of: CommentsIO.id))
            let (lock, dispatch) = try await Self.dispatchBehindALock(fleet, "LOST?", id: "unknown-1", timeout: "20")
            // Busy means its handler holds the thread: the dispatch was delivered.
            #expect(try await eventually(timeout: .seconds(10)) { try await Self.state(fleet) == "busy" })
            #expect(kill(pid, SIGKILL) == 0)
            let result = try await dispatch.wait(timeout: .seconds(30))
            #expect(result.exitCode == 1)
            #expect(result.standardError.hasPrefix("busctl: outcomeUnknown: "), "\(result.standardError)")
            #expect(result.standardError.contains("retry with the same dispatch id (--id unknown-1)"), "\(result.standardError)")
            try lock.release()
            _ = try await eventually(timeout: .seconds(20)) { (try? await Self.contents(fleet, scope: .root)) != nil }
            #expect(try await Self.dispatch(fleet, "LOST?", id: "unknown-1", scope: .root).standardOutput.contains("reply applied"))
            #expect(try await Self.dispatch(fleet, "LOST?", id: "unknown-1", scope: .root).standardOutput.contains("already applied"))
            #expect(try await Self.contents(fleet, scope: .root).contents == ["LOST?"])
        }
    }

    /// Issue: a store could not refuse an action: `busctl dispatch` said "applied … change N",
    /// exit 0, while nothing changed. The comments store refuses a blank comment and a reply to a
    /// comment that is not there: `rejected` with its reason, exit 1, no change spent, and the
    /// same refusal for a retry with the id, after a kill -9 of the owner too.
    @Test func aStoreRefusesAnActionAndARetryWithItsIDIsRefusedAgain() async throws {
        try await TestFleet.with(manifest: twoScopesManifest) { fleet in
            #expect(try await Self.dispatch(fleet, "first", id: "ok-1", scope: .root).exitCode == 0)
            let blank = try await Self.dispatch(fleet, " ", id: "blank-1", scope: .root)
            #expect(blank.exitCode == 1)
            #expect(blank.standardError == "busctl: rejected: store 'comments' refused 'reply': a comment needs content\n", "\(blank.standardError)")
            let orphan = try await fleet.run(
                "busctl", arguments: ["dispatch", "comments", "reply", #"{"postID":1,"parent":99,"content":"hi"}"#, "--id", "orphan-1"])
            #expect(orphan.exitCode == 1 && orphan.standardError.contains("post 1 has no comment 99 to reply to"), "\(orphan.standardError)")
            try await Self.killOwner(fleet, scope: .root)
            let again = try await Self.dispatch(fleet, "now with content", id: "blank-1", scope: .root)
            #expect(again.standardError == blank.standardError)
            let state = try await Self.contents(fleet, scope: .root)
            #expect(state.contents == ["first"] && state.sequence == 1, "\(state)")
        }
    }

    /// The shipped unit: systemd removes `RuntimeDirectory=` at every stop and restart, so the
    /// fleet's state is in `StateDirectory=` (kept), named to the broker and its boards.
    @Test func theSystemdUnitKeepsStateInTheStateDirectory() throws {
        let unit = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../fleet/systemd/boardbus.service")
        let lines = try String(contentsOf: unit, encoding: .utf8).split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") }
        #expect(lines.contains("StateDirectory=boardbus"))
        #expect(lines.contains("StateDirectoryMode=0700"))
        #expect(lines.contains("Environment=BOARDBUS_STATE_DIR=%S/boardbus"))
        #expect(lines.contains("RuntimeDirectory=boardbus"))
        #expect(!lines.contains { $0.hasPrefix("Environment=BOARDBUS_DATA_DIR") || $0.hasPrefix("Environment=BOARDBUS_STATE_DIR=%t") })
    }

    /// Another connection takes the root store's write lock, then a busctl dispatch starts, in
    /// the background, behind it.
    static func dispatchBehindALock(_ fleet: TestFleet, _ content: String, id: String, timeout: String) async throws -> (
        lock: LockedDatabase, dispatch: ChildProcess
    ) {
        let lock = try LockedDatabase(fleet: fleet)
        let dispatch = try await ChildProcess(
            executable: "\(fleet.binaryDirectory)/busctl",
            arguments: ["dispatch", "comments", "reply", reply(content), "--id", id, "--timeout", timeout],
            environment: fleet.environment, directory: fleet.directory, name: "dispatch-\(id)")
        return (lock, dispatch)
    }

    static func state(_ fleet: TestFleet) async throws -> String? {
        let result = try await fleet.busctl("status", CommentsIO.id.rawValue, "--json")
        return (try? JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any])?["state"] as? String
    }

    /// A model of what was acknowledged, against the stores: random dispatches (fresh ids, ids
    /// repeated in their scope and in the other) in two scopes, with `kill -9` of an owner during
    /// a dispatch and of the broker between and during them. Every outcome the client could not
    /// know is retried with its id until known; then each store holds exactly what was
    /// acknowledged in its scope, once, and its sequence never goes back. A tenth of the
    /// dispatches are blank comments, which the store refuses: refused every time their id is
    /// sent again in their scope, never applied.
    @Test func randomDispatchesWithKill9OfOwnersAndBrokerMatchAModelOfWhatWasAcknowledged() async throws {
        let steps = Int(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_STEPS"] ?? "") ?? 2_000
        var random = SeededRandom(seed: UInt64(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_SEED"] ?? "") ?? 34)
        try await TestFleet.with(manifest: twoScopesManifest) { fleet in
            let scopes: [Scope] = [.root, "eu"]
            var acknowledged: [Scope: [String: String]] = [.root: [:], "eu": [:]]
            var lastSequence: [Scope: UInt64] = [.root: 0, "eu": 0]
            var usedIDs: [String] = []
            var refused: [Scope: Set<String>] = [.root: [], "eu": []]
            var refusals = 0
            var divergences: [String] = []
            var kills = Kills()
            var unknownOutcomes = 0
            try await fleet.withClient { client in
                func check(_ when: String) async throws {
                    for scope in scopes {
                        // Asked again while the store's owner or the broker comes back.
                        let header = EnvelopeHeader(kind: .store, target: CommentsIO.store, scope: scope, typeName: StoreOperation.state)
                        let answer = try await client.request(
                            Envelope(header: header), timeout: .seconds(30), retryingOn: BusClient.retryable.union([.timeout, .outcomeUnknown]))
                        let snapshot = try PayloadCodec.decode(CommentsSnapshot.self, from: answer.payload)
                        let held = snapshot.state.comments["1"]?.map(\.content) ?? []
                        let expected = Set(acknowledged[scope]!.values)
                        if Set(held) != expected || held.count != expected.count {
                            divergences.append("\(scope) \(when): holds \(held.count), acknowledged \(expected.count)")
                        }
                        if snapshot.sequence < lastSequence[scope]! { divergences.append("\(scope) \(when): sequence went back") }
                        lastSequence[scope] = snapshot.sequence
                    }
                }
                for step in 0..<steps {
                    let scope = scopes[Int(random.next() % 2)]
                    let repeated = !usedIDs.isEmpty && random.next() % 10 < 3
                    let id = repeated ? usedIDs[Int(random.next() % UInt64(usedIDs.count))] : "d\(step)"
                    if !repeated { usedIDs.append(id) }
                    let blank = random.next() % 10 == 0
                    let content = blank ? "  " : "\(scope.name.isEmpty ? "root" : scope.name):\(step)"
                    let payload = try PayloadCodec.encode(CommentsIO.Reply(postID: 1, parent: 0, content: content))
                    let attack = random.next() % 60
                    let attacked = try await dispatchUnderAttack(
                        fleet: fleet, owner: CommentsIO.id, scope: scope, attack: attack, random: &random, kills: &kills
                    ) {
                        try await client.dispatch(
                            store: CommentsIO.store, action: "reply", payload: payload, dispatchID: id, scope: scope, timeout: .seconds(5))
                    }
                    let (outcome, maybeApplied) = (attacked.result, attacked.maybeApplied)
                    unknownOutcomes += attacked.unknownOutcomes
                    if let unexpected = attacked.unexpected { divergences.append("step \(step): \(unexpected)") }
                    if case .failure(let error) = outcome, (error as? BusError)?.code == .rejected {
                        refusals += 1
                        if acknowledged[scope]![id] != nil { divergences.append("step \(step): \(id) refused in \(scope) after it was applied") }
                        if !blank && !refused[scope]!.contains(id) { divergences.append("step \(step): \(id) refused in \(scope), not blank") }
                        refused[scope]!.insert(id)
                        continue
                    }
                    guard case .success(let ack) = outcome else {
                        divergences.append("step \(step): no answer for \(id) in \(scope)")
                        continue
                    }
                    if refused[scope]!.contains(id) { divergences.append("step \(step): \(id) refused in \(scope), then acknowledged") }
                    if blank && ack.applied { divergences.append("step \(step): a blank comment applied in \(scope)") }
                    let known = acknowledged[scope]![id] != nil
                    if ack.applied {
                        if known { divergences.append("step \(step): \(id) applied twice in \(scope)") }
                        acknowledged[scope]![id] = content
                    } else if !known {
                        // Only an attempt of this step could have applied it.
                        if maybeApplied {
                            acknowledged[scope]![id] = content
                        } else {
                            divergences.append("step \(step): \(id) already applied in \(scope), never acknowledged there")
                        }
                    }
                    if step % 100 == 99 || attack < 2 { try await check("after step \(step)") }
                }
                try await check("at the end")
            }
            #expect(divergences.isEmpty, "\(divergences.prefix(20))")
            #expect(kills.owners > 0 && kills.brokers > 0)
            let total = acknowledged.values.reduce(0) { $0 + $1.count }
            print(
                "model: \(steps) steps, \(total) acknowledged, \(kills.owners) owner kills, \(kills.brokers) broker kills, \(unknownOutcomes) unknown outcomes, \(refusals) refusals, \(divergences.count) divergences"
            )
        }
    }
}

/// How many owners and brokers a model test killed.
struct Kills {
    var owners = 0
    var brokers = 0
}

/// What became of a dispatch of a model test: its last result, whether an earlier attempt's
/// outcome was unknown (it may have been applied), how many were, and an error no restart explains.
struct AttackedDispatch {
    var result: Result<DispatchAck, any Error>
    var maybeApplied = false
    var unknownOutcomes = 0
    var unexpected: (any Error)?
    /// Whether the owner or the broker was killed around it.
    var attacked = false
}

/// Sends a dispatch of a model test while, as `attack` says (0: kill its owner somewhere around
/// it, 1: kill and restart the broker, three times at most), the fleet is attacked, and sends it
/// again with its id until its outcome is known (applied, or refused), for up to 60 s.
func dispatchUnderAttack(
    fleet: TestFleet, owner: BoardID, scope: Scope, attack: UInt64, random: inout SeededRandom, kills: inout Kills,
    send: @escaping @Sendable () async throws -> DispatchAck
) async throws -> AttackedDispatch {
    let dispatching = Task { try await send() }
    if attack == 0, let pid = fleet.pid(of: owner, scope: scope) {
        // The owner dies somewhere around the dispatch: before, during or after it.
        try await Task.sleep(for: .microseconds(Int64(random.next() % 3_000)))
        kill(pid, SIGKILL)
        kills.owners += 1
    } else if attack == 1, kills.brokers < 3 {
        try await fleet.restartBrokerAfterKill()
        kills.brokers += 1
    }
    let struck = kills
    var attacked = AttackedDispatch(result: await Result(catching: { try await dispatching.value }))
    attacked.attacked = kills.owners != struck.owners || kills.brokers != struck.brokers
    let deadline = ContinuousClock.now.advanced(by: .seconds(60))
    while case .failure(let error) = attacked.result, ContinuousClock.now < deadline {
        let code = (error as? BusError)?.code
        if code == .rejected { break }
        if code == .outcomeUnknown || code == .timeout {
            attacked.maybeApplied = true
            attacked.unknownOutcomes += 1
        } else if ![BusError.Code.noSuchStore, .boardNotRunning, .brokerNotRunning].contains(code) {
            attacked.unexpected = error
            break
        }
        try await Task.sleep(for: .milliseconds(50))
        attacked.result = await Result(catching: { try await send() })
    }
    return attacked
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// A second connection holding the write lock of the root comments store's database, as
/// `sqlite3` with `BEGIN IMMEDIATE` does.
struct LockedDatabase {
    let queue: DatabaseQueue

    init(fleet: TestFleet) throws {
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        let path = try StorePersistence.databasePath(
            for: StoreIdentity(board: CommentsIO.id, scope: .root, store: CommentsIO.store), environment: fleet.environment)
        queue = try DatabaseQueue(path: path, configuration: configuration)
        try queue.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
    }

    func release() throws {
        try queue.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
    }
}
