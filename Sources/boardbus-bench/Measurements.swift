import BusCore
import Foundation
import Histogram

/// Latency percentiles of one scenario, in microseconds.
struct LatencySummary {
    var p50: Double
    var p90: Double
    var p99: Double
    var p999: Double
    var count: UInt64

    init(_ histogram: Histogram<UInt64>) {
        // The histogram records nanoseconds.
        func micros(_ percentile: Double) -> Double { Double(histogram.valueAtPercentile(percentile)) / 1000 }
        p50 = micros(50)
        p90 = micros(90)
        p99 = micros(99)
        p999 = micros(99.9)
        count = histogram.totalCount
    }
}

/// A histogram of nanoseconds from 100 ns to 10 s with three significant digits.
func makeHistogram() -> Histogram<UInt64> {
    Histogram<UInt64>(lowestDiscernibleValue: 100, highestTrackableValue: 10_000_000_000, numberOfSignificantValueDigits: .three)
}

/// Resident memory of a process, in KiB, from /proc.
func residentKiB(of pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    }
    return nil
}

/// How hard each scenario runs.
struct BenchSettings {
    var latencyRequests: Int
    var warmupRequests: Int
    var largeLatencyRequests: Int
    var throughputSeconds: Double
    var clients: Int
    var window: Int
    var memorySeconds: Double
    /// Boards registered and unregistered in the churn row.
    var churnBoards = 2_000
    var coldStarts: Int
    var busctlRuns: Int
    /// The scale rows: boards (and flows), round trips at each size, rounds.
    var scaleBoards = 2_000
    var scaleRequests = 20_000
    var scaleRounds = 3
    /// The throughput sweep at 100 B: (connections, requests in flight on each).
    var windows: [(Int, Int)] = [(1, 100), (4, 16), (4, 100), (1, 1000)]
    /// Seconds of each round of each window, and rounds.
    var sweepSeconds = 1.5
    var sweepRounds = 3

    static let quick = BenchSettings(
        latencyRequests: 5_000, warmupRequests: 500, largeLatencyRequests: 1_000, throughputSeconds: 2,
        clients: 4, window: 16, memorySeconds: 4, coldStarts: 3, busctlRuns: 10, scaleRequests: 2_000, scaleRounds: 1, sweepSeconds: 0.4,
        sweepRounds: 1)
    static let full = BenchSettings(
        latencyRequests: 50_000, warmupRequests: 2_000, largeLatencyRequests: 5_000, throughputSeconds: 10,
        clients: 4, window: 16, memorySeconds: 60, coldStarts: 10, busctlRuns: 30)
}

/// The payload of a request: a JSON echo command of about `bytes` bytes.
func echoPayload(bytes: Int) -> Data {
    let filler = String(repeating: "x", count: max(0, bytes - 11))
    return Data(#"{"data":"\#(filler)"}"#.utf8)
}
