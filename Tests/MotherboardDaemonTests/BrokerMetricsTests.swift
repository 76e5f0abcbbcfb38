import BusCore
import Foundation
import Testing

@testable import MotherboardCore
import MotherboardDaemon

/// The broker's metrics on their own: counts reach the exposition at a flush, the round-trip
/// histogram is cumulative, and nothing a peer sends can make the broker keep a series per string.
@Suite("Broker metrics")
struct BrokerMetricsTests {
    let greeter = ScopedName(scope: "", name: "demo.greeter")

    @Test func countsReachTheExpositionAtAFlush() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let board = metrics.board(greeter)
        for _ in 0..<3 { board.sent(.command) }
        board.received(.reply)
        #expect(!metrics.exposition().contains("boardbus_messages_total"))
        metrics.flushBoards()
        let text = metrics.exposition()
        #expect(text.contains(#"boardbus_messages_total{board="demo.greeter",scope="/",direction="out",kind="command"} 3"#))
        #expect(text.contains(#"boardbus_messages_total{board="demo.greeter",scope="/",direction="in",kind="reply"} 1"#))
        board.sent(.command)
        metrics.flushBoards()
        #expect(metrics.exposition().contains(#"direction="out",kind="command"} 4"#))
    }

    /// The counters keep only what counted since the last flush; the totals add up across
    /// flushes, with kinds that start counting later falling in among those that counted before.
    @Test func totalsAddUpAcrossFlushesAsNewKindsAppear() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let board = metrics.board(greeter)
        func line(_ direction: String, _ kind: String) -> String? {
            metrics.exposition().split(separator: "\n").first {
                $0.contains(#"board="demo.greeter""#) && $0.contains(#"direction="\#(direction)",kind="\#(kind)""#)
            }
            .map(String.init)
        }
        board.received(.error)
        board.sent(.heartbeat)
        metrics.flushBoards()
        for round in 1...5 {
            board.received(.command)  // a slot before the ones that counted first
            if round == 3 { board.sent(.reply) }  // and one between them, once
            metrics.flushBoards()
        }
        metrics.flushBoards()  // nothing counted since: the totals stay
        #expect(line("in", "command")?.hasSuffix(" 5") == true, "\(line("in", "command") ?? "none")")
        #expect(line("in", "error")?.hasSuffix(" 1") == true)
        #expect(line("out", "heartbeat")?.hasSuffix(" 1") == true)
        #expect(line("out", "reply")?.hasSuffix(" 1") == true)
        #expect(metrics.exposition().split(separator: "\n").filter { $0.hasPrefix("boardbus_messages_total{board=\"demo.greeter\"") }.count == 4)
    }

    /// Only what counted is kept and shown: a board that never answered a request has no
    /// histogram, and a kind it never sent or received has no line (the snapshot is sparse).
    @Test func aQuietBoardShowsOnlyWhatItCounted() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let board = metrics.board(greeter)
        board.received(.heartbeat)
        board.sent(.heartbeat)
        board.received(.error)
        metrics.flushBoards()
        let lines = metrics.exposition().split(separator: "\n").filter { $0.contains(#"board="demo.greeter""#) }
        #expect(lines.filter { $0.hasPrefix("boardbus_messages_total") }.count == 3)
        #expect(lines.contains(#"boardbus_messages_total{board="demo.greeter",scope="/",direction="in",kind="error"} 1"#))
        #expect(!lines.contains { $0.hasPrefix("boardbus_request_duration_seconds") })
        board.recordRoundTrip(1_000)
        metrics.flushBoards()
        #expect(metrics.exposition().contains(#"boardbus_request_duration_seconds_count{board="demo.greeter",scope="/"} 1"#))
    }

    @Test func theRoundTripHistogramIsCumulativeWithSumAndCount() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let board = metrics.board(greeter)
        for nanoseconds: Int64 in [40_000, 50_000, 300_000, 20_000_000_000, -5] { board.recordRoundTrip(nanoseconds) }
        metrics.flushBoards()
        let text = metrics.exposition()
        let labels = #"board="demo.greeter",scope="/""#
        #expect(text.contains("# TYPE boardbus_request_duration_seconds histogram"))
        #expect(text.contains(#"boardbus_request_duration_seconds_bucket{\#(labels),le="5e-05"} 3"#))
        #expect(text.contains(#"boardbus_request_duration_seconds_bucket{\#(labels),le="0.0005"} 4"#))
        #expect(text.contains(#"boardbus_request_duration_seconds_bucket{\#(labels),le="10.0"} 4"#))
        #expect(text.contains(#"boardbus_request_duration_seconds_bucket{\#(labels),le="+Inf"} 5"#))
        #expect(text.contains(#"boardbus_request_duration_seconds_count{\#(labels)} 5"#))
        #expect(text.contains(#"boardbus_request_duration_seconds_sum{\#(labels)} 20.00039"#))
    }

    /// A board answering with made-up error codes: all of them count as `other`.
    @Test func madeUpErrorCodesShareOneSeries() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        for index in 0..<1000 { metrics.countError(code: "code\(index)\"\n", from: "demo.greeter") }
        metrics.countError(code: BusError.Code.busy.name, from: "demo.greeter")
        let text = metrics.exposition()
        #expect(text.contains(#"boardbus_errors_total{code="other",board="demo.greeter"} 1000"#))
        #expect(text.contains(#"boardbus_errors_total{code="busy",board="demo.greeter"} 1"#))
        #expect(text.components(separatedBy: "boardbus_errors_total{").count == 3)
    }

    /// A board that is not in the manifest leaves no series behind.
    @Test func aForgottenBoardsSeriesGo() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let board = metrics.board(greeter)
        board.sent(.command)
        board.recordRoundTrip(1000)
        metrics.flushBoards()
        #expect(metrics.exposition().contains("demo.greeter"))
        metrics.forget(greeter)
        #expect(!metrics.exposition().contains("demo.greeter"))
    }

    /// Counts made between a flush and the board being forgotten do not bring its series back
    /// at the next flush, and a flush with nothing counted keeps what was shown.
    @Test func aBoardForgottenBeforeTheFlushStaysForgotten() {
        let metrics = BrokerMetrics(series: PrometheusSeries())
        let other = ScopedName(scope: "", name: "demo.other")
        metrics.board(other).sent(.command)
        metrics.flushBoards()
        let board = metrics.board(greeter)
        board.sent(.command)
        metrics.forget(greeter)
        metrics.flushBoards()
        metrics.flushBoards()
        let text = metrics.exposition()
        #expect(!text.contains("demo.greeter"))
        #expect(text.contains(#"boardbus_messages_total{board="demo.other",scope="/",direction="out",kind="command"} 1"#))
    }
}
