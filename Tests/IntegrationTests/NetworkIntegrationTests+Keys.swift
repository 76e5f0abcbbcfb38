import BoardBusDemoGreeterIO
import BoardKitTesting
import BusCore
import Foundation
import Testing

// Who may connect over tcp and what each key may do: the allow-list, its revocations, plaintext
// only on request, the access policy for remote keys.
extension NetworkIntegrationTests {
    /// Issue: removing a key's line left its open connections served for ever (still able to
    /// register boards), and a malformed allow-list locked every peer out. Now a bad line is
    /// reported with its number and the list in force stays; a removed key's connections are
    /// closed and its boards dropped, and its next request is refused.
    @Test func aRevokedKeyLosesItsLiveConnectionsAndABadAllowListLocksNobodyOut() async throws {
        let manifest = #"{ "boards": [ { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" } ] }"#
        try await NetworkLab.with { lab in
            let parent = try await lab.startParent(manifest: manifest, policy: Self.policy)
            let board = try await lab.startRemoteBoard(id: "far.greeter", key: "ops")
            try lab.expectOK(try await lab.busctlA("call", "far.greeter", "greet", #"{"name":"far"}"#))
            let path = "\(lab.directory)/allowed.keys"
            let allowed = try String(contentsOfFile: path, encoding: .utf8)

            // A typo: reported with its line, the list read before stays in force.
            try (allowed + "ops2 not-a-key\n").write(toFile: path, atomically: true, encoding: .utf8)
            let check = try await lab.run(lab.binaries + "/busctl", ["keys", "check", path], in: nil)
            #expect(check.exitCode == 2 && check.standardError.contains("line 3"), "\(check.standardError)")
            #expect(
                try await eventually(timeout: .seconds(10)) { parent.standardError.contains("allow-list not changed: the new file is invalid") },
                "\(parent.standardError.suffix(2000))")
            #expect(parent.standardError.contains("line 3"))
            try lab.expectOK(try await lab.busctlOverTCP(key: "ops", "list"))
            #expect(try await lab.run(lab.binaries + "/busctl", ["keys", "check", "\(lab.directory)/nosuch.keys"], in: nil).exitCode == 2)

            // The key's line removed: its board's live connection is closed, the board dropped
            // (not kept as unreachable), and a new request with the key is refused.
            let withoutOps = allowed.split(separator: "\n").filter { !$0.hasPrefix("ops ") }.joined(separator: "\n") + "\n"
            try withoutOps.write(toFile: path, atomically: true, encoding: .utf8)
            let check2 = try await lab.run(lab.binaries + "/busctl", ["keys", "check", path], in: nil)
            #expect(check2.exitCode == 0 && check2.standardOutput.contains("1 key(s): edge-b"), "\(check2.standardOutput)")
            let dropped = try await eventually(timeout: .seconds(10)) {
                try await lab.busctlA("status", "far.greeter").standardError.contains("noSuchBoard")
            }
            let listed = try await lab.busctlA("list").standardOutput
            #expect(dropped, "\(listed)")
            #expect(parent.standardError.contains("keys removed from the allow-list"), "\(parent.standardError.suffix(2000))")
            let refused = try await lab.busctlOverTCP(key: "ops", "list", "--timeout", "5")
            #expect(refused.exitCode == 1 && refused.standardError.contains("unauthorized"), "\(refused.standardError)")
            // The board cannot register again with it.
            let later = try await lab.busctlA("list").standardOutput
            #expect(!later.contains("far.greeter"), "\(later)")
            #expect(board.isRunning)
        }
    }

    /// `Python/silent_curve_client.py` on host B with the lab's `ops` key, once through its
    /// handshake: it greets `demo.greeter` when `go` exists (over MDP with `mdp`); with
    /// `claimingKey`, it sends that key as its own `X-Curve-Key` property.
    static func startSilentClient(
        _ lab: NetworkLab, endpoint: String, go: String, mdp: Bool = false, claimingKey: String? = nil
    ) async throws -> ChildProcess {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/silent_curve_client.py").path
        let client = try await lab.start(
            "/usr/bin/python3",
            [script, endpoint, "\(lab.stateA)/curve/server.pub", "\(lab.directory)/ops.key", go, "demo.greeter", "greet", #"{"name":"far"}"#]
                + (mdp ? ["mdp"] : []), in: 1, environment: claimingKey.map { ["CLAIM_CURVE_KEY": $0] } ?? [:], runtime: nil)
        try await client.waitForOutput("ready", timeout: .seconds(30))
        return client
    }

    /// Found on review: a removed key's connections were closed only when a message had come on
    /// them (the broker learns a connection's key from its first message), and its principal kept
    /// its rights in the policy. A connection through its handshake but silent until its key was
    /// removed stayed open and was served. Now every message of a removed key is refused
    /// `unauthorized` and its connection closed.
    @Test func aConnectionSilentUntilItsKeyIsRemovedIsRefusedAndClosed() async throws {
        try await NetworkLab.with { lab in
            let parent = try await lab.startParent(manifest: Self.parentManifest, policy: Self.policy)
            try lab.expectOK(try await lab.busctlA("wait", "--timeout", "30"))
            // The policy lets `ops` greet: served while its key is listed.
            try lab.expectOK(try await lab.busctlOverTCP(key: "ops", "call", "demo.greeter", "greet", #"{"name":"far"}"#))
            let go = "\(lab.directory)/go"
            let client = try await Self.startSilentClient(lab, endpoint: lab.parentEndpoint, go: go)
            let path = "\(lab.directory)/allowed.keys"
            let allowed = try String(contentsOfFile: path, encoding: .utf8)
            try (allowed.split(separator: "\n").filter { !$0.hasPrefix("ops ") }.joined(separator: "\n") + "\n").write(
                toFile: path, atomically: true, encoding: .utf8)
            #expect(
                try await eventually(timeout: .seconds(10)) { parent.standardError.contains("keys removed from the allow-list") },
                "\(parent.standardError.suffix(2000))")
            FileManager.default.createFile(atPath: go, contents: nil)
            let result = try await client.wait(timeout: .seconds(30))
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            #expect(lines.count == 3 && lines[1].contains(#""kind": 17"#) && lines[1].contains("unauthorized"), "\(result.standardOutput)")
            #expect(lines.last == "closed", "\(result.standardOutput) \(result.standardError)")
            #expect(parent.standardError.contains("a message came on it with a key removed from the allow-list"))
            // Listed again: served again.
            try allowed.write(toFile: path, atomically: true, encoding: .utf8)
            #expect(
                try await eventually(timeout: .seconds(10)) {
                    try await lab.busctlOverTCP(key: "ops", "call", "demo.greeter", "greet", #"{"name":"far"}"#, "--timeout", "3").exitCode == 0
                })
        }
    }

    /// Found on review: the allow-list was compared by name, so a key replaced under the same
    /// name (a compromised key rotated) kept its connections, silent ones included, and they were
    /// served. A key removed under a name that stays closes its connections and refuses their
    /// messages `unauthorized`; the new key is served, the old one refused at its handshake.
    @Test func aKeyReplacedUnderItsNameLosesItsConnections() async throws {
        try await NetworkLab.with { lab in
            let mdp = "tcp://\(lab.parentAddress):\(lab.port + 3)"
            let parent = try await lab.startParent(manifest: Self.parentManifest, policy: Self.policy, arguments: ["--mdp", mdp])
            try lab.expectOK(try await lab.busctlA("wait", "--timeout", "30"))
            let made = try await lab.run(lab.binaries + "/busctl", ["keys", "new", "ops", "--out", "\(lab.directory)/ops-new.key"], in: nil)
            try lab.expectOK(made)
            let board = try await lab.startRemoteBoard(id: "far.greeter", key: "ops")
            try lab.expectOK(try await lab.busctlA("call", "far.greeter", "greet", #"{"name":"far"}"#))
            let go = "\(lab.directory)/go"
            // It lies, claiming the new key as its connection's `X-Curve-Key`: the ZAP handler's
            // property is the one the broker reads.
            let newKey = String(made.standardOutput.split(separator: " ").last ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            let client = try await Self.startSilentClient(lab, endpoint: lab.parentEndpoint, go: go, claimingKey: newKey)
            // The same through the MDP endpoint (the gateway acts for the key's name).
            let mdpClient = try await Self.startSilentClient(lab, endpoint: mdp, go: go, mdp: true)
            // `ops`'s line now names the new key.
            let path = "\(lab.directory)/allowed.keys"
            let allowed = try String(contentsOfFile: path, encoding: .utf8)
            try (allowed.split(separator: "\n").filter { !$0.hasPrefix("ops ") }.joined(separator: "\n") + "\n" + made.standardOutput).write(
                toFile: path, atomically: true, encoding: .utf8)
            #expect(
                try await eventually(timeout: .seconds(10)) { parent.standardError.contains("removedKeys=1") },
                "\(parent.standardError.suffix(2000))")
            // The board's connection (known by its key) is closed: the board is not served.
            #expect(
                try await eventually(timeout: .seconds(10)) {
                    try await lab.busctlA("call", "far.greeter", "greet", #"{"name":"far"}"#, "--timeout", "2").exitCode != 0
                })
            // The silent connection's first message is refused, and its connection closed.
            FileManager.default.createFile(atPath: go, contents: nil)
            let result = try await client.wait(timeout: .seconds(30))
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            #expect(lines.count == 3 && lines[1].contains(#""kind": 17"#) && lines[1].contains("unauthorized"), "\(result.standardOutput)")
            #expect(lines.last == "closed", "\(result.standardOutput) \(result.standardError)")
            // Through MDP: dropped (MDP has no refusal to send), its connection closed.
            let viaMDP = try await mdpClient.wait(timeout: .seconds(30))
            #expect(
                viaMDP.standardOutput.split(separator: "\n").dropFirst().map(String.init) == [#"{"kind": null}"#, "closed"],
                "\(viaMDP.standardOutput)")
            // The new key is served under the same name; the old one is refused at its handshake.
            try lab.expectOK(try await lab.busctlOverTCP(key: "ops-new", "call", "demo.greeter", "greet", #"{"name":"far"}"#))
            let refused = try await lab.busctlOverTCP(key: "ops", "list", "--timeout", "5")
            #expect(refused.exitCode == 1 && refused.standardError.contains("unauthorized"), "\(refused.standardError)")
            #expect(board.isRunning)
        }
    }

    @Test func aMotherboardWhoseKeyIsNotAllowedIsToldWhyAndServesNothingThere() async throws {
        try await NetworkLab.with { lab in
            _ = try await lab.startParent(manifest: Self.parentManifest, policy: Self.policy)
            let edge = try await lab.startEdge(manifest: Self.edgeManifest, key: "stranger")
            #expect(
                try await eventually(timeout: .seconds(20), checkingEvery: .milliseconds(100)) {
                    edge.standardError.contains("refused this client's key: it is not in its allow-list")
                }, "\(edge.standardError.suffix(2000))")
            #expect(!(try await lab.busctlA("list").standardOutput.contains("sensor")))
            // What B's clients ask of the parent is answered, not left to time out.
            let up = try await lab.busctlB("call", "demo.greeter", "greet", #"{"name":"B"}"#, "--timeout", "10")
            #expect(up.exitCode == 1 && up.standardError.contains("unreachable"), "\(up.standardError)")
            // Its own scope works on its own host.
            try lab.expectOK(try await lab.busctlB("call", "sensor", "greet", #"{"name":"B"}"#, "--scope", "edge"))
        }
    }

    @Test func plaintextTCPIsOnlyForWhoAsksForIt() async throws {
        try await NetworkLab.with { lab in
            let endpoint = "tcp://\(lab.parentAddress):\(lab.port + 2)"
            let broker = try await lab.start(
                lab.binaries + "/motherboard",
                [
                    "--runtime-dir", "\(lab.directory)/plain", "--listen", endpoint, "--insecure", "--exit-with-parent", "--policy",
                    "\(lab.directory)/plain-policy.json",
                ], in: 0, runtime: "\(lab.directory)/plain")
            try await broker.waitForOutput("READY", timeout: .seconds(60))
            #expect(broker.standardError.contains("WARNING: --insecure"))
            // Plaintext peers are the principal `insecure`: with no policy, they may do nothing.
            let before = try await lab.run(lab.binaries + "/busctl", ["list", "--bus", endpoint, "--insecure"], in: 1)
            #expect(before.exitCode == 1 && before.standardError.contains("forbidden: 'insecure' may not control list"), "\(before.standardError)")
            try #"{"rules": [{"allow": ["control"], "principals": ["insecure"], "targets": ["list"]}]}"#.write(
                toFile: "\(lab.directory)/plain-policy.json", atomically: true, encoding: .utf8)
            #expect(
                try await eventually(timeout: .seconds(10)) {
                    try await lab.run(lab.binaries + "/busctl", ["list", "--bus", endpoint, "--insecure"], in: 1).exitCode == 0
                })
            let tree = try await lab.run(lab.binaries + "/busctl", ["tree", "--bus", endpoint, "--insecure"], in: 1)
            #expect(tree.exitCode == 1 && tree.standardError.contains("forbidden"), "\(tree.standardError)")
            // Without keys and without asking for plaintext: refused before anything is sent.
            let unasked = try await lab.run(lab.binaries + "/busctl", ["list", "--bus", endpoint], in: 1)
            #expect(unasked.exitCode == 2 && unasked.standardError.contains("BOARDBUS_INSECURE=1"), "\(unasked.standardError)")
            // A CURVE client of a plaintext broker fails its handshake, and says so.
            let curve = try await lab.run(
                lab.binaries + "/busctl",
                ["list", "--bus", endpoint, "--server-key", "\(lab.directory)/ops.key", "--client-key", "\(lab.directory)/ops.key"], in: 1)
            #expect(curve.exitCode == 1 && curve.standardError.contains("unauthorized"), "\(curve.standardError)")
        }
    }

    /// Issue: an allowed remote key could do everything: monitor every payload, remove flows,
    /// emit as any board, call any command, take an on-demand manifest board's id. Each is tried
    /// here with a key the policy did not grant it to, and refused `forbidden` naming the rule;
    /// what it was granted still works; a grant removed from the file stops the next request.
    @Test func aRemoteKeyMayDoOnlyWhatThePolicyGrants() async throws {
        let manifest = """
            {
              "scopes": [ { "name": "edge" }, { "name": "vault" }, { "name": "checkout" } ],
              "boards": [
                { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" },
                { "id": "vault.greeter", "executable": "BoardBusDemoGreeter", "scope": "vault", "start": "always" },
                { "id": "checkout.payment", "executable": "BoardBusDemoPayment", "scope": "checkout", "start": "on-demand" }
              ]
            }
            """
        try await NetworkLab.with { lab in
            let parent = try await lab.startParent(manifest: manifest, policy: Self.policy)
            try lab.expectOK(try await lab.busctlA("wait", "--timeout", "30"))
            func edge(_ arguments: String...) async throws -> ChildProcess.Result {
                try await lab.run(
                    lab.binaries + "/busctl",
                    arguments + [
                        "--bus", lab.parentEndpoint, "--server-key", "\(lab.stateA)/curve/server.pub", "--client-key", "\(lab.directory)/edge-b.key",
                    ],
                    in: 1)
            }
            func expectForbidden(_ result: ChildProcess.Result, _ words: String, sourceLocation: SourceLocation = #_sourceLocation) {
                #expect(result.exitCode == 1, "\(result.standardError)", sourceLocation: sourceLocation)
                #expect(
                    result.standardError.contains("forbidden: 'edge-b' may not \(words)"), "\(result.standardError)", sourceLocation: sourceLocation)
            }
            // Granted: greet. Not granted: another command of the same board, the vault, a monitor,
            // the flows, an output as another board, a dispatch.
            let greeted = try await edge("call", "demo.greeter", "greet", #"{"name":"edge"}"#)
            try lab.expectOK(greeted)
            expectForbidden(try await edge("call", "demo.greeter", "ping"), "call demo.greeter ping: denied by the default")
            expectForbidden(
                try await edge("call", "vault.greeter", "greet", #"{"name":"x"}"#, "--scope", "vault"),
                "call vault/vault.greeter greet: denied by rule 'nobody from afar in vault'")
            expectForbidden(try await edge("monitor", "--payload", "--count", "1", "--timeout", "5"), "monitor")
            expectForbidden(try await edge("flows"), "control flows")
            expectForbidden(try await edge("emit", "demo.greeter", "GreeterIO.Greeted", "{}"), "emit demo.greeter")
            expectForbidden(try await edge("dispatch", "orders", "cancel", "{}"), "dispatch orders")

            // The id of an on-demand manifest board that is not running: not B's to take, even
            // while it is stopped; the operator's activation starts the real one.
            let impostor = try await lab.start(
                lab.binaries + "/BoardBusDemoGreeter", [], in: 1,
                environment: [
                    "BOARDBUS_ADDRESS": lab.parentEndpoint, "BOARDBUS_SERVER_KEY": "\(lab.stateA)/curve/server.pub",
                    "BOARDBUS_CLIENT_KEY": "\(lab.directory)/edge-b.key", "BOARDBUS_BOARD_ID": "checkout.payment", "BOARDBUS_SCOPE": "checkout",
                ], runtime: "\(lab.directory)/impostor")
            #expect(
                try await eventually(timeout: .seconds(20)) { impostor.standardError.contains("forbidden") }, "\(impostor.standardError.suffix(2000))"
            )
            #expect(impostor.standardError.contains("may not serve checkout/checkout.payment"), "\(impostor.standardError.suffix(2000))")
            let status = try decode(BoardInfo.self, from: try await lab.busctlA("status", "checkout.payment", "--scope", "checkout", "--json"))
            #expect(status.host == nil && status.state != .running, "\(status)")
            // A child's key registering outside the scope it serves: refused too.
            let outside = try await lab.start(
                lab.binaries + "/BoardBusDemoGreeter", [], in: 1,
                environment: [
                    "BOARDBUS_ADDRESS": lab.parentEndpoint, "BOARDBUS_SERVER_KEY": "\(lab.stateA)/curve/server.pub",
                    "BOARDBUS_CLIENT_KEY": "\(lab.directory)/edge-b.key", "BOARDBUS_BOARD_ID": "far.greeter",
                ], runtime: "\(lab.directory)/outside")
            #expect(
                try await eventually(timeout: .seconds(20)) { outside.standardError.contains("may not register far.greeter") },
                "\(outside.standardError.suffix(2000))")

            // The operator asks the broker what the policy says, and sees it in force.
            let check = try await lab.busctlA("policy", "check", "--principal", "edge-b", "call", "demo.greeter", "greet")
            #expect(check.exitCode == 0 && check.standardOutput.contains("allowed: rule 'B's clients greet'"), "\(check.standardOutput)")
            let denied = try await lab.busctlA("policy", "check", "--principal", "edge-b", "call", "demo.greeter", "ping")
            #expect(denied.exitCode == 1 && denied.standardOutput.contains("denied: the default"), "\(denied.standardOutput)")
            #expect(try await lab.busctlA("policy", "show").standardOutput.contains("B serves edge"))
            // Counted, by principal and operation.
            let metrics = try await lab.busctlA("metrics").standardOutput
            #expect(
                metrics.contains(#"boardbus_denied_total{principal="edge-b",operation="call"} 2"#),
                "\(metrics.split(separator: "\n").filter { $0.contains("denied") })")
            // An operator's allowed control operation is in the audit log.
            try lab.expectOK(try await lab.busctlOverTCP(key: "ops", "list"))
            let audit = (try? String(contentsOfFile: "\(lab.stateA)/audit.log", encoding: .utf8)) ?? ""
            #expect(audit.contains("ops control list (rule 'operators look')"), "\(audit)")

            // A grant removed while the connections are open: the next request is refused, and
            // a board registered under a removed grant is dropped.
            _ = try await lab.startRemoteBoard(id: "far.greeter", key: "ops")
            var rules = try #require(try JSONSerialization.jsonObject(with: Data(Self.policy.utf8)) as? [String: Any])
            rules["rules"] = (rules["rules"] as? [[String: Any]])?.filter {
                !["B's clients greet", "operators' far boards"].contains($0["name"] as? String ?? "")
            }
            try JSONSerialization.data(withJSONObject: rules).write(to: URL(fileURLWithPath: lab.policyPath))
            #expect(
                try await eventually(timeout: .seconds(10)) {
                    try await edge("call", "demo.greeter", "greet", #"{"name":"edge"}"#).standardError.contains("forbidden")
                })
            #expect(
                try await eventually(timeout: .seconds(10)) { !(try await lab.busctlA("list").standardOutput.contains("far.greeter")) },
                "\(parent.standardError.suffix(2000))")
            // A file with a mistake is reported, and the policy in force stays.
            try #"{"rules": [{"allow": ["cal"], "principals": ["edge-b"]}]}"#.write(toFile: lab.policyPath, atomically: true, encoding: .utf8)
            #expect(
                try await eventually(timeout: .seconds(10)) { parent.standardError.contains("access policy not changed: the new file is invalid") })
            #expect(parent.standardError.contains("rules[0].allow[0]: unknown operation 'cal'"))
            let file = try await lab.run(lab.binaries + "/busctl", ["policy", "check", lab.policyPath], in: nil)
            #expect(file.exitCode == 2 && file.standardError.contains("unknown operation 'cal'"), "\(file.standardError)")
            try lab.expectOK(try await lab.busctlOverTCP(key: "ops", "list"))
        }
    }
}
