import BoardKit
import BoardKitTesting
import Foundation
import Testing

/// The walkthrough guide (docs/guide/walkthrough.md, README links to it) is one real run: every
/// `$ busctl …` line of its `console` blocks runs, in order, against one example fleet
/// (`fleet/fleet.json`), and what the guide
/// shows must be what it prints, with pids renamed in order of appearance and uptimes blanked (so
/// a pid shown twice must be the same process both times, and every count comes from this run).
/// Flow ids are the one thing left to chance (boards register their run-time flows as their
/// processes come up, in no fixed order): `busctl flows` is compared as a set of rows without the
/// id column, and `#N` flow ids are blanked. In monitor lines, clock times, the routing ids of
/// connections that are not boards (`:0a1b2c3d4e`) and round-trip times are blanked. A command
/// ending in `&` runs in the background (a monitor): the walkthrough goes on once it has said
/// "Monitoring", and it is stopped at the end.
///
/// `BOARDBUS_UPDATE_README=1 swift test --filter ReadmeTranscript` writes this run's output into
/// the guide instead of comparing, for a person to review with `git diff`.
@Suite("README transcript", .serialized, .timeLimit(.minutes(3)))
struct ReadmeTranscriptTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    /// The guide whose transcript this runs.
    static let walkthrough = "docs/guide/walkthrough.md"

    /// One `$ …` line of a console block and the lines the README shows after it.
    struct Step {
        var command: String
        /// Index of the README line of the command; its output follows up to `end` (exclusive).
        var line: Int
        var end: Int
        var shown: [String]
        /// Commands the README abridges, and those it shows without output, are run, not compared.
        var compared: Bool
        /// Whether the command only reads, so that it may be repeated until the fleet has settled
        /// (an on-demand board that is still working, a flow that is still running).
        var repeatable: Bool
        /// Started in the background (`… &`), not waited for.
        var background = false
    }

    static func steps(in lines: [String]) -> [Step] {
        var steps: [Step] = []
        var inConsole = false
        for (index, line) in lines.enumerated() {
            if line.hasPrefix("```") {
                if inConsole, var last = steps.last, last.end == -1 {
                    last.end = index
                    steps[steps.count - 1] = last
                }
                inConsole = line == "```console"
                continue
            }
            guard inConsole, line.hasPrefix("$ ") else { continue }
            if var last = steps.last, last.end == -1 {
                last.end = index
                steps[steps.count - 1] = last
            }
            let text = String(line.dropFirst(2))
            let (command, comment) = splitComment(text)
            guard command.hasPrefix("busctl ") else { continue }
            let background = command.hasSuffix("&")
            steps.append(
                Step(
                    command: background ? String(command.dropLast()).trimmingCharacters(in: .whitespaces) : command, line: index, end: -1,
                    shown: [], compared: !comment.contains("(abridged)") && !background, repeatable: isReadOnly(command), background: background))
        }
        for index in steps.indices {
            var shown = Array(lines[(steps[index].line + 1)..<steps[index].end])
            while shown.last?.trimmingCharacters(in: .whitespaces).isEmpty == true { shown.removeLast() }
            steps[index].shown = shown
            if shown.isEmpty { steps[index].compared = false }
        }
        return steps
    }

    /// A command and its trailing `# comment` (two spaces or more before the `#`).
    static func splitComment(_ text: String) -> (String, String) {
        guard let range = text.range(of: #"\s{2,}#"#, options: .regularExpression) else { return (text, "") }
        return (String(text[..<range.lowerBound]), String(text[range.upperBound...]))
    }

    static func isReadOnly(_ command: String) -> Bool {
        let words = command.split(separator: " ").map(String.init)
        guard words.count > 1 else { return false }
        if ["list", "tree", "flows", "status", "introspect", "wait", "metrics"].contains(words[1]) { return true }
        if words[1] == "monitor" { return words.contains("--input") }
        if words[1] == "state" { return !words.contains("--watch") }
        return words[1] == "call" && words.count > 3 && ["show", "stats", "recorded", "count"].contains(words[3])
    }

    /// Pids (numbers of 4 digits or more) renamed in order of appearance, uptimes blanked, runs of
    /// spaces (table alignment) made one.
    static func normalized(_ lines: [String], pids: inout [String: String]) -> [String] {
        lines.map { line in
            // Where busctl prints pids: the second column of `list`, and "pid N" in tree, status
            // and introspect.
            var result = ""
            var rest = Substring(line)
            while let match = rest.firstMatch(of: #/(?:^\S+\s+(?=\d+\s)|pid )(\d+)\b/#) {
                let pid = String(match.output.1)
                if pids[pid] == nil { pids[pid] = "PID\(pids.count + 1)" }
                result += rest[..<match.output.1.startIndex] + pids[pid]!
                rest = rest[match.output.1.endIndex...]
            }
            result += rest
            result = result.replacingOccurrences(of: #"\b\d{2}:\d{2}:\d{2}\.\d{6}\b"#, with: "TIME", options: .regularExpression)
            result = result.replacingOccurrences(of: #"(?<=\s|^):[0-9a-f]{10}\b"#, with: ":CLIENT", options: .regularExpression)
            result = result.replacingOccurrences(of: #"\b\d+(µs|\.\dms)(?=\s|$)"#, with: "RTT", options: .regularExpression)
            result = result.replacingOccurrences(of: #"\b\d+\.\d+s\b"#, with: "UPTIME", options: .regularExpression)
            result = result.replacingOccurrences(of: #"#\d+\b"#, with: "#N", options: .regularExpression)
            return result.replacingOccurrences(of: #" {2,}"#, with: " ", options: .regularExpression)
                .trimmingCharacters(in: .whitespaces)
        }
    }

    /// A `busctl flows` table as a set of rows without their ids.
    static func withoutFlowIDs(_ lines: [String]) -> [String] {
        let rows = lines.dropFirst().map { $0.replacingOccurrences(of: #"^\d+ "#, with: "", options: .regularExpression) }
        return Array(lines.prefix(1)) + rows.sorted()
    }

    static func comparable(_ step: Step, _ lines: [String], pids: inout [String: String]) -> [String] {
        let normal = normalized(lines, pids: &pids)
        return step.command.hasPrefix("busctl flows") ? withoutFlowIDs(normal) : normal
    }

    @Test func theWalkthroughIsWhatTheExampleFleetPrints() async throws {
        let readmeURL = Self.repository.appendingPathComponent(Self.walkthrough)
        var lines = try String(contentsOf: readmeURL, encoding: .utf8).components(separatedBy: "\n")
        let steps = Self.steps(in: lines)
        #expect(steps.count > 20, "the walkthrough was not found")
        let manifest = try String(contentsOf: Self.repository.appendingPathComponent("fleet/fleet.json"), encoding: .utf8)
        let update = ProcessInfo.processInfo.environment["BOARDBUS_UPDATE_README"] == "1"
        var replacements: [(Range<Int>, [String])] = []
        try await TestFleet.with(manifest: manifest) { fleet in
            var shownPIDs: [String: String] = [:]
            var printedPIDs: [String: String] = [:]
            var background: [ChildProcess] = []
            // Each is the busctl process itself (`exec`), so this stops exactly it, pass or fail.
            defer { for child in background where child.isRunning { kill(child.pid, SIGKILL) } }
            for step in steps {
                if step.background {
                    let child = try await start(step.command, in: fleet, background: true)
                    background.append(child)
                    try await child.waitForOutput("Monitoring", timeout: .seconds(30))
                    continue
                }
                var printed = try await run(step.command, in: fleet)
                guard step.compared else { continue }
                var expected = Self.comparable(step, step.shown, pids: &shownPIDs)
                var retryPIDs = printedPIDs
                var actual = Self.comparable(step, printed, pids: &retryPIDs)
                if step.repeatable {
                    // Until it shows what the README shows or, when writing the README, until it
                    // stops changing: the fleet has settled.
                    let deadline = ContinuousClock.now.advanced(by: .seconds(15))
                    var previous: [String]? = nil
                    while update ? previous != actual : actual != expected, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(update ? 500 : 100))
                        previous = actual
                        printed = try await run(step.command, in: fleet)
                        retryPIDs = printedPIDs
                        actual = Self.comparable(step, printed, pids: &retryPIDs)
                    }
                }
                printedPIDs = retryPIDs
                if update {
                    replacements.append(((step.line + 1)..<(step.line + 1 + step.shown.count), printed))
                    expected = actual
                }
                #expect(
                    actual == expected,
                    "README line \(step.line + 1): \(step.command)\n--- README\n\(step.shown.joined(separator: "\n"))\n--- printed\n\(printed.joined(separator: "\n"))"
                )
            }
        }
        if update {
            for (range, printed) in replacements.reversed() { lines.replaceSubrange(range, with: printed) }
            try lines.joined(separator: "\n").write(to: readmeURL, atomically: true, encoding: .utf8)
        }
    }

    /// Runs one README command line as a shell where the README's alias was typed does; stdout
    /// and stderr together, as a terminal shows them.
    func run(_ command: String, in fleet: TestFleet) async throws -> [String] {
        let result = try await start(command, in: fleet).wait(timeout: .seconds(60))
        var lines = result.standardOutput.components(separatedBy: "\n").map { line in
            var line = line
            while line.last == " " { line.removeLast() }
            return line
        }
        while lines.last?.isEmpty == true { lines.removeLast() }
        return lines
    }

    /// The README's `alias busctl=…` line (the first; typed in the repository), read once.
    static let aliasLine: String? = {
        let lines = (try? String(contentsOf: repository.appendingPathComponent(walkthrough), encoding: .utf8))?.components(separatedBy: "\n") ?? []
        return lines.first { $0.hasPrefix("$ alias busctl=") }.map { splitComment(String($0.dropFirst(2))).0 }
    }()

    /// Starts one README command line in bash, as typed after the README's alias line in the
    /// repository, with the system's PATH, where systemd's busctl is (the package's build is not
    /// on it), in the fleet's directory, where files it names go. A background one replaces the
    /// shell (`exec`, through the alias's value), so that its pid is the command's own.
    func start(_ command: String, in fleet: TestFleet, background: Bool = false) async throws -> ChildProcess {
        var environment = fleet.environment
        environment["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        guard let alias = Self.aliasLine else { throw BusError(.badArgument, "the walkthrough has no '$ alias busctl=' line") }
        let run = background ? "exec 2>&1; exec ${BASH_ALIASES[busctl]}\(command.dropFirst("busctl".count))" : "{ \(command) ; } 2>&1"
        let script = ["shopt -s expand_aliases", "cd '\(Self.repository.path)' || exit 1", alias, "cd '\(fleet.directory)' || exit 1", run]
        return try await ChildProcess(
            executable: "/bin/bash", arguments: ["-c", script.joined(separator: "\n")], environment: environment,
            directory: fleet.directory, name: "readme-\(UUID().uuidString.prefix(8))")
    }

    /// The README's commands reach BoardBus's busctl through its alias while systemd's is the
    /// `busctl` on the PATH (where it is installed), which the alias leaves as it is for scripts.
    @Test func theREADMEsBusctlIsTheAliasWhileSystemdsKeepsItsName() async throws {
        let alias = try #require(Self.aliasLine)
        let probe = [
            "shopt -s expand_aliases", "cd '\(Self.repository.path)'", alias, "type busctl", "busctl --help | head -n 3",
            "bash -c 'command -v busctl || echo none'",
        ]
        // Its output files go to a directory of its own, removed after.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-alias-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await ChildProcess(
            executable: "/bin/bash", arguments: ["-c", probe.joined(separator: "\n")], environment: ["PATH": "/usr/local/bin:/usr/bin:/bin"],
            directory: directory, name: "readme-alias"
        ).wait(timeout: .seconds(30))
        #expect(result.standardOutput.contains("busctl is aliased to"), "\(result.standardOutput)")
        #expect(result.standardOutput.contains("Inspect and drive a BoardBus fleet"), "\(result.standardOutput)")
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/busctl") {
            #expect(result.standardOutput.hasSuffix("/usr/bin/busctl\n"), "a script in that shell gets: \(result.standardOutput)")
        }
    }
}
