import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Testing

/// What the tables a peer fills cost the broker, printed (docs/BENCHMARKS.md, "Tables a peer
/// fills"): run with BOARDBUS_MEASURE=1 `swift test --filter TableMeasurements`.
@Suite("Tables a peer fills, measured", .serialized, .enabled(if: ProcessInfo.processInfo.environment["BOARDBUS_MEASURE"] == "1"))
struct TableMeasurements {
    static func rss(_ pid: Int32) -> Int {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
        }
        return 0
    }

    /// 200 000 renewals of 250-byte names nobody owns, then 200 000 commands with a 49-day
    /// deadline to a board that never answers, from one client that then leaves: the broker's RSS
    /// before, with the client, and 3 s after it left.
    @Test func twoHundredThousandRenewalsAndNeverAnsweredCommands() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let endpoint = fleet.address.endpoint
            let pid = fleet.brokerPID
            let stop = Flag()
            async let board: Void = BoundsIntegrationTests.sink(at: endpoint, until: stop)
            _ = try await eventually { try await fleet.busctl("status", "far.sink").exitCode == 0 }
            try await Task.sleep(for: .seconds(1))
            let before = Self.rss(pid)
            let name = String(repeating: "n", count: 240)
            let (during, busy) = try await withRawDealer(connectedTo: endpoint, configure: { try $0.set(.linger(.zero)) }) {
                client -> (Int, Int) in
                for number in 0..<200_000 {
                    let renew = EnvelopeHeader(kind: .store, target: "\(name).\(number)", typeName: StoreOperation.renew)
                    let frames = try Envelope(header: renew).frames()
                    while try client.send(frames) != .sent { usleep(100) }
                }
                var busy = 0
                for number in 0..<200_000 {
                    let command = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(number + 1), timeoutMilliseconds: .max, target: "far.sink",
                        typeName: "hold")
                    let frames = try Envelope(header: command, payload: Data("{}".utf8)).frames()
                    while try client.send(frames) != .sent {
                        while client.waitReadable(timeoutMilliseconds: 0), try client.receive() != nil { busy += 1 }
                        usleep(100)
                    }
                    while client.waitReadable(timeoutMilliseconds: 0), try client.receive() != nil { busy += 1 }
                }
                // Answered after everything before it was routed.
                let ping = EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 999_999_999, timeoutMilliseconds: 60_000, target: "demo.greeter",
                    typeName: "ping")
                _ = try client.send(try Envelope(header: ping, payload: Data(#"{"sequence":1}"#.utf8)).frames())
                while client.waitReadable(timeoutMilliseconds: 60_000), let frames = try client.receive() {
                    busy += 1
                    if try Envelope(frames: frames).header.correlationID == 999_999_999 { break }
                }
                return (TableMeasurements.rss(pid), busy)
            }
            try await Task.sleep(for: .seconds(3))
            let after = Self.rss(pid)
            let metrics = try await fleet.busctl("metrics").standardOutput.split(separator: "\n").filter {
                $0.hasPrefix("boardbus_store_subscriptions") || $0.hasPrefix("boardbus_pending") || $0.hasPrefix("boardbus_refused_subscriptions")
                    || $0.hasPrefix("boardbus_refused_pending") || $0.hasPrefix("boardbus_peers_left")
            }
            stop.set()
            try await board
            print("broker RSS before \(before) kB, with the client \(during) kB, 3 s after it left \(after) kB; answers \(busy); \(metrics)")
        }
    }
}
