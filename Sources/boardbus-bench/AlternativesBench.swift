import BoardKitTesting
import BusCore
import Foundation

/// What users choosing a bus compare with, in the same run: a NATS request/reply through Debian's
/// `nats-server` (C client on libnats, SendAsap) and a D-Bus method call through `dbus-broker` (a
/// private bus, libdbus-1 client and service), each against BoardBus's raw echo, one request at a
/// time, at 100 B and 64 KiB, and under load at the main table's windows (100 B; connections ×
/// requests in flight), in alternated rounds.
///
/// The C harnesses are in `scripts/bench-peers/`; `scripts/bench` installs their packages with
/// apt-get and builds them into `.build/bench-peers/`. A system whose harness or server is missing
/// is skipped with a note saying why.
struct AlternativesBench {
    let bus: BoardBusBench
    let quick: Bool

    struct System {
        var name: String
        var harness: String
        var server: String
        var packages: String
        /// The harness's arguments before BYTES REQUESTS WARMUP (or BYTES MODE CONNECTIONS WINDOW SECONDS).
        var arguments: (_ directory: String) -> [String]
        /// The harness's load modes; a row shows the best of them (NATS's two ways to write).
        var loadModes = ["load"]
        /// How the row names its load.
        var loadNote = ""
    }

    static func systems(peers: String) -> [System] {
        [
            System(
                name: "NATS request/reply (nats-server, libnats, tcp 127.0.0.1)", harness: "\(peers)/nats-echo-bench",
                server: "/usr/sbin/nats-server", packages: "nats-server libnats-dev", arguments: { _ in ["/usr/sbin/nats-server"] },
                loadModes: ["load", "load-asap"], loadNote: " (the better of libnats's buffering and SendAsap)"),
            System(
                name: "D-Bus method call (dbus-broker, libdbus-1, Unix socket)", harness: "\(peers)/dbus-echo-bench",
                server: "/usr/bin/dbus-broker-launch", packages: "dbus-broker libdbus-1-dev",
                arguments: { ["/usr/bin/dbus-broker-launch", $0] }),
        ]
    }

    /// `.build/bench-peers`, two levels above ``benchBinaries`` (one, for a build path without
    /// the triple).
    static var peersDirectory: String {
        let candidates = ["../../bench-peers", "../bench-peers"].map { benchBinaries.appendingPathComponent($0).standardized.path }
        return candidates.first { FileManager.default.fileExists(atPath: $0) } ?? candidates[0]
    }

    struct Figures {
        var p50: Double
        var p99: Double
        var rate: Double
    }

    func run(report: Report) async throws {
        let rounds = quick ? 1 : 3
        for system in Self.systems(peers: Self.peersDirectory) {
            guard FileManager.default.isExecutableFile(atPath: system.server) else {
                report.note("\(system.name) rows skipped: \(system.server) is missing (apt-get install \(system.packages); scripts/bench does)")
                continue
            }
            guard FileManager.default.isExecutableFile(atPath: system.harness) else {
                report.note("\(system.name) rows skipped: its harness is not built (scripts/bench builds it once \(system.packages) are installed)")
                continue
            }
            do {
                for (label, bytes, requests) in [("100 B", 100, quick ? 2_000 : 10_000), ("64 KiB", 65_536, quick ? 500 : 2_000)] {
                    var (theirs, ours) = ([Figures](), [Figures]())
                    for round in 1...rounds {
                        progress("\(system.name), \(label): round \(round)/\(rounds)")
                        // Which goes first changes each round: what runs second runs on a warmer machine.
                        for isOurs in round % 2 == 1 ? [false, true] : [true, false] {
                            if isOurs {
                                let histogram = try await bus.latency(
                                    payload: echoPayload(bytes: bytes), requests: requests, warmup: requests / 10, command: "echo.raw")
                                let summary = LatencySummary(histogram)
                                ours.append(Figures(p50: summary.p50, p99: summary.p99, rate: 1e9 / histogram.mean))
                            } else {
                                theirs.append(try await harness(system, bytes: bytes, requests: requests))
                            }
                        }
                    }
                    func mid(_ figures: [Figures], _ value: (Figures) -> Double) -> Double { median(figures.map(value)) }
                    let row = "\(system.name), \(label)"
                    report.alternative("\(row): round trip p50 (µs)", other: mid(theirs, \.p50), boardBus: mid(ours, \.p50))
                    report.alternative("\(row): round trip p99 (µs)", other: mid(theirs, \.p99), boardBus: mid(ours, \.p99))
                    report.alternative(
                        "\(row): serial rate (round trips/s)", other: mid(theirs, \.rate), boardBus: mid(ours, \.rate), decimals: 0)
                }
                try await loadRows(system, rounds: rounds, report: report)
            } catch let error as HarnessFailure {
                report.note("\(system.name) rows skipped: \(error.reason)")
            }
        }
    }

