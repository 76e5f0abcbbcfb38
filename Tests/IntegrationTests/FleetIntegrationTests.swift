import BusCore
import BoardKit
import BoardKitTesting
import BoardBusDemoDashboardIO
import Foundation
import BoardBusDemoGreeterIO
import BoardBusDemoLoginIO
import Testing

/// The four message families and busctl, between real processes over real ipc:// sockets.
@Suite("Fleet end to end", .serialized, .timeLimit(.minutes(3)))
struct FleetIntegrationTests {
    @Test func registrationShowsInBusctlList() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let result = try await fleet.busctl("list", "--json")
            #expect(result.exitCode == 0, "\(result.standardError)")
            let list = try decode(BoardList.self, from: result)
            #expect(list.boards.map(\.id) == ["app.dashboard", "auth.login", "demo.greeter"])
            #expect(list.waitingFor.isEmpty)
            let greeter = try #require(list.boards.first { $0.id == GreeterIO.id })
            #expect(greeter.pid == fleet.pid(of: GreeterIO.id))
            #expect(greeter.commands == ["greet", "ping", "stats"])
            #expect(greeter.actions == ["app.announce", "auth.userLoggedIn"])
            #expect(greeter.inputType == "Welcome")

            let text = try await fleet.busctl("list")
            #expect(text.standardOutput.contains("demo.greeter"))
            let status = try await fleet.busctl("status", "demo.spare", "--json")
            #expect(try decode(BoardInfo.self, from: status).state == .stopped)
        }
    }

    /// Issue: a client had to guess store names from file names and action payloads from rounds
    /// of `typeMismatch`. The owner describes its stores in its registration: `busctl stores`
    /// lists every store with its owner, actions and state, and `introspect` the payload of each
    /// action, in every scope.
    @Test func storesAreListedWithTheirOwnersActionsAndPayloads() async throws {
        let manifest = """
            { "scopes": [ { "name": "eu" } ],
              "boards": [
                { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "always" },
                { "id": "demo.comments", "executable": "BoardBusDemoComments", "scope": "eu", "start": "always" },
                { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" } ] }
            """
        try await TestFleet.with(manifest: manifest) { fleet in
            let list = try decode(StoreList.self, from: try await fleet.busctl("stores", "--json"))
            #expect(list.stores.map { "\($0.scope.name)/\($0.store)@\($0.board)" } == ["/comments@demo.comments", "eu/comments@demo.comments"])
            #expect(list.stores.allSatisfy { $0.actions == ["delete", "reply"] && $0.state?.contains("comments") == true }, "\(list)")
            let table = try await fleet.busctl("stores")
            #expect(table.standardOutput.contains("STORE") && table.standardOutput.contains("delete, reply"), "\(table.standardOutput)")
            let introspected = try await fleet.busctl("introspect", "demo.comments")
            #expect(introspected.standardOutput.contains("  store comments  state {"), "\(introspected.standardOutput)")
            #expect(
                introspected.standardOutput.contains("    dispatch reply  {content: string, parent: integer, postID: integer}"),
                "\(introspected.standardOutput)")
        }
    }

    /// busctl's store verbs: a dispatch whose payload does not fit says what the action takes;
    /// `--retries` sends it again with its id until its store is there (here an on-demand owner
    /// that is not running until an operator restarts it a second later), applied once; a watch
    /// stops after `--for` seconds; an owner without queries says nothing when other boards leave.
    @Test func busctlStoreVerbs() async throws {
        let manifest = """
            { "boards": [
                { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "on-demand" },
                { "id": "demo.annotations", "executable": "BoardBusDemoAnnotationFilter", "start": "always" },
                { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" } ] }
            """
        try await TestFleet.with(manifest: manifest) { fleet in
            let wrong = try await fleet.busctl("dispatch", "annotationFilter", "toggle", #"{"filter":1}"#)
            #expect(wrong.exitCode == 1 && wrong.standardError.contains("'toggle' expects {filter: string}"), "\(wrong.standardError)")

            let reply = #"{"postID":1,"parent":0,"content":"late but once"}"#
            async let retried = fleet.busctl(
                "dispatch", "comments", "reply", reply, "--id", "late-1", "--retries", "--timeout", "30", timeout: .seconds(60))
            try await Task.sleep(for: .seconds(1))
            #expect(try await fleet.busctl("restart", "demo.comments").exitCode == 0)
            let result = try await retried
            #expect(result.exitCode == 0 && result.standardOutput.contains("reply applied to comments as change 1"), "\(result.standardError)")
            #expect(result.standardError.contains("noSuchStore (attempt 1); sending it again with id late-1"), "\(result.standardError)")
            let again = try await fleet.busctl("dispatch", "comments", "reply", reply, "--id", "late-1", "--retries")
            #expect(again.standardOutput.contains("already applied to comments as change 1"), "\(again.standardOutput)")

            let started = ContinuousClock.now
            let watched = try await fleet.busctl("state", "annotationFilter", "--watch", "--for", "1")
            #expect(watched.exitCode == 0 && watched.standardOutput.contains(#""sequence":0"#), "\(watched.standardError)")
            #expect(started.duration(to: .now) < .seconds(20))

            // A board leaves: the owners of stores without queries say nothing about it.
            let greeter = try #require(fleet.pid(of: "demo.greeter"))
            kill(greeter, SIGKILL)
            _ = try await eventually(timeout: .seconds(10)) { fleet.pid(of: "demo.greeter") != greeter }
            try await Task.sleep(for: .milliseconds(500))
            let log = (try? String(contentsOfFile: "\(fleet.address.runtimeDirectory)/logs/demo.annotations.log", encoding: .utf8)) ?? "no log"
            #expect(log != "no log" && !log.contains("takes no queries"), "\(log.suffix(2000))")
        }
    }

    /// `tree --dot` and `flows --dot` are Graphviz: every name quoted (a flow's output type with
    /// a quote and a backslash stays inside its label), braces balanced, stopped boards dashed.
    @Test func theFleetAsAGraph() async throws {
        let manifest = #"""
            { "scopes": [ { "name": "eu" } ],
              "boards": [
                { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" },
                { "id": "app.dashboard", "executable": "BoardBusDemoDashboard", "start": "always" },
                { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "scope": "eu", "start": "on-demand" } ],
              "flows": [ { "from": "auth.login", "output": "Lo\"gin\\Ok", "to": "app.dashboard" } ] }
            """#
        try await TestFleet.with(manifest: manifest) { fleet in
            let tree = try await fleet.busctl("tree", "--dot")
            #expect(tree.exitCode == 0, "\(tree.standardError)")
            let text = tree.standardOutput
            #expect(text.hasPrefix("digraph fleet {") && text.hasSuffix("}\n"))
            #expect(text.filter { $0 == "{" }.count == text.filter { $0 == "}" }.count)
            #expect(text.contains(#""/auth.login" -> "/app.dashboard" [label="Lo\"gin\\Ok"];"#), "\(text)")
            #expect(text.contains(#""eu/demo.greeter" [label="demo.greeter\nstopped", style=dashed"#), "\(text)")
            #expect(text.contains(#"subgraph "cluster_eu" {"#))
            let flows = try await fleet.busctl("flows", "--dot")
            #expect(flows.standardOutput.contains(#"[label="Lo\"gin\\Ok"]"#) && !flows.standardOutput.contains("action:"), "\(flows.standardOutput)")
        }
    }

    @Test func aCommandRoundTripsThroughBusctlCall() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let result = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#, "--json")
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(try decode(GreeterIO.Greeting.self, from: result) == GreeterIO.Greeting(message: "Hello, Ann!"))

            // The same through the SDK with the typed interface library.
            let greeting = try await fleet.withClient { client in
                try await client.interact(with: GreeterIO.id, GreeterIO.Greet(name: "Bo"))
            }
            #expect(greeting.message == "Hello, Bo!")

            // A synchronous handler answers on the board's socket thread; many in flight at once.
            let pongs = try await fleet.withClient { client in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for sequence in 0..<50 {
                        group.addTask { try await client.interact(with: GreeterIO.id, GreeterIO.Ping(sequence: sequence)).sequence }
                    }
                    return try await group.reduce(into: Set<Int>()) { $0.insert($1) }
                }
            }
            #expect(pongs == Set(0..<50))
            let wrongPing = try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":"one"}"#)
            #expect(wrongPing.standardError.hasPrefix("busctl: typeMismatch:"))

            // Board-to-board interaction: the dashboard asks the greeter.
            try await fleet.withClient { client in
                try await client.activate(DashboardIO.destination, with: LoginIO.LoginSucceeded(username: "cy", token: "t"))
                let greeted = try await client.interact(with: DashboardIO.id, DashboardIO.GreetUser())
                #expect(greeted.message == "Hello, cy!")
            }
        }
    }

    @Test func anOutputFlowsFromLoginToDashboard() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let emitted = try await fleet.busctl("emit", "auth.login", "LoginSucceeded", #"{"username":"dee","token":"x"}"#, "--json")
            #expect(emitted.exitCode == 0, "\(emitted.standardError)")
            #expect(try decode(Delivery.self, from: emitted).delivered == 1)
            let shown = try await eventually {
                try await fleet.withClient { try await $0.interact(with: DashboardIO.id, DashboardIO.Show()) }.user == "dee"
            }
            #expect(shown)

            // An output no flow listens to is acknowledged with 0 deliveries, not an error.
            let unheard = try await fleet.busctl("emit", "demo.greeter", "Anything", "--json")
            #expect(unheard.exitCode == 0)
            #expect(try decode(Delivery.self, from: unheard).delivered == 0)
        }
    }

    @Test func activatingLoginRunsTheWholeChain() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            // busctl activate → login board → sendAction + sendToMotherboard → flow → dashboard
            // → nextToBoard → greeter. The spaces, tab and line break around the name are not part
            // of it.
            let result = try await fleet.busctl("activate", "auth.login", #"{"username":" \t eve \n"}"#)
            #expect(result.exitCode == 0, "\(result.standardError)")
            let reached = try await eventually {
                let seen = try await fleet.withClient { try await $0.interact(with: GreeterIO.id, GreeterIO.Stats()) }
                return seen.welcomed == ["eve"] && seen.loginsSeen == ["eve"]
            }
            #expect(reached)
            let view = try await fleet.withClient { try await $0.interact(with: DashboardIO.id, DashboardIO.Show()) }
            #expect(view == DashboardIO.View(user: "eve", activations: 1))
        }
    }

    @Test func nextToBoardActivatesTheTarget() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let result = try await fleet.busctl("activate", "app.dashboard", "--type", "LoginSucceeded", #"{"username":"fay","token":"t"}"#)
            #expect(result.exitCode == 0, "\(result.standardError)")
            let welcomed = try await eventually {
                try await fleet.withClient { try await $0.interact(with: GreeterIO.id, GreeterIO.Stats()) }.welcomed == ["fay"]
            }
            #expect(welcomed)
        }
    }

    @Test func anActionReachesItsSubscriber() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let result = try await fleet.busctl("action", "app.announce", #"{"text":"release 1.0"}"#, "--json")
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(try decode(Delivery.self, from: result).delivered == 1)
            let heard = try await eventually {
                try await fleet.withClient { try await $0.interact(with: GreeterIO.id, GreeterIO.Stats()) }.announcements == ["release 1.0"]
            }
            #expect(heard)
        }
    }

    @Test func errorsAreTypedAndBusctlExitsNonZero() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let unknown = try await fleet.busctl("call", "no.such", "greet")
            #expect(unknown.exitCode != 0)
            #expect(unknown.standardError.hasPrefix("busctl: noSuchBoard:"))
            #expect(unknown.standardError.split(separator: "\n").count == 1)

            // A call to an on-demand board that is not running starts it and is answered.
            let started = try await fleet.busctl("call", "demo.spare", "greet", #"{"name":"spare"}"#)
            #expect(started.exitCode == 0, "\(started.standardError)")
            #expect(started.standardOutput.contains("Hello, spare!"))
            #expect(try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.spare", "--json")).state == .running)

            let badJSON = try await fleet.busctl("call", "demo.greeter", "greet", "{nope")
            #expect(badJSON.exitCode == 2)
            #expect(badJSON.standardError.hasPrefix("busctl: badArgument:"))

            let wrongType = try await fleet.busctl("call", "demo.greeter", "greet", #"{"nom":"x"}"#)
            #expect(wrongType.exitCode != 0)
            #expect(wrongType.standardError.hasPrefix("busctl: typeMismatch:"))

            let wrongInput = try await fleet.busctl("activate", "demo.greeter", "--type", "LoginSucceeded", "{}")
            #expect(wrongInput.standardError.contains("expects input Welcome, received LoginSucceeded"))

            let unknownCommand = try await fleet.busctl("call", "demo.greeter", "dance")
            #expect(unknownCommand.standardError.hasPrefix("busctl: unknownCommand:"))

            // Spaces, a tab and line breaks: no name at all.
            let failing = try await fleet.busctl("activate", "auth.login", #"{"username":" \t\r\n "}"#)
            #expect(failing.standardError.hasPrefix("busctl: badArgument: username must not be empty"))

            // The broker is unharmed by all of it.
            #expect(try await fleet.busctl("list").exitCode == 0)
        }
    }

    @Test func busctlFailsFastWhenNoBrokerRuns() async throws {
        try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
            let result = try await fleet.busctl("list", "--bus", "ipc://\(fleet.directory)/nobody.sock")
            #expect(result.exitCode == 1)
            #expect(result.standardError.hasPrefix("busctl: brokerNotRunning:"))

            let timedOut = try await fleet.busctl("wait", "never.comes", "--timeout", "0.5")
            #expect(timedOut.exitCode == 1)
            #expect(timedOut.standardError.hasPrefix("busctl: timeout:"))
        }
    }

    /// `boardbus-bench`'s parts are subcommands, and the mode flags of the release before still
    /// reach them, with their options under the new names (a script comparing an old build with a
    /// new one passes the old flags to both).
    @Test func benchPartsAreSubcommandsAndTheOldModeFlagsStillReachThem() async throws {
        try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
            let new = try await fleet.run("boardbus-bench", arguments: ["count-header-bytes"])
            let old = try await fleet.run("boardbus-bench", arguments: ["--count-header-bytes"])
            #expect(new.exitCode == 0 && old.exitCode == 0, "\(new.standardError) \(old.standardError)")
            #expect((Int(new.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 18)
            #expect(old.standardOutput == new.standardOutput)
            #expect(old.standardError.contains("is now a subcommand: boardbus-bench count-header-bytes"))
            let logic = try await fleet.run("boardbus-bench", arguments: ["--broker-logic", "200"])
            #expect(logic.exitCode == 0 && logic.standardOutput.contains("routed in place:"), "\(logic.standardError)")
            // `--load-clients` reaches `load` as `--clients`: the run gets as far as its own check.
            let load = try await fleet.run("boardbus-bench", arguments: ["--load", "1", "--load-clients", "2", "--traced", "--raw-clients"])
            #expect(load.exitCode != 0)
            #expect(load.standardError.contains("--raw-clients sends plain untraced payloads"), "\(load.standardError)")
            let unknown = try await fleet.run("boardbus-bench", arguments: ["latency", "10", "--load-window", "3"])
            #expect(unknown.exitCode != 0 && unknown.standardError.contains("Unknown option '--load-window'"))
        }
    }

    /// Each subcommand names itself (not derived from its type's name at run time): the names are
    /// the ones the guides and PROTOCOL.md use, and each one parses under its name (its own help, not
    /// the root's, which ArgumentParser prints with exit 0 for an unknown name followed by --help).
    @Test func busctlSubcommandsAnswerToTheirDocumentedNames() async throws {
        try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
            let names = [
                "list", "status", "restart", "introspect", "tree", "flows", "call", "activate", "emit", "action", "dispatch", "state", "query",
                "stores",
                "dead-letters", "wait",
                "monitor",
                "metrics", "keys", "policy",
            ]
            let help = try await fleet.busctl("--help")
            #expect(help.exitCode == 0, "\(help.standardError)")
            #expect(Self.subcommands(inHelp: help.standardOutput) == names)
            let keysHelp = try await fleet.busctl("keys", "--help")
            #expect(keysHelp.exitCode == 0, "\(keysHelp.standardError)")
            #expect(Self.subcommands(inHelp: keysHelp.standardOutput) == ["server", "new", "show", "check"])
            let policyHelp = try await fleet.busctl("policy", "--help")
            #expect(Self.subcommands(inHelp: policyHelp.standardOutput) == ["check", "show"])
            for command in names.map({ [$0] }) + [["keys", "show"], ["keys", "check"], ["policy", "check"], ["policy", "show"]] {
                let result = try await fleet.run("busctl", arguments: command + ["--help"])
                #expect(result.exitCode == 0, "\(command): \(result.standardError)")
                #expect(result.standardOutput.contains("USAGE: busctl \(command.joined(separator: " "))"), "\(command): \(result.standardOutput)")
            }
        }
    }

    /// The names listed under SUBCOMMANDS: in a help text (an entry's line starts with two spaces
    /// and the name; its wrapped abstract continues further in).
    static func subcommands(inHelp help: String) -> [String] {
        let lines = help.components(separatedBy: "\n").drop { $0 != "SUBCOMMANDS:" }.dropFirst().prefix { !$0.isEmpty }
        return lines.filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") }.compactMap { $0.split(separator: " ").first.map(String.init) }
    }
}
