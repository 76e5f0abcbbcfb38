import BusCore
import CoreMetrics
import Foundation
import Synchronization

/// Where the broker's named series (counters and gauges made through the swift-metrics API) are
/// kept, and how they read in the Prometheus text format. The daemon gives each broker a
/// Prometheus registry of its own (several brokers in one test process do not mix); the core
/// links no metrics backend.
public protocol MetricsSeriesStore: Sendable {
    var factory: any MetricsFactory { get }
    /// The series in the text exposition format (version 0.0.4).
    func render() -> String
}

/// No named series: a broker without a backend (the in-process fleet) renders only its boards'
/// message counters and round trips.
public struct UnkeptSeries: MetricsSeriesStore {
    public init() {}
    public var factory: any MetricsFactory { NOOPMetricsHandler.instance }
    public func render() -> String { "" }
}

/// The broker's metrics, kept through the swift-metrics API in a ``MetricsSeriesStore``: messages in and out per board and
/// kind, errors by code, the round trip of routed commands, activations, restarts, queue depths,
/// monitors. ``exposition()`` renders them in the Prometheus text format (`busctl metrics`,
/// `/metrics`).
///
/// The hot path only adds to plain integers on each board's ``BoardMetrics`` (kept on its
/// ``LiveBoard``); every tick a snapshot of what changed is published for the exposition. The
/// per-board series (messages by kind, request round-trip histograms) are rendered by this type
/// into the same exposition rather than kept as swift-metrics objects: a swift-metrics `Timer`
/// takes one value at a time behind a lock, and the Prometheus registry copies its table of a
/// metric's label sets on every new series, which made thousands of boards registering cost the
/// broker seconds of CPU (quadratic in the boards).
public final class BrokerMetrics: @unchecked Sendable {
    public let series: any MetricsSeriesStore
    let factory: any MetricsFactory

    /// Counters of connections that are not boards (busctl, clients), together.
    let clients: BoardMetrics
    private var errors: [String: Counter] = [:]
    private var denials: [String: Counter] = [:]
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
    let redeliveries: Counter
    let deadLettered: Counter
    let failedDeliveries: Counter
    let watchdogEnds: Counter
    let refusedInputs: Counter
    let refusedPending: Counter
    let refusedSubscriptions: Counter
    let peersLeft: Counter
    /// Store subscriptions held, all peers together.
    let storeSubscriptions: Gauge
    /// Connections refused: `key` not in the allow-list, their `handshake` failed (no CURVE,
    /// another server key), or over the connection `limit`. Counted from the ZAP and connection
    /// watch threads.
    let refusedForKey: Counter
    let refusedInHandshake: Counter
    let refusedAtLimit: Counter

    /// Buckets of the round-trip histograms: 50 µs to 10 s.
    static let durationBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init(series: any MetricsSeriesStore = UnkeptSeries()) {
        self.series = series
        let factory = series.factory
        self.factory = factory
        clients = BoardMetrics(key: Self.clientsKey, changed: changed)
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
        redeliveries = counter("boardbus_redeliveries_total")
        deadLettered = counter("boardbus_dead_letters_total")
        failedDeliveries = counter("boardbus_failed_deliveries_total")
        watchdogEnds = counter("boardbus_watchdog_ends_total")
        refusedInputs = counter("boardbus_refused_inputs_total")
        refusedPending = counter("boardbus_refused_pending_total")
        refusedSubscriptions = counter("boardbus_refused_subscriptions_total")
        peersLeft = counter("boardbus_peers_left_total")
        storeSubscriptions = gauge("boardbus_store_subscriptions")
        refusedForKey = Counter(label: "boardbus_refused_connections_total", dimensions: [("reason", "key")], factory: factory)
        refusedInHandshake = Counter(label: "boardbus_refused_connections_total", dimensions: [("reason", "handshake")], factory: factory)
        refusedAtLimit = Counter(label: "boardbus_refused_connections_total", dimensions: [("reason", "limit")], factory: factory)
        boardMetrics.withLock { $0[Self.clientsKey] = clients }
    }

