import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Testing

/// The NATS guide (docs/operations/nats.md) is one real run: its manifests and its Python client as
/// printed, a three-node cluster and two motherboards on two hosts (network namespaces; 127.0.0.1
/// with ports of its own where they cannot be made), and every `hostA$`/`hostB$` line of its
/// transcript run in order on its host and compared with what the README shows, pids renamed and
/// uptimes blanked as in the walkthrough. `BOARDBUS_UPDATE_README=1` writes this run's output
/// into the README instead, for a person to review with `git diff`.
@Suite("README: across many hosts with NATS", .serialized, .timeLimit(.minutes(3)))
struct NATSReadmeTests {
    static let readme = ReadmeTranscriptTests.repository.appendingPathComponent("docs/operations/nats.md").path
    static let section = "# Across many hosts with NATS"

    /// The README's nodes: name, host, client port, cluster port.
    static let nodes: [(name: String, host: Int, port: Int, cluster: Int)] = [("a1", 0, 4222, 6222), ("a2", 0, 4223, 6223), ("b1", 1, 4222, 6222)]
    static let readmeAddresses = ["10.0.0.1", "10.0.0.2"]

    /// The fenced blocks of the section: their info string and lines (with each line's index).
    static func blocks(_ lines: [String]) throws -> [(info: String, start: Int, lines: [String])] {
        let start = try #require(lines.firstIndex(of: section))
        let end = lines.count
        var result: [(String, Int, [String])] = []
        var index = start
        while index < end {
            if lines[index].hasPrefix("```"), lines[index].count > 3 {
                let info = String(lines[index].dropFirst(3))
                let close = try #require(lines[(index + 1)...].firstIndex(of: "```"))
                result.append((info, index + 1, Array(lines[(index + 1)..<close])))
                index = close
            }
            index += 1
        }
        return result
    }

    /// Shell words: spaces split, single and double quotes group, `$(…)` stays one word.
    static func words(_ command: String) -> [String] {
        var words: [String] = []
        var current = ""
        var quote: Character?
        var started = false
        for character in command {
            if let open = quote {
                if character == open { quote = nil } else { current.append(character) }
            } else if character == "'" || character == "\"" {
                quote = character
                started = true
            } else if character == " " {
                if started || !current.isEmpty { words.append(current) }
                current = ""
                started = false
            } else {
                current.append(character)
            }
        }
        if started || !current.isEmpty { words.append(current) }
        return words
    }

