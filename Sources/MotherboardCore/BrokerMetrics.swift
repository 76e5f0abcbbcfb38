import BusCore
import CoreMetrics
import Foundation
import class Prometheus.PrometheusCollectorRegistry
import struct Prometheus.PrometheusMetricsFactory

/// The broker's metrics, kept through the swift-metrics API in a Prometheus registry of its own
/// (so that several brokers in one test process do not mix): messages in and out per board and
/// kind, errors by code, the round trip of routed commands, activations, restarts, queue depths,
/// monitors. ``exposition()`` renders them in the Prometheus text format (`busctl metrics`,
/// `/metrics`).
///
/// The hot path only increments counters it already holds: each board's are made when it first
/// needs them and kept on its ``LiveBoard``.
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
    }

    /// A board's counters: made at registration, forgotten with it.
    func board(_ name: ScopedName) -> BoardMetrics {
        BoardMetrics(board: name.name, scope: Self.scopeLabel(name.scope), factory: factory)
    }

    static func scopeLabel(_ scope: Scope) -> String { scope.isRoot ? MonitorEvent.rootScope : scope.name }

    /// An error answer, by its code and the board that gave it (`motherboard` for the broker's own).
    func countError(code: String, from board: String) {
        let key = code + "\u{0}" + board
        if let counter = errors[key] { return counter.increment() }
        let counter = Counter(label: "boardbus_errors_total", dimensions: [("code", code), ("board", board)], factory: factory)
        errors[key] = counter
        counter.increment()
    }

    /// Per tick, on the loop thread: the gauges, and the broker's own counts since the last tick.
    func update(
        _ counters: MotherboardCounters, boards live: Int, pending: Int, queued: Int, monitors: Int, monitorDrops: Int,
        restarts records: [ScopedName: Int]
    ) {
        boards.record(live)
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

    /// The Prometheus text exposition format (version 0.0.4).
    public func exposition() -> String {
        registry.emitToString()
    }
}

/// One board's message counters (by direction and kind) and its request round-trip histogram,
/// each made on first use.
final class BoardMetrics {
    private let board: String
    private let scope: String
    private let factory: PrometheusMetricsFactory
    // Touched on the loop thread only.
    @exclusivity(unchecked) private var counters: [Counter?] = Array(repeating: nil, count: 2 * BoardMetrics.kindSlots)
    @exclusivity(unchecked) private var roundTrip: CoreMetrics.Timer?

    init(board: String, scope: String, factory: PrometheusMetricsFactory) {
        self.board = board
        self.scope = scope
        self.factory = factory
    }

    /// A request forwarded to this board was answered after `nanoseconds` (made on first use).
    func recordRoundTrip(_ nanoseconds: Int64) {
        if let roundTrip { return roundTrip.recordNanoseconds(nanoseconds) }
        let timer = CoreMetrics.Timer(
            label: "boardbus_request_duration_seconds", dimensions: [("board", board), ("scope", scope)], factory: factory)
        roundTrip = timer
        timer.recordNanoseconds(nanoseconds)
    }

    static let kindSlots = 18

    /// A message from this connection to the broker.
    func received(_ kind: MessageKind) { count(kind, slot: Int(kind.rawValue)) }

    /// A message from the broker to this connection.
    func sent(_ kind: MessageKind) { count(kind, slot: Self.kindSlots + Int(kind.rawValue)) }

    private func count(_ kind: MessageKind, slot: Int) {
        guard slot < counters.count else { return }
        if let counter = counters[slot] { return counter.increment() }
        let counter = Counter(
            label: "boardbus_messages_total",
            dimensions: [("board", board), ("scope", scope), ("direction", slot < Self.kindSlots ? "in" : "out"), ("kind", "\(kind)")],
            factory: factory)
        counters[slot] = counter
        counter.increment()
    }

    /// Removes the board's series (a board that is gone for good; manifest boards keep theirs).
    func destroy() {
        for counter in counters { counter?.destroy() }
        roundTrip?.destroy()
    }
}
