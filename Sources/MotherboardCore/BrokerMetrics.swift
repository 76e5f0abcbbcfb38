import BusCore
import CoreMetrics
import Foundation
import Synchronization
import class Prometheus.PrometheusCollectorRegistry
import struct Prometheus.PrometheusMetricsFactory

/// The broker's metrics, kept through the swift-metrics API in a Prometheus registry of its own
/// (so that several brokers in one test process do not mix): messages in and out per board and
/// kind, errors by code, the round trip of routed commands, activations, restarts, queue depths,
/// monitors. ``exposition()`` renders them in the Prometheus text format (`busctl metrics`,
/// `/metrics`).
///
/// The hot path only adds to plain integers on each board's ``BoardMetrics`` (kept on its
/// ``LiveBoard``); every tick they are handed to the swift-metrics counters. The request
/// round-trip histograms are kept in fixed buckets the same way and rendered into the same
/// exposition, since a swift-metrics `Timer` takes one value at a time, behind a lock.
public final class BrokerMetrics: @unchecked Sendable {
    public let registry: PrometheusCollectorRegistry
    let factory: PrometheusMetricsFactory

    /// Counters of connections that are not boards (busctl, clients), together.
    let clients: BoardMetrics
    private var errors: [String: Counter] = [:]
    private var restarts: [ScopedName: Counter] = [:]
    private var exported = MotherboardCounters()
    private var exportedDrops = 0
    private var exportedRestarts: [ScopedName: Int] = [:]

    let boards: Gauge
    /// Boards on other hosts whose link is down (kept, shown `unreachable`).
    let unreachableBoards: Gauge
    let pendingRequests: Gauge
    let queuedActivations: Gauge
    let monitorsAttached: Gauge
    let monitorDropped: Counter
    let malformed: Counter
    let undeliverable: Counter
    let timedOut: Counter
    let droppedOutputs: Counter
    let refusedRegistrations: Counter
    let onDemandStarts: Counter
    /// tcp connections refused: `key` not in the allow-list, or their `handshake` failed (no
    /// CURVE, another server key). Counted from the ZAP thread.
    let refusedForKey: Counter
    let refusedInHandshake: Counter

