import BusCore
import Foundation

/// Two hosts for a test of a fleet across machines: two network namespaces joined by a veth pair
/// (10.231.N.1 is host A, .2 host B; made by the lab, and removed with everything it started,
/// by pid, whether the body passes or throws), or 127.0.0.1 for both when namespaces cannot be
/// made here (not root, no iproute2), said in one line; `cutLink()` then stops B's motherboard.
///
/// ```swift
/// try await NetworkLab.with { lab in
///     _ = try await lab.startParent(manifest: parent)   // on A, listening on tcp with CURVE
///     _ = try await lab.startEdge(manifest: edge)       // on B, attached to A, serving its scopes
///     let answer = try await lab.busctlA("call", "sensor", "read", "--scope", "edge")
///     try await lab.cutLink()
/// }
/// ```
/// Key files `edge-b.key` and `ops.key` (on A's allow-list) and `stranger.key` (not) are in
/// `directory`.
public final class NetworkLab: @unchecked Sendable {
    public let directory: String
    public let binaries: String
    /// Whether the hosts are network namespaces (else both are 127.0.0.1).
    public let isolated: Bool
    public let parentAddress: String
    public let edgeAddress: String
    public let port: Int
    public let namespaces: [String]
    private let ip: String
    private let tag: String
    private var processes: [ChildProcess] = []
    private var edgeBroker: ChildProcess?
    private var counter = 0

    public var parentEndpoint: String { "tcp://\(parentAddress):\(port)" }
    public var runtimeA: String { "\(directory)/a" }
    public var runtimeB: String { "\(directory)/b" }
    /// Host A's state directory (its stores and CURVE keys: `curve/server.pub` is its public key).
    public var stateA: String { Self.stateDirectory(of: runtimeA) }
    /// Each runtime directory's state directory sits beside it.
    static func stateDirectory(of runtime: String) -> String { "\(runtime).state" }

    public static func with<T>(_ body: (NetworkLab) async throws -> T) async throws -> T {
        let lab = try await NetworkLab()
        return try await using(lab, stop: { await $0.stop() }, body)
    }

    private init() async throws {
        binaries = try TestFleet.locateBinaries()
        let template = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-net-XXXXXX").path
        var buffer = Array(template.utf8CString)
        guard mkdtemp(&buffer) != nil else { throw BusError(.transport, "mkdtemp failed") }
        directory = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        ip = Self.ipPath
        tag = "bb\(getpid() % 100_000)x\(UInt16.random(in: 0...0xfff))"
        let subnet = Int.random(in: 1...250)
        let made = await Self.makeNamespaces(ip: ip, tag: tag, subnet: subnet, directory: directory)
        if let failure = made.failure {
            print("network namespaces unavailable (\(failure)): running over 127.0.0.1, the link cut by stopping B's motherboard")
            isolated = false
            namespaces = []
            parentAddress = "127.0.0.1"
            edgeAddress = "127.0.0.1"
            port = Int.random(in: 20_000...60_000)
        } else {
            isolated = true
            namespaces = made.names
            parentAddress = "10.231.\(subnet).1"
            edgeAddress = "10.231.\(subnet).2"
            port = 7400
        }
        // Keys: `edge-b` (B's motherboard) and `ops` (a client) allowed, `stranger` not.
        do {
            var allowed = ""
            for key in ["edge-b", "ops", "stranger"] {
                let made = try await run(binaries + "/busctl", ["keys", "new", key, "--out", "\(directory)/\(key).key"], in: nil)
                try expectOK(made)
                if key != "stranger" { allowed += made.standardOutput }
            }
            try allowed.write(toFile: "\(directory)/allowed.keys", atomically: true, encoding: .utf8)
        } catch {
            await stop()
            throw error
        }
    }