    /// Every board's counters, by name: live boards', and manifest boards' between their runs,
    /// each with its snapshot as of the last flush (and the clients' under ``clientsKey``). The
    /// loop thread adds, removes and flushes; the exposition reads from any thread: under a lock
    /// taken at registration, leave, flush and exposition, never per message. One table for
    /// both, not a second one of snapshots (about 110 bytes a board).
    private let boardMetrics = Mutex<[ScopedName: BoardMetrics]>([:])
    /// The counters that counted since the last flush (loop thread only): a flush looks at these,
    /// not at every board.
    private let changed = ChangedBoards()

    // The changed counters and their list refer to each other until a flush.
    deinit { changed.boards.removeAll() }
    /// The key of the clients' series (no board id has parentheses).
    private static let clientsKey = ScopedName(scope: .root, name: "(client)")

    /// A board's counters: a manifest board's are kept across its restarts, another's go with it
    /// (``forget(_:)``).
    func board(_ name: ScopedName) -> BoardMetrics {
        boardMetrics.withLock { boards in
            if let known = boards[name] { return known }
            let made = BoardMetrics(key: name, changed: changed)
            boards[name] = made
            return made
        }
    }

    /// A tcp connection refused by the ZAP handler (any thread: swift-metrics counters are).
    package func countRefusedConnection(reason: String) {
        switch reason {
        case "key": refusedForKey.increment()
        case "limit": refusedAtLimit.increment()
        default: refusedInHandshake.increment()
        }
    }

    /// A board that is not in the manifest left: its series go.
    func forget(_ name: ScopedName) {
        _ = boardMetrics.withLock { $0.removeValue(forKey: name) }
    }

    /// Publishes every board's counts that changed since the last flush for the exposition (each
    /// tick, and before an exposition asked for over the bus).
    func flushBoards() {
        guard !changed.boards.isEmpty else { return }
        // Counted here; published under the lock. (A board forgotten since it counted is in the
        // table no more: its snapshot goes with it.)
        let snapshots = changed.boards.map { ($0, $0.flush()) }
        changed.boards.forEach { $0.listed = false }
        changed.boards.removeAll(keepingCapacity: true)
        boardMetrics.withLock { _ in
            for (board, snapshot) in snapshots { board.snapshot = snapshot }
        }
    }

    static func scopeLabel(_ scope: Scope) -> String { scope.isRoot ? MonitorEvent.rootScope : scope.name }

