import BoardKit
import BoardKitTesting
import BusCore
import Foundation
import Synchronization

/// `nats-server` nodes on 127.0.0.1 for one test (Debian's, which scripts/test installs): one, or
/// a cluster whose every node has a route to every other. Each writes its pid file in the test's
/// directory; ``with(nodes:_:)`` stops them all, by pid, whether the body returns or throws.
final class NATSCluster: Sendable {
    static let server = "/usr/sbin/nats-server"
    let directory: String
    let ports: [UInt16]
    private let nodes: Mutex<[ChildProcess]>

    /// Client URL of node `index`.
    func url(_ index: Int) -> String { "\(scheme)://127.0.0.1:\(ports[index])" }
    var urls: [String] { ports.indices.map(url) }

    /// `arguments` go to every node (`--user`, `--tls`…; `{dir}` is the cluster's directory);
    /// `scheme` is its clients' URL scheme; `prepare` runs with the cluster's directory before the
    /// nodes start (to make their files).
    static func with<T>(
        nodes count: Int, arguments: [String] = [], environment: [String: String] = [:], scheme: String = "nats",
        prepare: (String) async throws -> Void = { _ in }, _ body: (NATSCluster) async throws -> T
    ) async throws -> T {
        guard FileManager.default.isExecutableFile(atPath: server) else {
            throw BusError(.badArgument, "\(server) is missing: scripts/test installs Debian's nats-server")
        }
        return try await withTemporaryDirectory("nats") { directory in
            try await prepare(directory)
            let cluster = try NATSCluster(directory: directory, count: count, arguments: arguments, environment: environment, scheme: scheme)
            return try await using(cluster, stop: { await $0.stop() }) { cluster in
                try await cluster.start()
                return try await body(cluster)
            }
        }
    }

    let arguments: [String]
    let environment: [String: String]
    let scheme: String

    private init(directory: String, count: Int, arguments: [String], environment: [String: String], scheme: String) throws {
        self.directory = directory
        self.environment = environment
        self.arguments = arguments.map { $0.replacingOccurrences(of: "{dir}", with: directory) }
        self.scheme = scheme
        ports = try (0..<(2 * count)).map { _ in try freeLoopbackPort() }
        nodes = Mutex([])
    }

    private func clusterPort(_ index: Int) -> UInt16 { ports[ports.count / 2 + index] }
    private var count: Int { ports.count / 2 }

    private func start() async throws {
        for index in 0..<count { try await startNode(index) }
        // A cluster is ready when each node has a route to each other one.
        if count > 1 {
            let formed = await eventually(timeout: .seconds(20)) {
                self.nodes.withLock { $0 }.allSatisfy {
                    $0.standardError.components(separatedBy: "Route connection created").count - 1 >= self.count - 1
                }
            }
            guard formed else { throw BusError(.timeout, "the NATS cluster's routes did not form") }
        }
    }

    private func startNode(_ index: Int) async throws {
        var arguments = ["-a", "127.0.0.1", "-p", "\(ports[index])", "-n", "node-\(index)", "-P", "\(directory)/nats-\(index).pid"] + self.arguments
        if count > 1 {
            let routes = (0..<count).filter { $0 != index }.map { "nats://127.0.0.1:\(clusterPort($0))" }.joined(separator: ",")
            arguments += ["--cluster_name", "boardbus-test", "-cluster", "nats://127.0.0.1:\(clusterPort(index))", "-routes", routes]
        }
        let node = try await ChildProcess(
            executable: Self.server, arguments: arguments, environment: environment, directory: directory,
            name: "nats-\(index)-\(UInt32.random(in: 0...UInt32.max))")
        nodes.withLock { $0.append(node) }
        let ready = await eventually(timeout: .seconds(10)) { node.standardError.contains("Server is ready") || !node.isRunning }
        guard ready, node.isRunning else { throw BusError(.transport, "nats-server did not start: \(node.standardError)") }
    }

    /// Kills node `index` with SIGKILL.
    func kill(node index: Int) async {
        let node = nodes.withLock { $0[index] }
        await node.killAndWait()
    }

    func stop() async {
        for node in nodes.withLock({ $0 }) { await node.stop(grace: .seconds(2)) }
    }
}

/// A fleet name of its own for each test, so that tests never hear one another's fleets.
func uniqueFleetName() -> String { "t\(String(UInt64.random(in: 0...UInt64.max), radix: 36))" }

extension NATSCluster {
    /// An access policy that lets the cluster (principal `nats`) do anything.
    static let openPolicy = #"{"rules": [{"name": "the fleet", "allow": ["*"], "principals": ["nats"], "targets": ["*"]}]}"#

    /// The arguments that join a motherboard to this cluster (or to `urls` of it) as `host` of
    /// `fleet`, with `policy` (default: the cluster may do anything) as its access policy.
    func arguments(_ urls: [String]? = nil, fleet: String, host: String, policy: String = openPolicy) throws -> [String] {
        let path = "\(directory)/policy-\(host)-\(UInt32.random(in: 0...UInt32.max)).json"
        try policy.write(toFile: path, atomically: true, encoding: .utf8)
        return ["--nats", (urls ?? self.urls).joined(separator: ","), "--nats-fleet", fleet, "--nats-host", host, "--policy", path]
    }
}

extension TestFleet {
    /// The live boards as `busctl list --json` gives them.
    func listedBoards() async throws -> [BoardInfo] {
        let result = try await busctl("list", "--json")
        guard result.exitCode == 0 else { return [] }
        return try decode(BoardList.self, from: result).boards
    }

    /// Waits until `list` shows `board` with `host` (nil: until it is gone); how long it took.
    func waitForListing(_ board: String, host: String?, timeout: Duration = .seconds(20)) async throws -> Duration {
        let started = ContinuousClock.now
        let seen = try await eventually(timeout: timeout, checkingEvery: .milliseconds(50)) {
            let match = try await self.listedBoards().first { $0.id.rawValue == board }
            return host == nil ? match == nil : match?.host == host
        }
        guard seen else {
            throw BusError(.timeout, "'\(board)' \(host.map { "on \($0)" } ?? "gone") not listed within \(timeout): \(try await listedBoards())")
        }
        return started.duration(to: .now)
    }
}
