import BoardKit
import BoardKitTesting
import Foundation

/// Majordomo: the same MDP round trip — majortomo's client → broker → majortomo's worker (an echo),
/// all in Python, one request at a time — through BoardBus's MDP endpoint and through majortomo's
/// own broker, alternated in rounds in one run. Skipped, in one line, when Python's majortomo
/// is missing (`scripts/bench` installs it).
enum MajordomoBench {
    struct Result: Codable {
        var p50: Double
        var p99: Double
        var rate: Double
    }

    /// `scripts/mdp`, from the checkout `scripts/bench` runs in, or beside the build directory.
    static func scripts() -> String? {
        let candidates = [
            FileManager.default.currentDirectoryPath + "/scripts/mdp",
            benchBinaries.appendingPathComponent("../../../scripts/mdp").standardized.path,
        ]
        return candidates.first { FileManager.default.fileExists(atPath: $0 + "/roundtrip.py") }
    }

    static func run(quick: Bool, report: Report) async throws {
        guard let scripts = scripts() else { return report.note("MDP rows skipped: scripts/mdp not found (run scripts/bench from the checkout)") }
        // In a directory of its own, removed after: the check's output files are written there.
        let checkDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-majortomo-check-\(getpid())").path
        try FileManager.default.createDirectory(atPath: checkDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: checkDirectory) }
        let check = try await ChildProcess(
            executable: "/usr/bin/python3", arguments: ["-c", "import majortomo"], environment: ProcessInfo.processInfo.environment,
            directory: checkDirectory, name: "majortomo-check")
        guard try await check.wait(timeout: .seconds(30)).exitCode == 0 else {
            return report.note("MDP rows skipped: Python's majortomo is not installed (pip install majortomo==0.2.0)")
        }
        let manifest = #"{"boards": [], "mdp": "ipc://mdp.sock"}"#
        try await TestFleet.with(manifest: manifest) { fleet in
            let environment = fleet.environment
            let boardBus = "ipc://\(fleet.address.runtimeDirectory)/mdp.sock"
            let majortomo = "ipc://\(fleet.directory)/majortomo.sock"
            func python(_ script: String, _ arguments: [String], name: String) async throws -> ChildProcess {
                try await ChildProcess(
                    executable: "/usr/bin/python3", arguments: ["\(scripts)/\(script)"] + arguments, environment: environment,
                    directory: fleet.directory, name: name)
            }
            let broker = try await python("broker.py", [majortomo], name: "majortomo-broker")
            let workers = [
                try await python("worker.py", [boardBus, "bench.mdp"], name: "worker-boardbus"),
                try await python("worker.py", [majortomo, "bench.mdp"], name: "worker-majortomo"),
            ]
            defer { for process in workers + [broker] { kill(process.pid, SIGKILL) } }
            for worker in workers { try await worker.waitForOutput("READY", timeout: .seconds(30)) }
            try await Task.sleep(for: .milliseconds(500))  // both brokers have the workers' READY
            let requests = quick ? 300 : 2_000
            var (ours, theirs) = ([Result](), [Result]())
            let rounds = quick ? 2 : 5
            for round in 1...rounds {
                progress("MDP round trip through BoardBus and majortomo's broker: round \(round)/\(rounds)")
                for (endpoint, isOurs) in round % 2 == 0 ? [(majortomo, false), (boardBus, true)] : [(boardBus, true), (majortomo, false)] {
                    let client = try await python("roundtrip.py", [endpoint, "bench.mdp", "\(requests)"], name: "mdp-roundtrip")
                    let done = try await client.wait(timeout: .seconds(300))
                    guard done.exitCode == 0, let line = done.standardOutput.split(separator: "\n").last else {
                        throw BusError(.transport, "the MDP client failed: \(done.standardError)")
                    }
                    let result = try JSONDecoder().decode(Result.self, from: Data(line.utf8))
                    if isOurs { ours.append(result) } else { theirs.append(result) }
                }
            }
            func mean(_ results: [Result], _ value: (Result) -> Double) -> Double { results.map(value).reduce(0, +) / Double(results.count) }
            let label = "MDP 100 B, majortomo client and worker (Python), one at a time"
            report.compare("\(label): round trip p50 (µs)", other: mean(theirs, \.p50), boardBus: mean(ours, \.p50))
            report.compare("\(label): round trip p99 (µs)", other: mean(theirs, \.p99), boardBus: mean(ours, \.p99))
            report.compare("\(label): round trips per second", other: mean(theirs, \.rate), boardBus: mean(ours, \.rate), decimals: 0)
        }
    }
}