    /// An error answer, by its code and the board that gave it (`motherboard` for the broker's own).
    /// A code this version does not define counts as `other`: a board choosing codes cannot make
    /// the broker keep a series per string it makes up.
    /// A request the access policy refused (`boardbus_denied_total{principal,operation}`; the
    /// principals are the allow-list's names, so the series are as many as its keys).
    func countDenied(principal: String, operation: String) {
        let key = principal + "\u{0}" + operation
        if let counter = denials[key] { return counter.increment() }
        let counter = Counter(label: "boardbus_denied_total", dimensions: [("principal", principal), ("operation", operation)], factory: factory)
        denials[key] = counter
        counter.increment()
    }

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
        restarts records: [ScopedName: Int], unreachable lost: Int = 0, subscriptions: Int = 0
    ) {
        flushBoards()
        boards.record(live)
        unreachableBoards.record(lost)
        pendingRequests.record(pending)
        queuedActivations.record(queued)
        monitorsAttached.record(monitors)
        storeSubscriptions.record(subscriptions)
        func add(_ counter: Counter, _ now: Int, _ before: Int) { if now > before { counter.increment(by: now - before) } }
        add(malformed, counters.malformedMessages, exported.malformedMessages)
        add(undeliverable, counters.undeliverable, exported.undeliverable)
        add(timedOut, counters.timedOutRequests, exported.timedOutRequests)
        add(droppedOutputs, counters.droppedOutputs, exported.droppedOutputs)
        add(refusedRegistrations, counters.refusedRegistrations, exported.refusedRegistrations)
        add(onDemandStarts, counters.onDemandStarts, exported.onDemandStarts)
        add(redeliveries, counters.redeliveries, exported.redeliveries)
        add(deadLettered, counters.deadLettered, exported.deadLettered)
        add(failedDeliveries, counters.failedDeliveries, exported.failedDeliveries)
        add(watchdogEnds, counters.watchdogEnds, exported.watchdogEnds)
        add(refusedInputs, counters.refusedInputs, exported.refusedInputs)
        add(refusedPending, counters.refusedPending, exported.refusedPending)
        add(refusedSubscriptions, counters.refusedSubscriptions, exported.refusedSubscriptions)
        add(peersLeft, counters.peersLeft, exported.peersLeft)
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

    /// The Prometheus text exposition format (version 0.0.4): the named series, then each
    /// board's message counts and round-trip histogram as of the last flush.
    public func exposition() -> String {
        var text = series.render()
        // Named by their keys here, not in each snapshot (2 000 boards' snapshots are kept).
        let series = boardMetrics.withLock { boards in
            boards.compactMap { key, board in board.snapshot.map { BoardSeries.Named(board: key.name, scope: Self.scopeLabel(key.scope), series: $0) }
            }
        }
        .sorted { ($0.scope, $0.board) < ($1.scope, $1.board) }
        guard !series.isEmpty else { return text }
        text += "# HELP boardbus_messages_total Messages from each connection to the broker (in) and from the broker to it (out), by kind.\n"
        text += "# TYPE boardbus_messages_total counter\n"
        for board in series {
            board.series.renderMessages(name: "boardbus_messages_total", labels: board.labels, into: &text)
        }
        let timed = series.filter { $0.series.roundTrips != nil }
        guard !timed.isEmpty else { return text }
        text += "# HELP boardbus_request_duration_seconds Forward to answer of the requests the broker forwarded to a board.\n"
        text += "# TYPE boardbus_request_duration_seconds histogram\n"
        for board in timed {
            board.series.roundTrips?.render(name: "boardbus_request_duration_seconds", labels: board.labels, into: &text)
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
/// metrics API: a few nanoseconds a message); every tick, ``flush()`` takes a snapshot of them
/// when they changed, which the exposition renders.
final class BoardMetrics {
    let key: ScopedName
    /// Where the counters put themselves on their first count since a flush.
    private let changed: ChangedBoards
    /// Whether they are in `changed` now.
    @exclusivity(unchecked) fileprivate var listed = false
    /// The counts as of the last flush, for the exposition: read and written under the lock of
    /// the metrics' table only; nil until the first.
    fileprivate var snapshot: BoardSeries?
    // Written on the loop thread only, without checks: plain memory, no copy-on-write test.
    /// The counts since the last flush, in 32 bits (half the memory of a board's counters): a
    /// flush comes every tick, and no connection sends or gets 2^32 messages between two.
    private let counts = UnsafeMutablePointer<UInt32>.allocate(capacity: 2 * BoardMetrics.kindSlots)
    /// The totals as of the last flush, only the slots that counted; the snapshot the exposition
    /// reads shares this array's storage.
    @exclusivity(unchecked) private var totals: [BoardSeries.Count] = []
    /// Allocated at the first round trip: most boards never answer a request (about 140 bytes
    /// a board of 2 000).
    @exclusivity(unchecked) private var buckets: UnsafeMutablePointer<Int>?
    @exclusivity(unchecked) private var roundTripCount = 0
    @exclusivity(unchecked) private var roundTripNanoseconds: Int64 = 0

    init(key: ScopedName, changed: ChangedBoards) {
        self.key = key
        self.changed = changed
        counts.initialize(repeating: 0, count: 2 * Self.kindSlots)
    }

    deinit {
        counts.deallocate()
        buckets?.deallocate()
    }

    static let kindSlots = 18

    /// A message from this connection to the broker.
    @inline(__always) func received(_ kind: MessageKind) { count(slot: Int(kind.rawValue)) }

    /// A message from the broker to this connection.
    @inline(__always) func sent(_ kind: MessageKind) { count(slot: Self.kindSlots + Int(kind.rawValue)) }

    @inline(__always) private func count(slot: Int) {
        if slot < 2 * Self.kindSlots { counts[slot] &+= 1 }
        if !listed { markChanged() }
    }

    private func markChanged() {
        listed = true
        changed.boards.append(self)
    }

    /// A request forwarded to this board was answered after `nanoseconds`.
    @inline(__always) func recordRoundTrip(_ nanoseconds: Int64) {
        let buckets = self.buckets ?? makeBuckets()
        buckets[RoundTripHistogram.bucket(of: nanoseconds)] &+= 1
        roundTripCount &+= 1
        roundTripNanoseconds &+= max(0, nanoseconds)
        if !listed { markChanged() }
    }

    private func makeBuckets() -> UnsafeMutablePointer<Int> {
        let made = UnsafeMutablePointer<Int>.allocate(capacity: RoundTripHistogram.bounds.count + 1)
        made.initialize(repeating: 0, count: RoundTripHistogram.bounds.count + 1)
        buckets = made
        return made
    }

    /// The round trips so far.
    var roundTrips: RoundTripHistogram {
        guard let buckets else { return RoundTripHistogram() }
        return RoundTripHistogram(
            buckets: Array(UnsafeBufferPointer(start: buckets, count: RoundTripHistogram.bounds.count + 1)), count: roundTripCount,
            sumNanoseconds: roundTripNanoseconds)
    }

    /// A snapshot of the counts: only the kinds that counted (a board uses a few of them).
    func flush() -> BoardSeries {
        let slots = 0..<2 * Self.kindSlots
        // The totals plus the counts since, slot by slot (both in slot order), into an array
        // sized exactly: one allocation per flush, none left over from growing.
        func merge(_ each: (_ slot: Int, _ total: Int) -> Void) {
            var index = 0
            for slot in slots {
                var total = Int(counts[slot])
                if index < totals.count, Int(totals[index].slot) == slot {
                    total += totals[index].count
                    index += 1
                }
                if total > 0 { each(slot, total) }
            }
        }
        var size = 0
        merge { _, _ in size += 1 }
        var merged: [BoardSeries.Count] = []
        merged.reserveCapacity(size)
        merge { slot, total in merged.append(BoardSeries.Count(slot: slot, count: total)) }
        counts.update(repeating: 0, count: slots.count)
        totals = merged
        return BoardSeries(messages: merged, roundTrips: roundTripCount > 0 ? roundTrips : nil)
    }
}

/// The board counters that counted since the last flush, each once.
final class ChangedBoards {
    var boards: [BoardMetrics] = []
}

/// What the exposition shows of one board (or of the clients together), as of a flush; its name
/// is its key in the snapshot table.
struct BoardSeries: Sendable {
    /// A message counter that counted: its slot (the first ``BoardMetrics/kindSlots`` in, to the
    /// broker, then out) and count, in one word (the slot in the top byte: a count does not reach
    /// 2^56).
    struct Count: Sendable {
        private let word: UInt64

        init(slot: Int, count: Int) {
            word = UInt64(slot) << 56 | UInt64(count) & (1 << 56 - 1)
        }

        var slot: UInt8 { UInt8(word >> 56) }
        var count: Int { Int(word & (1 << 56 - 1)) }
    }

    /// The counters that counted, by slot.
    var messages: [Count]
    var roundTrips: RoundTripHistogram?

    /// A board's series with its name, for the exposition.
    struct Named {
        var board: String
        var scope: String
        var series: BoardSeries

        var labels: String {
            "board=\"\(BrokerMetrics.escaped(board))\",scope=\"\(BrokerMetrics.escaped(scope))\""
        }
    }

    /// A counter line per direction and kind that has counted anything.
    func renderMessages(name: String, labels: String, into text: inout String) {
        for message in messages {
            let (slot, count) = (Int(message.slot), message.count)
            let kind = MessageKind(rawValue: UInt8(slot % BoardMetrics.kindSlots)).map { "\($0)" } ?? "\(slot % BoardMetrics.kindSlots)"
            let direction = slot < BoardMetrics.kindSlots ? "in" : "out"
            text += "\(name){\(labels),direction=\"\(direction)\",kind=\"\(kind)\"} \(count)\n"
        }
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