    /// The system and BoardBus's raw echo under load, 100 B, at each window of the main table,
    /// alternated round by round.
    private func loadRows(_ system: System, rounds: Int, report: Report) async throws {
        let seconds = quick ? 0.4 : 1.5
        for (clients, window) in [(1, 100), (4, 16), (4, 100), (1, 1000)] {
            var (theirs, ours) = ([Double](), [Double]())
            for round in 1...rounds {
                progress("\(system.name), 100 B, \(clients)×\(window) in flight: round \(round)/\(rounds)")
                for isOurs in round % 2 == 1 ? [false, true] : [true, false] {
                    if isOurs {
                        ours.append(
                            try await bus.throughput(
                                payload: echoPayload(bytes: 100), clients: clients, window: window, seconds: seconds, command: "echo.raw"))
                    } else {
                        var best = 0.0
                        for mode in system.loadModes {
                            best = max(best, try await load(system, mode: mode, clients: clients, window: window, seconds: seconds))
                        }
                        theirs.append(best)
                    }
                }
            }
            report.alternative(
                "\(system.name), 100 B, \(clients)×\(window) in flight\(system.loadNote): throughput (msg/s)", other: median(theirs),
                boardBus: median(ours), decimals: 0)
        }
    }

    /// One load of a C harness: the replies per second it printed.
    private func load(_ system: System, mode: String, clients: Int, window: Int, seconds: Double) async throws -> Double {
        let output = try await runHarness(system, ["100", mode, "\(clients)", "\(window)", "\(seconds)"])
        guard output.count == 1 else { throw HarnessFailure(reason: "its load printed \(output.count) figures, not 1") }
        return output[0]
    }

    struct HarnessFailure: Error {
        var reason: String
    }

    /// One run of a C harness: it starts its server and responder, measures, stops them.
    private func harness(_ system: System, bytes: Int, requests: Int) async throws -> Figures {
        let fields = try await runHarness(system, ["\(bytes)", "\(requests)", "\(requests / 10)"])
        guard fields.count == 3 else { throw HarnessFailure(reason: "it printed \(fields.count) figures, not 3") }
        return Figures(p50: fields[0], p99: fields[1], rate: fields[2])
    }

    /// Runs a C harness with its system's arguments and `arguments`: the numbers it printed.
    private func runHarness(_ system: System, _ arguments: [String]) async throws -> [Double] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-bench-peer-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = try await ChildProcess(
            executable: system.harness, arguments: system.arguments(directory) + arguments,
            environment: ProcessInfo.processInfo.environment, directory: directory, name: URL(fileURLWithPath: system.harness).lastPathComponent)
        let done = try await process.wait(timeout: .seconds(300))
        guard done.exitCode == 0 else {
            let reason = done.standardError.split(separator: "\n").last.map(String.init) ?? "exit status \(done.exitCode)"
            throw HarnessFailure(reason: reason)
        }
        return done.standardOutput.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
    }
}
