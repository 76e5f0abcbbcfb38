import BoardKitTesting
import BusCore
import Foundation
import Testing

/// `busctl monitor --input FILE` reads whatever file it is given as an attacker would write it.
@Suite("Monitor input files", .timeLimit(.minutes(2)))
struct MonitorInputIntegrationTests {
    static func line(time: Double, type: String = "greet") throws -> String {
        let event = MonitorEvent(
            time: time, scope: "/", kind: "command", source: ":00ab", target: "demo.greeter", type: type, correlationID: 1, payloadBytes: 2)
        return String(decoding: try JSONEncoder().encode(event), as: UTF8.self)
    }

    func replay(_ contents: Data, _ arguments: [String] = [], in directory: String) async throws -> ChildProcess.Result {
        let path = "\(directory)/capture.jsonl"
        try contents.write(to: URL(fileURLWithPath: path))
        return try await ChildProcess(
            executable: "\(try TestFleet.locateBinaries())/busctl", arguments: ["monitor", "--input", path] + arguments,
            environment: ProcessInfo.processInfo.environment, directory: directory, name: "replay"
        ).wait(timeout: .seconds(60))
    }

    /// Issue: `"time": 1e300` trapped busctl (SIGILL and a backtrace). Any bad line is one line
    /// naming it, exit 2; the lines before it are shown.
    @Test func aBadLineIsNamedInOneLineNeverACrash() async throws {
        try await withTemporaryDirectory("replay") { directory in
            let good = try Self.line(time: 1_795_472_710)
            let cases: [(lines: [String], says: String)] = [
                ([good, try Self.line(time: 1e300)], "capture.jsonl:2: time 1e+300 is not a time a monitor wrote"),
                ([good, try Self.line(time: -5)], "capture.jsonl:2: time -5.0 is not a time"),
                ([good, good, "{\"time\": 1, \u{1B}[2J"], "capture.jsonl:3: not a monitor line"),
                ([good, String(repeating: "x", count: 2 << 20)], "capture.jsonl:2: a line longer than 1048576 bytes"),
            ]
            for (lines, says) in cases {
                let result = try await replay(Data(lines.joined(separator: "\n").utf8), in: directory)
                #expect(result.exitCode == 2, "\(says): \(result.standardError.prefix(300))")
                #expect(result.standardError.contains(says), "\(result.standardError.prefix(300))")
                #expect(result.standardError.split(separator: "\n").count == 1, "\(result.standardError.prefix(300))")
                #expect(result.standardOutput.split(separator: "\n").count == lines.count - 1, "the good lines before it are shown")
            }
            let binary = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 131) })
            let garbage = try await replay(binary, in: directory)
            #expect(garbage.exitCode == 2 && garbage.standardError.hasPrefix("busctl: badArgument: "), "\(garbage.standardError.prefix(300))")
        }
    }

    /// Issue: a 464 MB capture printed its first line after 29 s and 547 MB of memory, even with
    /// `--count 1`: the file was read whole first. It is read as a stream and stops at the count.
    @Test func aLargeFileIsStreamedAndStopsAtTheCount() async throws {
        try await withTemporaryDirectory("replay-large") { directory in
            let line = Data((try Self.line(time: 1_795_472_710) + "\n").utf8)
            var contents = Data(capacity: line.count * 200_000)
            for _ in 0..<200_000 { contents.append(line) }
            let result = try await replay(contents, ["--count", "1"], in: directory)
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(result.standardOutput.split(separator: "\n").count == 1)
            // Lines across the reads' 64 KiB boundaries (one in about 460 lines) are whole.
            let many = try await replay(contents, ["--count", "6000", "--json"], in: directory)
            let shown = many.standardOutput.split(separator: "\n")
            #expect(line.count * 6000 > 12 * 65_536)
            #expect(shown.count == 6_000)
            #expect(shown.allSatisfy { (try? JSONDecoder().decode(MonitorEvent.self, from: Data($0.utf8))) != nil })
        }
    }
}