    /// Buckets of the round-trip histograms: 50 µs to 10 s.
    static let durationBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.durationBuckets
        self.factory = factory
        clients = BoardMetrics(board: "(client)", scope: MonitorEvent.rootScope, factory: factory)
        func gauge(_ name: String) -> Gauge { Gauge(label: name, dimensions: [], factory: factory) }
        func counter(_ name: String) -> Counter { Counter(label: name, dimensions: [], factory: factory) }
        boards = gauge("boardbus_boards")
        unreachableBoards = gauge("boardbus_unreachable_boards")
        pendingRequests = gauge("boardbus_pending_requests")
        queuedActivations = gauge("boardbus_queued_activations")
        monitorsAttached = gauge("boardbus_monitors")
        monitorDropped = counter("boardbus_monitor_dropped_total")
        malformed = counter("boardbus_malformed_messages_total")
        undeliverable = counter("boardbus_undeliverable_total")
        timedOut = counter("boardbus_request_timeouts_total")
        droppedOutputs = counter("boardbus_dropped_outputs_total")
        refusedRegistrations = counter("boardbus_refused_registrations_total")
        onDemandStarts = counter("boardbus_on_demand_starts_total")
        refusedForKey = Counter(label: "boardbus_refused_connections_total", dimensions: [("reason", "key")], factory: factory)
        refusedInHandshake = Counter(label: "boardbus_refused_connections_total", dimensions: [("reason", "handshake")], factory: factory)
    }

    /// Every board's counters, by name: live boards', and manifest boards' between their runs.
    // Touched on the loop thread only.
    private var boardMetrics: [ScopedName: BoardMetrics] = [:]
    /// The round-trip histograms as of the last flush, for the exposition (read from any thread).
    private let histograms = Mutex<[ScopedName: RoundTripHistogram]>([:])

    /// A board's counters: a manifest board's are kept across its restarts, another's go with it
    /// (``forget(_:)``).
    func board(_ name: ScopedName) -> BoardMetrics {
        if let known = boardMetrics[name] { return known }
        let made = BoardMetrics(board: name.name, scope: Self.scopeLabel(name.scope), factory: factory)
        boardMetrics[name] = made
        return made
    }

    /// A tcp connection refused by the ZAP handler (any thread: swift-metrics counters are).
    func countRefusedConnection(reason: String) {
        (reason == "key" ? refusedForKey : refusedInHandshake).increment()
    }

    /// A board that is not in the manifest left: its last counts are flushed, then its series go.
    func forget(_ name: ScopedName) {
        guard let gone = boardMetrics.removeValue(forKey: name) else { return }
        _ = gone.flush()
        gone.destroy()
        _ = histograms.withLock { $0.removeValue(forKey: name) }
    }

    /// Hands every board's counts since the last flush to the metrics (each tick, and before an
    /// exposition asked for over the bus).
    func flushBoards() {
        _ = clients.flush()
        var changed: [(ScopedName, RoundTripHistogram)] = []
        for (name, metrics) in boardMetrics {
            if let histogram = metrics.flush() { changed.append((name, histogram)) }
        }
        guard !changed.isEmpty else { return }
        histograms.withLock { histograms in
            for (name, histogram) in changed { histograms[name] = histogram }
        }
    }

    static func scopeLabel(_ scope: Scope) -> String { scope.isRoot ? MonitorEvent.rootScope : scope.name }

    /// An error answer, by its code and the board that gave it (`motherboard` for the broker's own).
    /// A code this version does not define counts as `other`: a board choosing codes cannot make
    /// the broker keep a series per string it makes up.
    func countError(code: String, from board: String) {
        let code = BusError.Code.defined.contains(code) ? code : "other"
        let key = code + "\u{0}" + board
        if let counter = errors[key] { return counter.increment() }
        let counter = Counter(label: "boardbus_errors_total", dimensions: [("code", code), ("board", board)], factory: factory)
        errors[key] = counter
        counter.increment()
    }

    /// Per tick, on the loop thread: the gauges, the boards' counts, and the broker's own counts
    /// since the last tick.
    func update(
        _ counters: MotherboardCounters, boards live: Int, pending: Int, queued: Int, monitors: Int, monitorDrops: Int,
        restarts records: [ScopedName: Int], unreachable lost: Int = 0
    ) {
        flushBoards()
        boards.record(live)
        unreachableBoards.record(lost)
        pendingRequests.record(pending)
        queuedActivations.record(queued)
        monitorsAttached.record(monitors)
        func add(_ counter: Counter, _ now: Int, _ before: Int) { if now > before { counter.increment(by: now - before) } }
        add(malformed, counters.malformedMessages, exported.malformedMessages)
        add(undeliverable, counters.undeliverable, exported.undeliverable)
        add(timedOut, counters.timedOutRequests, exported.timedOutRequests)
        add(droppedOutputs, counters.droppedOutputs, exported.droppedOutputs)
        add(refusedRegistrations, counters.refusedRegistrations, exported.refusedRegistrations)
        add(onDemandStarts, counters.onDemandStarts, exported.onDemandStarts)
        add(monitorDropped, monitorDrops, exportedDrops)
        exported = counters
        exportedDrops = monitorDrops
        for (name, count) in records where count > exportedRestarts[name] ?? 0 {
            let counter =
                restarts[name]
                ?? Counter(
                    label: "boardbus_restarts_total", dimensions: [("board", name.name), ("scope", Self.scopeLabel(name.scope))], factory: factory)
            restarts[name] = counter
            counter.increment(by: count - (exportedRestarts[name] ?? 0))
            exportedRestarts[name] = count
        }
    }

    /// The Prometheus text exposition format (version 0.0.4): the registry's series, and the
    /// round-trip histograms as of the last flush.
    public func exposition() -> String {
        var text = registry.emitToString()
        let histograms = self.histograms.withLock { $0 }
        guard !histograms.isEmpty else { return text }
        text += "# HELP boardbus_request_duration_seconds Forward to answer of the requests the broker forwarded to a board.\n"
        text += "# TYPE boardbus_request_duration_seconds histogram\n"
        for (name, histogram) in histograms.sorted(by: { ($0.key.scope.name, $0.key.name) < ($1.key.scope.name, $1.key.name) }) {
            let labels = "board=\"\(Self.escaped(name.name))\",scope=\"\(Self.escaped(Self.scopeLabel(name.scope)))\""
            histogram.render(name: "boardbus_request_duration_seconds", labels: labels, into: &text)
        }
        return text
    }

    /// A label value as the text format wants it: backslash, quote and newline escaped.
    static func escaped(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}

/// One board's message counters (by direction and kind) and its request round-trip histogram.
///
/// The routing loop only adds to plain integers here (no lock, no atomic, no call through the
/// metrics API: a few nanoseconds a message); every tick, ``flush(into:)`` hands what was added
/// since to the swift-metrics counters, made on first use.
final class BoardMetrics {
    let board: String
    let scope: String
    private let factory: PrometheusMetricsFactory
    // Written on the loop thread only, without checks: plain memory, no copy-on-write test.
    private let counts = UnsafeMutablePointer<Int>.allocate(capacity: 2 * BoardMetrics.kindSlots)
    private let buckets = UnsafeMutablePointer<Int>.allocate(capacity: RoundTripHistogram.bounds.count + 1)
    @exclusivity(unchecked) private var roundTripCount = 0
    @exclusivity(unchecked) private var roundTripNanoseconds: Int64 = 0
    private var exported = [Int](repeating: 0, count: 2 * BoardMetrics.kindSlots)
    private var counters: [Counter?] = Array(repeating: nil, count: 2 * BoardMetrics.kindSlots)
    private var flushedRoundTrips = 0

