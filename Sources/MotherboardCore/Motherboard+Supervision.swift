import BusCore
import Foundation

/// Supervision: the broker starts the manifest's board processes, notices when they end, and
/// restarts them according to their policy, with exponential back-off (100 ms doubling up to
/// 30 s) and a limit on restarts in a window. Work for a board that is restarting waits in its
/// start queue and is delivered when it registers again.
extension Motherboard {
    /// What the broker remembers of a supervised board's processes.
    struct Supervision {
        /// When each restart happened (pruned to the limit's window).
        var restartTimes: [ContinuousClock.Instant] = []
        var restarts = 0
        var lastExit: String?
        /// Set when the restart limit was reached: the board stays down.
        var failed = false
    }

    static let initialBackoff = Duration.milliseconds(100)
    static let maximumBackoff = Duration.seconds(30)

    /// Starts every always-on board of the manifest, adopting the live processes an earlier broker
    /// of this fleet left behind (after a broker crash) instead of starting them twice.
    public func startFleet(now: ContinuousClock.Instant) throws {
        guard let producer else { return }
        for entry in manifest.boards where entry.start == .always {
            let name = ScopedName(scope: entry.scope, name: entry.id.rawValue)
            if let process = producer.adoptRunning(entry) {
                processes[process.pid] = name
                adopted.insert(process.pid)
                // Its registration follows: it heartbeats, hears `notRegistered`, registers again.
                starting[name] = StartingBoard(pid: process.pid, secret: process.secret, since: now, queue: [])
            } else {
                try startProcess(name, entry: entry, now: now)
            }
        }
    }

    /// Starts a board's process; queued work waits in `starting` until it registers.
    func startProcess(_ name: ScopedName, entry: FleetManifest.Board, now: ContinuousClock.Instant) throws {
        guard let producer else { throw BusError(.boardNotRunning, "this motherboard cannot start boards") }
        let process = try producer.start(entry)
        let pid = process.pid
        processes[pid] = name
        completedBoards.remove(name)
        let queue = starting[name]?.queue ?? []
        starting[name] = StartingBoard(pid: pid, secret: process.secret, since: now, queue: queue)
        logger.info("started board", metadata: ["board": "\(name)", "pid": "\(pid)"])
    }

    /// A board process ended (reported by the launcher for children, or found dead after its
    /// board was dropped, for adopted ones).
    public func processExited(pid: Int32, status: String, clean: Bool, now: ContinuousClock.Instant) {
        adopted.remove(pid)
        guard let name = processes.removeValue(forKey: pid) else { return }
        if let board = registry[name], board.registration.pid == pid {
            drop(name, reason: "process \(pid) ended (\(status))")
        }
        supervision[name, default: Supervision()].lastExit = status
        guard let entry = manifest.board(named: name.name, scope: name.scope), shouldRestart(entry, name: name, clean: clean) else {
            if starting[name]?.pid == pid {
                failStart(name, BusError(.boardNotRunning, "board '\(name)' ended (\(status)) before it registered"))
            }
            return
        }
        var record = supervision[name] ?? Supervision()
        let window = Duration.milliseconds(Int64(entry.restartLimit.windowSeconds * 1000))
        record.restartTimes.removeAll { $0.duration(to: now) > window }
        guard record.restartTimes.count < entry.restartLimit.count else {
            record.failed = true
            supervision[name] = record
            logger.error("restart limit reached; board stays down", metadata: ["board": "\(name)", "limit": "\(entry.restartLimit.count)"])
            failStart(name, BusError(.boardNotRunning, "board '\(name)' failed \(entry.restartLimit.count) times in \(entry.restartLimit.windowSeconds) s"))
            return
        }
        var backoff = Self.initialBackoff
        for _ in 0..<record.restartTimes.count where backoff < Self.maximumBackoff { backoff = min(backoff * 2, Self.maximumBackoff) }
        record.restartTimes.append(now)
        record.restarts += 1
        supervision[name] = record
        logger.notice("restarting board", metadata: ["board": "\(name)", "after": "\(backoff)", "exit": "\(status)"])
        // Pid 0: waiting out the back-off; work queues meanwhile.
        starting[name] = StartingBoard(pid: 0, since: now.advanced(by: backoff), queue: starting[name]?.queue ?? [])
    }

    private func shouldRestart(_ entry: FleetManifest.Board, name: ScopedName, clean: Bool) -> Bool {
        guard !completedBoards.contains(name), producer != nil else { return false }
        switch entry.restart {
        case .no: return false
        case .onFailure: return !clean
        case .always: return true
        }
    }

    /// Starts the boards whose back-off is over.
    func restartDueBoards(now: ContinuousClock.Instant) {
        for (name, start) in starting where start.pid == 0 && start.since <= now {
            guard let entry = manifest.board(named: name.name, scope: name.scope) else { continue }
            do {
                try startProcess(name, entry: entry, now: now)
            } catch {
                failStart(name, error as? BusError ?? BusError(.boardNotRunning, "cannot restart '\(name)': \(error)"))
            }
        }
    }

    /// How an adopted process ended, as far as this broker can know: it is not its parent, so the
    /// kernel tells it neither the exit code nor the signal.
    static let adoptedExitStatus = "ended, exit status unknown (adopted after a motherboard restart, so not a child of this one)"

    /// Adopted processes are not our children, so no exit is reported for them: look.
    func checkAdoptedProcesses(now: ContinuousClock.Instant) {
        guard let producer else { return }
        for pid in adopted where !producer.isRunning(pid) {
            producer.forgetAdopted(pid)
            processExited(pid: pid, status: Self.adoptedExitStatus, clean: false, now: now)
        }
    }

    /// The state `status` shows for a manifest board that is not live.
    func offlineState(_ name: ScopedName) -> String {
        if let start = starting[name] { return start.pid == 0 ? "restarting" : "starting" }
        return supervision[name]?.failed == true ? "failed" : "stopped"
    }
}