    static let ipPath = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) } ?? "ip"

    /// Whether this process can make the lab's network namespaces (one made and removed again).
    public static func canMakeNamespaces() async -> Bool {
        let ip = ipPath
        // The `ip` commands' output files go to a folder of the probe's own, removed after.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-netns-probe-\(UUID().uuidString)").path
        guard (try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)) != nil else { return false }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let made = await makeNamespaces(ip: ip, tag: "bbprobe\(getpid() % 100_000)", subnet: 251, directory: directory)
        guard made.failure == nil else { return false }
        await deleteNamespaces(made.names, ip: ip, directory: directory)
        return true
    }

    /// `ip netns del` of each (`ip`'s output files in `directory`), in a task of its own: a
    /// cancelled caller (a test past its time limit) would otherwise stop the `ip` that removes
    /// them, and namespaces outlive the process.
    private static func deleteNamespaces(_ names: [String], ip: String, directory: String) async {
        guard !names.isEmpty else { return }
        await Task.detached {
            for name in names {
                _ = try? await ChildProcess(executable: ip, arguments: ["netns", "del", name], environment: [:], directory: directory, name: "ip")
                    .wait(timeout: .seconds(10))
            }
        }.value
    }

    /// `ip netns add` ×2, a veth pair between them, addresses, links up. Nil failure: made.
    private static func makeNamespaces(ip: String, tag: String, subnet: Int, directory: String) async -> (names: [String], failure: String?) {
        guard getuid() == 0 else { return ([], "not root") }
        // To check the fallback on a machine that has namespaces.
        if ProcessInfo.processInfo.environment["BOARDBUS_TEST_NO_NETNS"] == "1" { return ([], "BOARDBUS_TEST_NO_NETNS=1") }
        guard FileManager.default.isExecutableFile(atPath: ip) else { return ([], "no iproute2") }
        let (a, b) = ("\(tag)a", "\(tag)b")
        let steps: [[String]] = [
            ["netns", "add", a], ["netns", "add", b],
            ["link", "add", "\(tag)va", "type", "veth", "peer", "name", "\(tag)vb"],
            ["link", "set", "\(tag)va", "netns", a], ["link", "set", "\(tag)vb", "netns", b],
            ["-n", a, "addr", "add", "10.231.\(subnet).1/24", "dev", "\(tag)va"],
            ["-n", b, "addr", "add", "10.231.\(subnet).2/24", "dev", "\(tag)vb"],
            ["-n", a, "link", "set", "\(tag)va", "up"], ["-n", b, "link", "set", "\(tag)vb", "up"],
            ["-n", a, "link", "set", "lo", "up"], ["-n", b, "link", "set", "lo", "up"],
        ]
        for step in steps {
            let result = try? await ChildProcess(executable: ip, arguments: step, environment: [:], directory: directory, name: "ip").wait(
                timeout: .seconds(10))
            guard let result, result.exitCode == 0 else {
                await deleteNamespaces([a, b], ip: ip, directory: directory)
                return (
                    [], "ip \(step.joined(separator: " ")): \(result?.standardError.trimmingCharacters(in: .whitespacesAndNewlines) ?? "did not run")"
                )
            }
        }
        return ([a, b], nil)
    }

    // MARK: - Processes

    private func command(_ executable: String, _ arguments: [String], in host: Int?) -> (String, [String]) {
        guard isolated, let host else { return (executable, arguments) }
        return (ip, ["netns", "exec", namespaces[host], executable] + arguments)
    }

    private func nextName(_ base: String) -> String {
        counter += 1
        return "\(base)-\(counter)"
    }

    private func environment(runtime: String?) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for key in ["BOARDBUS_ADDRESS", "BOARDBUS_BOARD_ID", "BOARDBUS_SERVER_KEY", "BOARDBUS_CLIENT_KEY", "BOARDBUS_INSECURE", "NOTIFY_SOCKET"] {
            environment[key] = nil
        }
        environment["BOARDBUS_RUNTIME_DIR"] = runtime ?? "\(directory)/none"
        environment["BOARDBUS_STATE_DIR"] = Self.stateDirectory(of: runtime ?? "\(directory)/none")
        return environment
    }

    /// Runs a command to its end, on host 0 (A), 1 (B) or this one (nil).
    public func run(_ executable: String, _ arguments: [String], in host: Int?, environment extra: [String: String] = [:], runtime: String? = nil)
        async throws -> ChildProcess.Result
    {
        try await spawn(executable, arguments, in: host, environment: extra, runtime: runtime).wait(timeout: .seconds(60))
    }

    /// Starts a process on host 0 (A) or 1 (B), stopped with the lab; `runtime` is its
    /// `BOARDBUS_RUNTIME_DIR`.
    public func start(_ executable: String, _ arguments: [String], in host: Int, environment extra: [String: String] = [:], runtime: String?)
        async throws -> ChildProcess
    {
        let child = try await spawn(executable, arguments, in: host, environment: extra, runtime: runtime)
        processes.append(child)
        return child
    }

    private func spawn(_ executable: String, _ arguments: [String], in host: Int?, environment extra: [String: String], runtime: String?)
        async throws -> ChildProcess
    {
        let (path, argv) = command(executable, arguments, in: host)
        return try await ChildProcess(
            executable: path, arguments: argv, environment: environment(runtime: runtime).merging(extra) { $1 }, directory: directory,
            name: nextName(URL(fileURLWithPath: executable).lastPathComponent))
    }

    /// The address of host 0 (A) or 1 (B).
    public func address(of host: Int) -> String { host == 0 ? parentAddress : edgeAddress }

    /// A motherboard on host 0 (A, runtime directory ``runtimeA``) or 1 (B, ``runtimeB``) with
    /// `manifest` (written to `<name>.json`) and `arguments`, once it is READY;
    /// `runtime` names another runtime directory (a second motherboard on the host).
    public func startMotherboard(manifest: String, named name: String, arguments: [String], in host: Int, runtime: String? = nil) async throws
        -> ChildProcess
    {
        try await startBroker(manifest: manifest, named: name, arguments, in: host, runtime: runtime ?? (host == 0 ? runtimeA : runtimeB))
    }

    /// A motherboard on `host` with `manifest` and `arguments`, once it is READY.
    private func startBroker(manifest: String, named name: String, _ arguments: [String], in host: Int, runtime: String) async throws -> ChildProcess
    {
        try manifest.write(toFile: "\(directory)/\(name).json", atomically: true, encoding: .utf8)
        let broker = try await start(
            binaries + "/motherboard", ["--manifest", "\(directory)/\(name).json", "--runtime-dir", runtime, "--exit-with-parent"] + arguments,
            in: host, runtime: runtime)
        try await broker.waitForOutput("READY", timeout: .seconds(60))
        return broker
    }

    /// Host A's motherboard: listens on `parentEndpoint` with CURVE, the lab's `edge-b` and `ops`
    /// keys allowed, what they may do said by `policy` (written to ``policyPath``; without one, a
    /// remote key may do nothing).
    public func startParent(manifest: String, policy: String? = nil, arguments: [String] = []) async throws -> ChildProcess {
        if let policy { try policy.write(toFile: policyPath, atomically: true, encoding: .utf8) }
        return try await startBroker(
            manifest: manifest, named: "a",
            ["--listen", parentEndpoint, "--allow", "\(directory)/allowed.keys", "--policy", policyPath] + arguments, in: 0, runtime: runtimeA)
    }

    /// Host A's access policy file (rewrite it to change the policy of the running motherboard).
    public var policyPath: String { "\(directory)/policy.json" }

    /// Host B's motherboard, attached to A with the `edge-b` key (or another of the lab's keys):
    /// it serves its manifest's scopes.
    public func startEdge(manifest: String, key: String = "edge-b") async throws -> ChildProcess {
        let broker = try await startBroker(
            manifest: manifest, named: "b",
            [
                "--attach", parentEndpoint, "--attach-server-key", "\(stateA)/curve/server.pub", "--attach-client-key",
                "\(directory)/\(key).key",
            ], in: 1, runtime: runtimeB)
        edgeBroker = broker
        return broker
    }

    /// A board on host B connected straight to A over tcp with `key`.
    public func startRemoteBoard(id: String, key: String, executable: String = "BoardBusDemoGreeter") async throws -> ChildProcess {
        let board = try await start(
            binaries + "/" + executable, [], in: 1,
            environment: [
                "BOARDBUS_ADDRESS": parentEndpoint, "BOARDBUS_SERVER_KEY": "\(stateA)/curve/server.pub",
                "BOARDBUS_CLIENT_KEY": "\(directory)/\(key).key", "BOARDBUS_BOARD_ID": id,
            ], runtime: "\(directory)/remote")
        try await board.waitForOutput("READY", timeout: .seconds(60))
        return board
    }

    public func busctlA(_ arguments: String...) async throws -> ChildProcess.Result {
        try await run(binaries + "/busctl", arguments, in: 0, runtime: runtimeA)
    }

    public func busctlB(_ arguments: String...) async throws -> ChildProcess.Result {
        try await run(binaries + "/busctl", arguments, in: 1, runtime: runtimeB)
    }

    /// busctl on host B talking to A over tcp with one of the lab's keys.
    public func busctlOverTCP(key: String, _ arguments: String...) async throws -> ChildProcess.Result {
        try await run(
            binaries + "/busctl",
            arguments + ["--bus", parentEndpoint, "--server-key", "\(stateA)/curve/server.pub", "--client-key", "\(directory)/\(key).key"],
            in: 1)
    }

    /// Throws with the command's stderr unless it exited 0.
    public func expectOK(_ result: ChildProcess.Result) throws {
        guard result.exitCode == 0 else { throw BusError(.transport, "command failed (exit \(result.exitCode)): \(result.standardError)") }
    }

    // MARK: - The link

    public func cutLink() async throws {
        if isolated {
            try expectOK(try await run(ip, ["-n", namespaces[0], "link", "set", "\(tag)va", "down"], in: nil))
        } else if let edgeBroker {
            kill(edgeBroker.pid, SIGSTOP)
        }
    }

    public func restoreLink() async throws {
        if isolated {
            try expectOK(try await run(ip, ["-n", namespaces[0], "link", "set", "\(tag)va", "up"], in: nil))
        } else if let edgeBroker {
            kill(edgeBroker.pid, SIGCONT)
        }
    }

    // MARK: - Cleanup

    /// Stops what the lab started (by pid; a stopped broker is continued first), removes the
    /// namespaces (their veth pair goes with them) and the directory.
    public func stop() async {
        if let edgeBroker { kill(edgeBroker.pid, SIGCONT) }
        for process in processes.reversed() { _ = await process.stop() }
        await Self.deleteNamespaces(namespaces, ip: ip, directory: directory)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