    init(board: String, scope: String, factory: PrometheusMetricsFactory) {
        self.board = board
        self.scope = scope
        self.factory = factory
        counts.initialize(repeating: 0, count: 2 * Self.kindSlots)
        buckets.initialize(repeating: 0, count: RoundTripHistogram.bounds.count + 1)
    }

    deinit {
        counts.deallocate()
        buckets.deallocate()
    }

    static let kindSlots = 18

    /// A message from this connection to the broker.
    @inline(__always) func received(_ kind: MessageKind) { count(slot: Int(kind.rawValue)) }

    /// A message from the broker to this connection.
    @inline(__always) func sent(_ kind: MessageKind) { count(slot: Self.kindSlots + Int(kind.rawValue)) }

    @inline(__always) private func count(slot: Int) {
        if slot < 2 * Self.kindSlots { counts[slot] &+= 1 }
    }

    /// A request forwarded to this board was answered after `nanoseconds`.
    @inline(__always) func recordRoundTrip(_ nanoseconds: Int64) {
        buckets[RoundTripHistogram.bucket(of: nanoseconds)] &+= 1
        roundTripCount &+= 1
        roundTripNanoseconds &+= max(0, nanoseconds)
    }

    /// The round trips so far.
    var roundTrips: RoundTripHistogram {
        RoundTripHistogram(
            buckets: Array(UnsafeBufferPointer(start: buckets, count: RoundTripHistogram.bounds.count + 1)), count: roundTripCount,
            sumNanoseconds: roundTripNanoseconds)
    }

    /// Hands the counts added since the last flush to the metrics; returns the histogram when it
    /// changed.
    func flush() -> RoundTripHistogram? {
        for slot in 0..<(2 * Self.kindSlots) where counts[slot] != exported[slot] {
            let counter =
                counters[slot]
                ?? Counter(
                    label: "boardbus_messages_total",
                    dimensions: [
                        ("board", board), ("scope", scope), ("direction", slot < Self.kindSlots ? "in" : "out"),
                        ("kind", MessageKind(rawValue: UInt8(slot % Self.kindSlots)).map { "\($0)" } ?? "\(slot % Self.kindSlots)"),
                    ], factory: factory)
            counters[slot] = counter
            counter.increment(by: counts[slot] - exported[slot])
            exported[slot] = counts[slot]
        }
        guard roundTripCount != flushedRoundTrips else { return nil }
        flushedRoundTrips = roundTripCount
        return roundTrips
    }

    /// Removes the board's series (a board that is gone for good; manifest boards keep theirs).
    func destroy() {
        for counter in counters { counter?.destroy() }
    }
}

/// A request round-trip histogram in fixed buckets (``BrokerMetrics/durationBuckets``), kept as
/// plain counts on the routing loop and rendered as a Prometheus histogram.
struct RoundTripHistogram: Sendable, Hashable {
    static let bounds: [Int64] = BrokerMetrics.durationBuckets.map(\.wholeNanoseconds)
    /// Per bucket, not cumulative; the last is above every bound (+Inf).
    var buckets = [Int](repeating: 0, count: RoundTripHistogram.bounds.count + 1)
    var count = 0
    var sumNanoseconds: Int64 = 0

    /// The bucket a duration falls in.
    @inline(__always) static func bucket(of nanoseconds: Int64) -> Int {
        var index = 0
        let bounds = Self.bounds
        while index < bounds.count, nanoseconds > bounds[index] { index += 1 }
        return index
    }

    /// The histogram's lines in the Prometheus text format (`_bucket` cumulative, `_sum`, `_count`).
    func render(name: String, labels: String, into text: inout String) {
        var cumulative = 0
        for (index, bound) in Self.bounds.enumerated() {
            cumulative += buckets[index]
            text += "\(name)_bucket{\(labels),le=\"\(Self.seconds(bound))\"} \(cumulative)\n"
        }
        text += "\(name)_bucket{\(labels),le=\"+Inf\"} \(count)\n"
        text += "\(name)_sum{\(labels)} \(Double(sumNanoseconds) / 1e9)\n"
        text += "\(name)_count{\(labels)} \(count)\n"
    }

    private static func seconds(_ nanoseconds: Int64) -> String {
        let value = Double(nanoseconds) / 1e9
        return value == value.rounded() ? String(format: "%.1f", value) : "\(value)"
    }
}
