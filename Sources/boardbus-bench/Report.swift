import Foundation

/// The benchmark's table: each figure beside the baseline's and their ratio. The latency and
/// throughput ratios to the C baseline are judged as **guards** (#42): bounds a regression
/// breaks, the same on any of our 2-core machines, not goals (the goals are the counts,
/// `scripts/bench --counts`); the scale, memory and store rows keep their targets.
final class Report {
    private var rows: [[String]] = []
    private var verdicts: [String] = []
    /// BoardBus against itself: a figure without and with a feature, same run.
    private var costs: [[String]] = []
    /// BoardBus against another broker than the C baseline (majortomo's, for MDP).
    private var comparisons: [[String]] = []
    /// BoardBus's raw echo against what users would pick instead (NATS, D-Bus).
    private var alternatives: [[String]] = []
    /// A durable keyed store at a size against the same store with 10 records.
    private var stores: [[String]] = []
    /// Its dispatch round trip against SQLite alone making the same write.
    private var storeAgainstSQLite: [[String]] = []
    /// Lines said under the tables (rows skipped, and why).
    private var notes: [String] = []

    func compare(_ label: String, other: Double, boardBus: Double, decimals: Int = 1) {
        comparisons.append([label, format(other, decimals: decimals), format(boardBus, decimals: decimals), ratio(boardBus, other)])
    }

    func alternative(_ label: String, other: Double, boardBus: Double, decimals: Int = 1) {
        alternatives.append([label, format(other, decimals: decimals), format(boardBus, decimals: decimals), ratio(boardBus, other)])
    }

    func note(_ text: String) {
        notes.append(text)
    }

    /// - Parameter judged: when set, the guards are judged on these figures, named so: p50 within
    ///   `p50Guard` times the baseline's, p99 within twice.
    func latency(_ label: String, baseline: LatencySummary, boardBus: LatencySummary, judged: String? = nil, p50Guard: Double = 1.15) {
        let pairs: [(String, Double, Double)] = [
            ("p50", baseline.p50, boardBus.p50), ("p90", baseline.p90, boardBus.p90),
            ("p99", baseline.p99, boardBus.p99), ("p99.9", baseline.p999, boardBus.p999),
        ]
        for (name, base, bus) in pairs {
            rows.append(["round trip \(label) \(name) (µs)", format(base), format(bus), ratio(bus, base)])
        }
        if let judged {
            guardVerdict(
                "round trip p50 ≤ \(String(format: "%.2f", p50Guard)) × baseline, \(judged)", holds: boardBus.p50 <= p50Guard * baseline.p50,
                ratio: boardBus.p50 / baseline.p50)
            guardVerdict("round trip p99 ≤ 2 × baseline, \(judged)", holds: boardBus.p99 <= 2 * baseline.p99, ratio: boardBus.p99 / baseline.p99)
        }
    }

    /// - Parameter judged: when set, the guard is judged on this figure, named so: at least
    ///   `floor` times the baseline's rate.
    func throughput(_ label: String, baseline: Double, boardBus: Double, judged: String? = nil, floor: Double = 0.33) {
        rows.append(["throughput \(label) (msg/s)", format(baseline, decimals: 0), format(boardBus, decimals: 0), ratio(boardBus, baseline)])
        if let judged {
            guardVerdict(
                "throughput ≥ \(String(format: "%.2f", floor)) × baseline, \(label), \(judged)", holds: boardBus >= floor * baseline,
                ratio: boardBus / baseline)
        }
    }

    func memory(startKiB: Int, endKiB: Int, messages: Int, seconds: Double) {
        let growth = endKiB - startKiB
        rows.append(["broker RSS before → after \(Int(seconds)) s load (KiB)", "", "\(startKiB) → \(endKiB)", ""])
        rows.append(["broker RSS growth per million messages (KiB)", "", format(Double(growth) / max(1, Double(messages)) * 1e6), "\(messages) msgs"])
        // Flat: under 1 KiB per 10 000 messages would still be a leak of 100 B/message; allow allocator noise of 2 MiB.
        verdict("broker memory flat under load", holds: growth < 2048, ratio: nil, detail: "\(growth) KiB over \(messages) messages")
    }