    @Test func theNATSWalkthroughIsWhatTwoHostsPrint() async throws {
        let text = try String(contentsOfFile: Self.readme, encoding: .utf8)
        var lines = text.components(separatedBy: "\n")
        let blocks = try Self.blocks(lines)
        let json = blocks.filter { $0.info == "json" }.map { $0.lines.joined(separator: "\n") }
        let manifests = json.filter { !$0.contains(#""rules""#) }
        try #require(manifests.count == 2, "the section has A's and B's manifests")
        let policy = try #require(json.first { $0.contains(#""rules""#) }, "the section has the hosts' policy")
        let client = try #require(blocks.first { $0.info == "python" }).lines.joined(separator: "\n")
        let transcript = try #require(blocks.last { $0.info == "console" })
        let update = ProcessInfo.processInfo.environment["BOARDBUS_UPDATE_README"] == "1"

        try await NetworkLab.with { lab in
            let callScript = "\(lab.directory)/call.py"
            try client.write(toFile: callScript, atomically: true, encoding: .utf8)
            let policyPath = "\(lab.directory)/fleet-policy.json"
            try policy.write(toFile: policyPath, atomically: true, encoding: .utf8)
            // Ports: the README's in namespaces, free ones of 127.0.0.1 otherwise.
            let ports = try Self.nodes.map { node in
                lab.isolated ? (node.port, node.cluster) : (Int(try freeLoopbackPort()), Int(try freeLoopbackPort()))
            }
            func url(_ index: Int) -> String { "nats://\(lab.address(of: Self.nodes[index].host)):\(ports[index].0)" }
            // The README's nodes' addresses and ports as this run has them, and back.
            let spellings = Self.nodes.enumerated().map { index, node in
                (readme: "\(Self.readmeAddresses[node.host]):\(node.port)", lab: "\(lab.address(of: node.host)):\(ports[index].0)")
            }
            func toLab(_ text: String) -> String { spellings.reduce(text) { $0.replacingOccurrences(of: $1.readme, with: $1.lab) } }
            func toReadme(_ text: String) -> String { spellings.reduce(text) { $0.replacingOccurrences(of: $1.lab, with: $1.readme) } }
            var servers: [ChildProcess] = []
            for (index, node) in Self.nodes.enumerated() {
                let routes = Self.nodes.indices.filter { $0 != index }.map { "nats://\(lab.address(of: Self.nodes[$0].host)):\(ports[$0].1)" }
                servers.append(
                    try await lab.start(
                        NATSCluster.server,
                        [
                            "-a", lab.address(of: node.host), "-p", "\(ports[index].0)", "-n", node.name, "--cluster_name", "shop", "-cluster",
                            "nats://\(lab.address(of: node.host)):\(ports[index].1)", "-routes", routes.joined(separator: ","), "-P",
                            "\(lab.directory)/\(node.name).pid",
                        ], in: node.host, runtime: nil))
            }
            let formed = await eventually(timeout: .seconds(20)) {
                servers.allSatisfy { $0.standardError.components(separatedBy: "Route connection created").count - 1 >= 2 }
            }
            try #require(formed, "the cluster's routes did not form: \(servers.map(\.standardError))")
            _ = try await lab.startMotherboard(
                manifest: manifests[0], named: "fleet-a",
                arguments: ["--policy", policyPath, "--nats", url(0), "--nats-fleet", "shop", "--nats-host", "host-a"], in: 0)
            _ = try await lab.startMotherboard(
                manifest: manifests[1], named: "fleet-b",
                arguments: ["--policy", policyPath, "--nats", url(2), "--nats-fleet", "shop", "--nats-host", "host-b"], in: 1)
            // Both see the whole fleet before the transcript starts.
            let seen = try await eventually(timeout: .seconds(20)) {
                let a = try await lab.busctlA("list", "--json")
                let b = try await lab.busctlB("list", "--json")
                return (try? decode(BoardList.self, from: a))?.boards.count == 4 && (try? decode(BoardList.self, from: b))?.boards.count == 4
            }
            try #require(seen, "the motherboards did not see each other's boards")

            var shownPIDs: [String: String] = [:]
            var printedPIDs: [String: String] = [:]
            var replacements: [(range: Range<Int>, lines: [String])] = []
            var index = 0
            while index < transcript.lines.count {
                let line = transcript.lines[index]
                let host = line.hasPrefix("hostA$ ") ? 0 : line.hasPrefix("hostB$ ") ? 1 : nil
                guard let host else {
                    index += 1
                    continue
                }
                let end = transcript.lines[(index + 1)...].firstIndex { $0.hasPrefix("hostA$ ") || $0.hasPrefix("hostB$ ") } ?? transcript.lines.count
                let shown = Array(transcript.lines[(index + 1)..<end])
                let (command, _) = ReadmeTranscriptTests.splitComment(String(line.dropFirst(7)))
                let words = Self.words(toLab(command))
                let runtime = host == 0 ? lab.runtimeA : lab.runtimeB
                func run() async throws -> [String] {
                    let result: ChildProcess.Result
                    switch words.first {
                    case "busctl":
                        result = try await lab.run(lab.binaries + "/busctl", Array(words.dropFirst()), in: host, runtime: runtime)
                    case "python3":
                        result = try await lab.run("/usr/bin/python3", [callScript] + words.dropFirst(2), in: host)
                    case "kill":
                        let name = try #require(command.firstMatch(of: #/cat (\w+)\.pid/#)).output.1
                        let node = try #require(Self.nodes.firstIndex { $0.name == name })
                        await servers[node].killAndWait()
                        return []
                    default:
                        Issue.record("the NATS transcript runs busctl, python3 and kill only, not: \(command)")
                        return []
                    }
                    var output = (result.standardOutput + result.standardError).components(separatedBy: "\n").map { line in
                        var line = toReadme(line)
                        while line.last == " " { line.removeLast() }
                        return line
                    }
                    while output.last?.isEmpty == true { output.removeLast() }
                    return output
                }
                var printed = try await run()
                var expected = ReadmeTranscriptTests.normalized(shown, pids: &shownPIDs)
                var retryPIDs = printedPIDs
                var actual = ReadmeTranscriptTests.normalized(printed, pids: &retryPIDs)
                if ReadmeTranscriptTests.isReadOnly(command) {
                    // A flow's activation may still be on its way: a read-only command is asked
                    // again until it shows what the README shows (writing it: until it settles).
                    let deadline = ContinuousClock.now.advanced(by: .seconds(15))
                    var previous: [String]? = nil
                    while update ? previous != actual : actual != expected, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(update ? 500 : 100))
                        previous = actual
                        printed = try await run()
                        retryPIDs = printedPIDs
                        actual = ReadmeTranscriptTests.normalized(printed, pids: &retryPIDs)
                    }
                }
                printedPIDs = retryPIDs
                if update {
                    replacements.append(((transcript.start + index + 1)..<(transcript.start + end), printed))
                    expected = actual
                }
                #expect(
                    actual == expected,
                    "README line \(transcript.start + index + 1): \(command)\n--- README\n\(shown.joined(separator: "\n"))\n--- printed\n\(printed.joined(separator: "\n"))"
                )
                index = end
            }
            if update {
                for replacement in replacements.reversed() { lines.replaceSubrange(replacement.range, with: replacement.lines) }
                try lines.joined(separator: "\n").write(toFile: Self.readme, atomically: true, encoding: .utf8)
            }
        }
    }
}
