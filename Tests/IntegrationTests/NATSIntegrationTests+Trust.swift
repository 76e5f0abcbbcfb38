import BoardBusDemoDashboardIO
import BoardBusDemoGreeterIO
import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Synchronization
import Testing

// Whom the cluster is trusted as: credentials and TLS, each host kept to its own subjects, what
// a host or a stranger may publish, garbage and lies on the fleet's subjects.
extension NATSIntegrationTests {
    /// A motherboard proves itself to NATS with a user and password (each host its own, as the
    /// example server config has them), or checks the servers' TLS certificates against a CA: a
    /// refusal stops it at start with NATS's reason, and no password is ever written to its log.
    @Test func credentialsAndTLSAreUsedAndARefusalIsClear() async throws {
        let manifest = #"{ "boards": [] }"#
        let config = ReadmeTranscriptTests.repository.appendingPathComponent("fleet/nats/server.conf").path
        let passwords = [
            "BOARDBUS_NATS_HOST_A_PASSWORD": "s3cret-pw", "BOARDBUS_NATS_HOST_B_PASSWORD": "s3cret-pw-b", "BOARDBUS_NATS_CALLER_PASSWORD": "c",
        ]
        try await NATSCluster.with(nodes: 1, arguments: ["-c", config], environment: passwords) { nats in
            let fleet = "shop"
            let port = nats.ports[0]
            let refused = try await Self.startFailing(
                manifest: manifest, in: nats.directory, nats: "nats://host-a:wrong-pw@127.0.0.1:\(port)", fleet: fleet)
            #expect(refused.exitCode == 1)
            #expect(refused.standardError.contains("Authorization Violation"), "\(refused.standardError)")
            #expect(!refused.standardError.contains("wrong-pw") && refused.standardError.contains("host-a:***@"))
            let url = "nats://host-a:s3cret-pw@127.0.0.1:\(port)"
            let urlB = "nats://host-b:s3cret-pw-b@127.0.0.1:\(port)"
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments([url], fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: manifest, brokerArguments: try nats.arguments([urlB], fleet: fleet, host: "host-b")) { b in
                    _ = try await b.waitForListing("auth.login", host: "host-a")
                    #expect(!a.brokerLog.contains("s3cret-pw") && !b.brokerLog.contains("s3cret-pw"))
                    #expect(!a.brokerLog.contains("lets this motherboard's user publish as another host"))
                }
            }
        }
        try await NATSCluster.with(
            nodes: 1, arguments: ["--tls", "--tlscert", "{dir}/server.pem", "--tlskey", "{dir}/server.key"], scheme: "tls",
            prepare: Self.makeCertificates
        ) { nats in
            let fleet = uniqueFleetName()
            // Without the CA, the server's certificate is refused.
            let unchecked = try await Self.startFailing(manifest: manifest, in: nats.directory, nats: nats.url(0), fleet: fleet)
            #expect(unchecked.exitCode == 1)
            #expect(
                unchecked.standardError.lowercased().contains("ssl") || unchecked.standardError.lowercased().contains("certificate"),
                "\(unchecked.standardError)")
            let tls = try nats.arguments(fleet: fleet, host: "host-a") + ["--nats-tls-ca", "\(nats.directory)/ca.pem"]
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: tls) { a in
                // B's CA is the manifest's, a path relative to the manifest (both directories are in
                // the same temporary directory), under --nats on the command line.
                let relative = "../\(URL(fileURLWithPath: nats.directory).lastPathComponent)/ca.pem"
                let withCA = #"{ "boards": [], "nats": { "servers": ["nats://unused:1"], "tlsCA": "\#(relative)" } }"#
                try await TestFleet.with(manifest: withCA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await b.waitForListing("auth.login", host: "host-a")
                    #expect(try await b.busctl("call", "auth.login", "users").exitCode == 0)
                }
            }
        }
    }

    /// Issue (#62, 1–3): a plain NATS client published `auth.login`'s output and B ran its flow
    /// with the forged user; the example config's `caller` could subscribe to `_INBOX.>` (every
    /// answer of the fleet) and publish on a motherboard's inbox (answering its requests). With
    /// the example server config as printed, each motherboard is its own user: the flow runs for
    /// the real login across hosts, and the server refuses the caller every one of those, and
    /// refuses host-a's user host-b's output, announcement and withdrawal.
    @Test func theExampleServerConfigKeepsEachHostToItsOwnSubjects() async throws {
        let config = ReadmeTranscriptTests.repository.appendingPathComponent("fleet/nats/server.conf").path
        let caller = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/nats_caller.py").path
        let passwords = [
            "BOARDBUS_NATS_HOST_A_PASSWORD": "a-\(UInt32.random(in: 0...UInt32.max))", "BOARDBUS_NATS_HOST_B_PASSWORD": "b-pw",
            "BOARDBUS_NATS_CALLER_PASSWORD": "c-pw",
        ]
        try await NATSCluster.with(nodes: 1, arguments: ["-c", config], environment: passwords) { nats in
            let port = nats.ports[0]
            let urlA = "nats://host-a:\(passwords["BOARDBUS_NATS_HOST_A_PASSWORD"]!)@127.0.0.1:\(port)"
            let urlB = "nats://host-b:b-pw@127.0.0.1:\(port)"
            try await TestFleet.with(manifest: Self.dashboardHost, brokerArguments: try nats.arguments([urlA], fleet: "shop", host: "host-a")) { a in
                try await TestFleet.with(
                    manifest: Self.loginAndGreeterHost, brokerArguments: try nats.arguments([urlB], fleet: "shop", host: "host-b")
                ) { b in
                    _ = try await b.waitForListing("app.dashboard", host: "host-a")
                    _ = try await a.waitForListing("auth.login", host: "host-b")
                    #expect(a.brokerLog.contains("the NATS server keeps this motherboard to its host's subjects"), "\(a.brokerLog.suffix(2000))")
                    // The real login on B runs A's flow: the config lets the fleet do its work.
                    #expect(try await a.busctl("activate", "auth.login", #"{"username":"ann"}"#).exitCode == 0)
                    let shown = try await eventually(timeout: .seconds(10)) {
                        (try? await Self.dashboardUser(on: a)) == "ann"
                    }
                    #expect(shown)
                    let run = try await a.run(
                        "/usr/bin/python3",
                        arguments: [caller, "nats://127.0.0.1:\(port)", "shop", "c-pw", passwords["BOARDBUS_NATS_HOST_A_PASSWORD"]!])
                    #expect(run.exitCode == 0, "\(run.standardError)")
                    #expect(run.standardOutput.contains(#""greet": "ok""#), "\(run.standardOutput)")
                    #expect(run.standardOutput.contains(#""heard": []"#), "\(run.standardOutput)")
                    let refusals = [
                        "subscription to \\\"_INBOX.>\\\"", "publish to \\\"boardbus.shop.announce.caller\\\"",
                        "publish to \\\"boardbus.shop.action.caller", "publish to \\\"boardbus.shop.output.host-b",
                        "publish to \\\"_INBOX.boardbus.shop.host-a", "publish to \\\"boardbus.shop.announce.host-b\\\"",
                        "publish to \\\"boardbus.shop.withdraw.host-b\\\"",
                    ]
                    for refusal in refusals {
                        #expect(
                            run.standardOutput.lowercased().contains("permissions violation for \(refusal)".lowercased()),
                            "\(refusal): \(run.standardOutput)")
                    }
                    // Both forged outputs (the caller's, host-a's user's) were refused: the dashboard
                    // still shows ann; the forged board is nowhere, B's boards still listed on A.
                    #expect(try await Self.dashboardUser(on: a) == "ann")
                    #expect(try await a.listedBoards().allSatisfy { $0.id.rawValue != "forged.board" })
                    #expect(try await b.listedBoards().allSatisfy { $0.id.rawValue != "forged.board" })
                    #expect(try await a.listedBoards().contains { $0.id.rawValue == "auth.login" })
                    let seen = try decode(GreeterIO.Seen.self, from: try await b.busctl("call", "demo.greeter", "stats", "--json"))
                    #expect(seen.announcements.isEmpty && seen.greetings == 1)
                }
            }
        }
    }

    /// A server that lets a motherboard's user publish as another host (`publish: ">"`) is a
    /// misconfigured cluster: the motherboard that finds it out leaves, loudly, and is not a
    /// member; one on a server that asks no credentials says that anyone can speak for any host.
    @Test func aServerThatLetsAHostSpeakForAnotherIsLeftLoudly() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("nats-open-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = "\(directory)/open.conf"
        try """
        authorization { users: [ { user: everyone, password: pw, permissions: { publish: ">", subscribe: ">" } } ] }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        try await NATSCluster.with(nodes: 1, arguments: ["-c", config]) { nats in
            let url = "nats://everyone:pw@127.0.0.1:\(nats.ports[0])"
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments([url], fleet: "shop", host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments([url], fleet: "shop", host: "host-b")) { b in
                    let left = try await eventually(timeout: .seconds(20)) {
                        a.brokerLog.contains("lets this motherboard's user publish as another host")
                            && b.brokerLog.contains("lets this motherboard's user publish as another host")
                    }
                    #expect(left, "\(a.brokerLog.suffix(2000))")
                    #expect(a.brokerLog.contains("critical"))
                    // Neither joined: each serves its own boards and lists none of the other's.
                    try await Task.sleep(for: .seconds(2))
                    #expect(try await a.listedBoards().map(\.id.rawValue) == ["auth.login"])
                    #expect(try await b.listedBoards().allSatisfy { $0.host == nil })
                    #expect(try await a.busctl("call", "auth.login", "users").exitCode == 0)
                }
            }
        }
        try await NATSCluster.with(nodes: 1) { nats in
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: uniqueFleetName(), host: "host-a")) { a in
                #expect(try await eventually(timeout: .seconds(20)) { a.brokerLog.contains("the NATS server asks no credentials") })
            }
        }
    }

    /// Issue (#62, 1): on any server, an output or a change is taken only under the token of the
    /// host that serves its board, and an announcement or withdrawal only on its own host's
    /// subject. A plain client publishes `auth.login`'s output as it was written before hosts
    /// were named and under a host that does not serve it, announces a board as host-b on
    /// another host's subject, and withdraws host-b: A's flow does not run, nothing is taken in,
    /// host-b's boards stay. Answering A's request beside host-b, on its reply subject without its
    /// random token and with others (a counting number was all the subject had), it is not heard.
    @Test func outputsAnnouncementsAndWithdrawalsAreTakenOnlyFromTheirHost() async throws {
        let forger = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/nats_forger.py").path
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.dashboardHost, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.loginAndGreeterHost, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await a.waitForListing("auth.login", host: "host-b")
                    let forging = try await ChildProcess(
                        executable: "/usr/bin/python3", arguments: [forger, nats.urls[0], fleet], environment: a.environment, directory: a.directory,
                        name: "nats-forger")
                    try await forging.waitForOutput("ready", timeout: .seconds(20))
                    // Its answers, on the reply subject without the token and with others, are nobody's.
                    let users = try await a.busctl("call", "auth.login", "users", "--json")
                    #expect(users.exitCode == 0 && !users.standardOutput.contains("mallory"), "\(users.standardOutput) \(users.standardError)")
                    let run = try await forging.wait(timeout: .seconds(60))
                    #expect(run.exitCode == 0 && run.standardOutput.contains("forged answers 3"), "\(run.standardOutput) \(run.standardError)")
                    try await Task.sleep(for: .seconds(1))
                    let user = try await Self.dashboardUser(on: a)
                    #expect(user == nil, "the forged login reached the dashboard: \(user ?? "")")
                    #expect(try await a.listedBoards().allSatisfy { $0.id.rawValue != "forged.board" })
                    #expect(a.brokerLog.contains("an announcement of host 'host-b' on"), "\(a.brokerLog.suffix(2000))")
                    #expect(a.brokerLog.contains("announced by two hosts"), "\(a.brokerLog.suffix(2000))")
                    // host-b's withdrawal by another was ignored: its board stays past its expiry.
                    try await Task.sleep(for: .seconds(4))
                    #expect(try await a.listedBoards().contains { $0.id.rawValue == "auth.login" && $0.host == "host-b" })
                    // The real output still runs the flow.
                    #expect(try await a.busctl("activate", "auth.login", #"{"username":"ann"}"#).exitCode == 0)
                    #expect(
                        try await eventually(timeout: .seconds(10)) {
                            (try? await Self.dashboardUser(on: a)) == "ann"
                        })
                    _ = b
                }
            }
        }
    }

    /// A motherboard that is expected not to start: what it said, once it has exited.
    static func startFailing(manifest: String, in directory: String, nats: String, fleet: String) async throws -> ChildProcess.Result {
        let path = "\(directory)/failing-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try manifest.write(toFile: "\(path)/fleet.json", atomically: true, encoding: .utf8)
        let child = try await ChildProcess(
            executable: "\(try TestFleet.locateBinaries())/motherboard",
            arguments: [
                "--manifest", "\(path)/fleet.json", "--runtime-dir", "\(path)/run", "--state-dir", "\(path)/state", "--exit-with-parent", "--nats",
                nats,
                "--nats-fleet", fleet,
            ], environment: ProcessInfo.processInfo.environment, directory: path, name: "motherboard")
        return try await child.wait(timeout: .seconds(30))
    }

    /// A CA, and a certificate it signs for 127.0.0.1 (`server.pem`, `server.key`), with openssl.
    static func makeCertificates(in directory: String) async throws {
        let file = { (name: String) in "\(directory)/\(name)" }
        let steps = [
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=BoardBus test CA", "-keyout", file("ca.key"), "-out",
                file("ca.pem"),
            ],
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", file("server.key"), "-out", file("server.csr")],
            [
                "x509", "-req", "-in", file("server.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key"), "-CAcreateserial", "-days", "2", "-out",
                file("server.pem"), "-extfile", file("san.cnf"),
            ],
        ]
        try "subjectAltName = IP:127.0.0.1\n".write(toFile: "\(directory)/san.cnf", atomically: true, encoding: .utf8)
        for step in steps {
            let result = try await ChildProcess(
                executable: "/usr/bin/openssl", arguments: step, environment: [:], directory: directory,
                name: "openssl-\(UInt32.random(in: 0...UInt32.max))"
            ).wait(timeout: .seconds(60))
            guard result.exitCode == 0 else { throw BusError(.transport, "openssl \(step[0]) failed: \(result.standardError)") }
        }
    }

    /// A NATS client that publishes garbage on the fleet's subjects (announcements that are not,
    /// bad tokens, timeouts like `nan` and `1e20`, headers past their limits, a flood of boards)
    /// gets typed errors or nothing, and the motherboard goes on serving.
    @Test func garbageOnTheFleetsSubjectsIsRefusedAndTheMotherboardGoesOn() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/nats_hostile.py").path
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                // The script waits until the board answers before it attacks.
                let run = try await b.run("/usr/bin/python3", arguments: [script, nats.url(0), fleet], timeout: .seconds(60))
                #expect(run.exitCode == 0, "\(run.standardError)")
                var statuses: [String: String] = [:]
                for line in run.standardOutput.split(separator: "\n") {
                    guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], let name = object["name"] as? String
                    else { continue }
                    statuses[name] = object["status"] as? String
                }
                #expect(statuses["action with a bad token"] == "malformed")
                #expect(statuses["unknown board"] == "noResponders")
                #expect(statuses["bad token"] == "noResponders")
                #expect(statuses["action kind"] == "malformed")
                #expect(statuses["store watch"] == "badArgument")
                for timeout in ["nan", "inf", "-0", "1e20", "4294967296", "-1", ""] { #expect(statuses["timeout \(timeout)"] == "ok", "\(timeout)") }
                #expect(statuses["wrong payload"] == "typeMismatch")
                #expect(statuses["not json"] == "typeMismatch")
                #expect(statuses["headers past their limits"] == "ok")
                #expect(statuses["unknown content type"] == "unsupportedContentType")
                // Fields the header could not carry are left out, the request goes on.
                #expect(statuses["control bytes in the content type"] == "ok")
                #expect(statuses["a trace state without its trace"] == "ok")
                #expect(statuses["answers on the fleet's subjects"] == "0")
                #expect(statuses.count == 19, "\(run.standardOutput)")
                // Nothing the announcements named was taken in; the flood was refused and said so.
                let listed = try await b.listedBoards().map(\.id.rawValue)
                #expect(listed.sorted() == ["demo.annotations", "demo.greeter"], "\(listed)")
                #expect(b.brokerLog.contains("more than 4096 boards"))
                #expect(try await b.busctl("call", "demo.greeter", "greet", #"{"name":"after"}"#).exitCode == 0)
            }
        }
    }

    /// A NATS client that passes for a motherboard and answers actions with a count past any
    /// fleet's (2^63 - 1, to overflow the sum) is believed up to a bound (2^20): the sender's
    /// delivery is counted, nothing overflows, the motherboards go on.
    @Test func anActionAnswerThatLiesAboutItsCountCannotOverflowTheDelivery() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/nats_liar.py").path
        try await NATSCluster.with(nodes: 1) { nats in
            let fleet = uniqueFleetName()
            try await TestFleet.with(manifest: Self.hostA, brokerArguments: try nats.arguments(fleet: fleet, host: "host-a")) { a in
                try await TestFleet.with(manifest: Self.hostB, brokerArguments: try nats.arguments(fleet: fleet, host: "host-b")) { b in
                    _ = try await b.waitForListing("auth.login", host: "host-a")
                    let liar = try await ChildProcess(
                        executable: "/usr/bin/python3", arguments: [script, nats.url(0), fleet], environment: b.environment, directory: b.directory,
                        name: "nats-liar")
                    do {
                        try await liar.waitForOutput("READY", timeout: .seconds(20))
                        let believed = await eventually(timeout: .seconds(20)) { b.brokerLog.contains("host=liar") }
                        try #require(believed, "B did not hear the liar's announcement")
                        for _ in 0..<3 {
                            let action = try await b.busctl("action", "app.announce", #"{"text":"counted"}"#, "--json")
                            #expect(action.exitCode == 0, "\(action.standardError)")
                            // B's greeter, A's none, the liar's lie cut to the bound.
                            #expect(try decode(Delivery.self, from: action).delivered == 1 + (1 << 20), "\(action.standardOutput)")
                        }
                        await liar.stop()
                    } catch {
                        await liar.stop()
                        throw error
                    }
                    #expect(try await b.busctl("call", "demo.greeter", "greet", #"{"name":"after"}"#).exitCode == 0)
                    #expect(try await a.busctl("call", "demo.greeter", "greet", #"{"name":"after"}"#).exitCode == 0)
                }
            }
        }
    }
}