    func churn(_ result: ChurnBench.Result) {
        rows.append(["registering \(result.boards) boards, each on its own connection (s)", "", format(result.registerSeconds, decimals: 2), ""])
        rows.append([
            "broker RSS before → \(result.boards) boards → after they left (KiB)", "",
            "\(result.beforeKiB) → \(result.registeredKiB) → \(result.afterKiB)", "",
        ])
        // Given back: within 8 MiB of where it started (allocator and libzmq caches).
        verdict(
            "broker gives back the memory of boards that left", holds: result.afterKiB - result.beforeKiB < 8192, ratio: nil,
            detail: "\(result.afterKiB - result.beforeKiB) KiB more than before \(result.boards) boards came and went")
    }

    /// The scale rows: round trips with `boards` registered boards and as many flows against 10,
    /// registering them, and the broker's memory per board against a bare ROUTER's per connection.
    func scale(
        boards: Int, p50: (few: Double, many: Double), p99: (few: Double, many: Double), registerSeconds: Double, brokerKiBPerBoard: Double,
        routerKiBPerConnection: Double
    ) {
        rows.append([
            "round trip 100 B p50 with \(boards) boards and \(boards) flows (µs); baseline: with 10 of each", format(p50.few), format(p50.many),
            ratio(p50.many, p50.few),
        ])
        rows.append([
            "round trip 100 B p99 with \(boards) boards and \(boards) flows (µs); baseline: with 10 of each", format(p99.few), format(p99.many),
            ratio(p99.many, p99.few),
        ])
        verdict("p50 with \(boards) boards and flows ≤ 1.1 × with 10", holds: p50.many <= 1.1 * p50.few, ratio: p50.many / p50.few)
        rows.append(["registering \(boards) boards, each on its own connection (s, median of rounds)", "", format(registerSeconds, decimals: 2), ""])
        verdict("registering \(boards) boards ≤ 1 s", holds: registerSeconds <= 1, ratio: nil, detail: String(format: "%.2f s", registerSeconds))
        rows.append([
            "memory per connected board (KiB); baseline: bare ROUTER (zmq_proxy) per connection", format(routerKiBPerConnection),
            format(brokerKiBPerBoard), ratio(brokerKiBPerBoard, routerKiBPerConnection),
        ])
        verdict(
            "broker memory per board ≤ 1.1 × a bare ROUTER's per connection", holds: brokerKiBPerBoard <= 1.1 * routerKiBPerConnection,
            ratio: brokerKiBPerBoard / routerKiBPerConnection)
    }

    /// The store rows of one size, against the same store with `base.size` records.
    func store(_ figures: StoreBench.Figures, base: StoreBench.Figures) {
        let n = figures.size.formatted()
        func row(_ label: String, _ small: Double, _ large: Double, decimals: Int = 1) {
            stores.append(["\(label), \(n) records", format(small, decimals: decimals), format(large, decimals: decimals), ratio(large, small)])
        }
        row("dispatch round trip p50 (µs)", base.p50, figures.p50)
        row("dispatch round trip p99 (µs)", base.p99, figures.p99)
        row("bytes sent to a watcher per change", base.bytesPerChange, figures.bytesPerChange)
        row("owner's resident memory (KiB)", Double(base.ownerKiB), Double(figures.ownerKiB), decimals: 0)
        row("kill -9 of the owner → answering again (ms, with the broker's 100 ms back-off)", base.restartMilliseconds, figures.restartMilliseconds)
        row(
            "database file / the records' own size", Double(base.fileBytes) / Double(max(1, base.recordBytes)),
            Double(figures.fileBytes) / Double(max(1, figures.recordBytes)), decimals: 2)
        if let alone = figures.sqliteAloneMicroseconds {
            storeAgainstSQLite.append(["a place at \(n) records, p50 (µs)", format(alone), format(figures.p50), ratio(figures.p50, alone)])
        }
        guard figures.size != base.size else { return }
        verdict(
            "keyed store dispatch p50 at \(n) records ≤ 1.2 × at \(base.size)", holds: figures.p50 <= 1.2 * base.p50, ratio: figures.p50 / base.p50)
        verdict(
            "bytes per change to a watcher at \(n) records = at \(base.size)", holds: figures.bytesPerChange <= base.bytesPerChange * 1.05,
            ratio: figures.bytesPerChange / max(1, base.bytesPerChange))
    }

