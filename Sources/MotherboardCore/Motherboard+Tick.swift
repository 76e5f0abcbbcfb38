import BusCore
import Foundation
import Logging

/// What the broker does every tick: heartbeats and liveness, deadlines, starts and restarts,
/// deliveries due again, monitors, metrics.
extension Motherboard {
    /// Heartbeats boards, drops the gone ones and fails requests and starts past their deadline.
    ///
    /// A board silent for the liveness timeout is gone, unless it is only busy: a local board
    /// whose process (known from its connection, not from what it claims) still runs and is not
    /// stopped (a signal, a debugger, a frozen cgroup). A process that is gone closes its
    /// connection, so the next heartbeat sent to it fails and drops the board. A handler that
    /// holds the board's thread (a lock, a long computation) delays only the requests behind it,
    /// each of which keeps its own deadline.
    public func tick(now: ContinuousClock.Instant) {
        var silent: [LiveBoard] = []
        for board in registry.boards.values {
            if board.lastSeen.duration(to: now) > settings.livenessTimeout {
                guard isBusy(board) else {
                    silent.append(board)
                    continue
                }
                if board.busySince == nil {
                    board.busySince = board.lastSeen
                    logger.notice(
                        "board busy: silent past the liveness timeout, its process and connection alive",
                        metadata: ["board": "\(board.name)", "pid": "\(board.process ?? 0)", "silentFor": "\(settings.livenessTimeout)"])
                }
                watch(board, now: now)
            } else if let since = board.busySince {
                board.busySince = nil
                // A process that outlived SIGABRT and speaks again is watched afresh.
                (board.watchdogFired, board.watchdogKilled) = (nil, false)
                logger.notice("board answers again", metadata: ["board": "\(board.name)", "busyFor": "\(since.duration(to: now))"])
            }
            if board.takeHeartbeat(at: now, every: settings.heartbeatInterval) {
                send(Envelope(header: EnvelopeHeader(kind: .heartbeat, target: board.id.rawValue, scope: board.scope)), to: board.peer)
            }
        }
        for board in silent { dropFailed(board, reason: "no heartbeat for \(settings.livenessTimeout)", now: now) }
        checkAdoptedProcesses(now: now)
        forgetLongUnreachable(now: now)
        for request in replies.takeExpired(now: now) {
            counters.timedOutRequests += 1
            finish(request, .failure(BusError(.timeout, "board '\(request.board)' did not answer in time")))
        }
        for name in supervisor.overdueStarts(now: now, timeout: settings.startTimeout) {
            failStart(name, BusError(.boardNotRunning, "board '\(name)' did not register within \(settings.startTimeout) of its start"))
        }
        restartDueBoards(now: now)
        redeliverEndedHolding(now: now)
        redeliverDueRetries(now: now)
        for name in deliveries.takeRestoredDue(now: now) { redeliverRestored(name, now: now) }
        if !monitors.isEmpty { tickMonitors(now: now) }
        refreshMetrics()
    }

    /// Brings the gauges and the broker's own counts up to date in the metrics.
    func refreshMetrics() {
        metrics.update(
            counters, boards: registry.boards.count, pending: replies.count, queued: supervisor.starting.values.reduce(0) { $0 + $1.queue.count },
            monitors: monitors.count, monitorDrops: monitors.droppedTotal, restarts: supervisor.records.mapValues(\.restarts),
            unreachable: links.unreachable.count, subscriptions: subscriptions.count)
    }

    /// A busy board past its watchdog is stuck: its process is sent SIGABRT, and SIGKILL
    /// ``watchdogGrace`` later if it still runs. Its end is then any process's end (its
    /// activations delivered again, its restart policy applied).
    func watch(_ board: LiveBoard, now: ContinuousClock.Instant) {
        guard let watchdog = board.watchdog, let process = board.process, let producer, board.lastSeen.duration(to: now) > watchdog else {
            return
        }
        guard let fired = board.watchdogFired else {
            board.watchdogFired = now
            counters.watchdogEnds += 1
            logger.error(
                "watchdog: board stuck, its process sent SIGABRT",
                metadata: ["board": "\(board.name)", "pid": "\(process)", "silentFor": "\(board.lastSeen.duration(to: now))"])
            return producer.end(process, .abort)
        }
        if !board.watchdogKilled, fired.duration(to: now) > Self.watchdogGrace {
            board.watchdogKilled = true
            logger.error("watchdog: the stuck board outlived SIGABRT, sent SIGKILL", metadata: ["board": "\(board.name)", "pid": "\(process)"])
            producer.end(process, .kill)
        }
    }

    /// How long a stuck board's process has after SIGABRT (to write its core) before SIGKILL.
    static let watchdogGrace: Duration = .seconds(5)

    /// Whether a silent board is only busy: its connection is one whose other end the kernel
    /// named at registration, and that process still runs, not stopped.
    func isBusy(_ board: LiveBoard) -> Bool {
        guard let process = board.process, let producer else { return false }
        return producer.isRunning(process) && !producer.isStopped(process)
    }
}