    /// A cost row: BoardBus without and with a feature (a monitor attached, trace context).
    func cost(_ label: String, without: Double, with: Double, decimals: Int = 1) {
        costs.append([label, format(without, decimals: decimals), format(with, decimals: decimals), ratio(with, without)])
    }

    /// A count, as a whole number.
    func count(_ label: String, _ value: Int, note: String = "") {
        rows.append([label, "", "\(value)", note])
    }

    func single(_ label: String, milliseconds: Double, unit: String = " (ms)") {
        rows.append(["\(label)\(unit)", "", format(milliseconds, decimals: 2), ""])
    }

    private func verdict(_ target: String, holds: Bool, ratio: Double?, detail: String? = nil) {
        let figure = detail ?? ratio.map { String(format: "%.2f×", $0) } ?? ""
        verdicts.append("\(holds ? "HOLDS " : "MISSED") \(target): \(figure)")
    }

    /// A regression guard's line: `guard ok` while it holds, `BROKEN` when a change (or the
    /// machine) broke it.
    private func guardVerdict(_ bound: String, holds: Bool, ratio: Double) {
        verdicts.append("\(holds ? "guard ok" : "BROKEN  ") \(bound): \(String(format: "%.2f×", ratio))")
    }

    func render() -> String {
        let header = ["metric", "baseline (C zmq_proxy)", "BoardBus", "BoardBus / baseline"]
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        func line(_ row: [String]) -> String {
            "| " + row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
        }
        var text = [line(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
        text += rows.map(line)
        if !costs.isEmpty {
            let header = ["cost of (BoardBus against itself)", "without", "with", "with / without"]
            let all = [header] + costs
            let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
            func costLine(_ row: [String]) -> String {
                "| " + row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
            }
            text += ["", costLine(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
            text += costs.map(costLine)
        }
        text += Self.table(["Flux keyed store, durable (SQLite), against the same store", "10 records", "N records", "N / 10"], stores)
        text += Self.table(
            [
                "a keyed store's write: one transaction of SQLite alone against a dispatch over the bus", "SQLite alone (Python sqlite3)",
                "BoardBus", "BoardBus / SQLite",
            ], storeAgainstSQLite)
        text += Self.table(
            ["BoardBus against majortomo's MDP broker (same client and worker)", "majortomo broker", "BoardBus", "BoardBus / majortomo"], comparisons)
        text += Self.table(
            ["BoardBus raw echo against what users would pick instead (one request at a time)", "that system", "BoardBus", "BoardBus / that"],
            alternatives)
        text.append("")
        text += verdicts
        text += notes
        return text.joined(separator: "\n")
    }

    /// A table after a blank line, or nothing when it has no rows.
    private static func table(_ header: [String], _ rows: [[String]]) -> [String] {
        guard !rows.isEmpty else { return [] }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ row: [String]) -> String {
            "| " + row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
        }
        return ["", line(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"] + rows.map(line)
    }

    private func format(_ value: Double, decimals: Int = 1) -> String {
        String(format: "%.\(decimals)f", value)
    }

    private func ratio(_ value: Double, _ base: Double) -> String {
        base > 0 ? String(format: "%.2f×", value / base) : ""
    }
}
