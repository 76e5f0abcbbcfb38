import BusCore
import Foundation

/// Supervision: the broker starts the manifest's board processes, notices when they end, and
/// restarts them as the ``Supervisor`` decides. Work for a board that is restarting waits in its
/// start queue and is delivered when it registers again.
extension Motherboard {
    /// Starts every always-on board of the manifest, adopting the live processes an earlier broker
    /// of this fleet left behind (after a broker crash) instead of starting them twice: an
    /// on-demand board's too, so that it is this broker's to stop.
    public func startFleet(now: ContinuousClock.Instant) throws {
        guard let producer else { return }
        for entry in manifest.boards {
            let name = ScopedName(scope: entry.scope, name: entry.id.rawValue)
            if let process = producer.adoptRunning(entry) {
                // Its registration follows: it heartbeats, hears `notRegistered`, registers again.
                supervisor.adopted(process, as: name, now: now)
            } else if entry.start == .always {
                try startProcess(name, entry: entry, now: now)
            }
        }
    }

    /// The manifest's always-on boards that are registered, and how many there are (for
    /// readiness: `busctl wait`, the service manager's `READY=1`).
    public var alwaysOnLive: (live: Int, expected: Int) {
        let always = manifest.boards.filter { $0.start == .always }
        return (always.filter { registry[ScopedName(scope: $0.scope, name: $0.id.rawValue)] != nil }.count, always.count)
    }

    /// Starts a board's process; queued work waits until it registers.
    func startProcess(_ name: ScopedName, entry: FleetManifest.Board, now: ContinuousClock.Instant) throws {
        guard let producer else { throw BusError(.boardNotRunning, "this motherboard cannot start boards") }
        let process = try producer.start(entry)
        supervisor.started(process, as: name, now: now)
        logger.info("started board", metadata: ["board": "\(name)", "pid": "\(process.pid)"])
    }

    /// A board process ended (reported by the launcher for children, or found dead after its
    /// board was dropped, for adopted ones).
    public func processExited(pid: Int32, status: String, clean: Bool, now: ContinuousClock.Instant) {
        let name = supervisor.processes[pid]
        if let name, let board = registry[name], board.registration.pid == pid {
            drop(name, reason: "process \(pid) ended (\(status))")
        }
        let entry = name.flatMap { manifest.board(named: $0.name, scope: $0.scope) }
        switch supervisor.processExited(pid: pid, status: status, clean: clean, entry: entry, canRestart: producer != nil, now: now) {
        case .unknown:
            break
        case .stays(let name, let wasStarting):
            if wasStarting { failStart(name, BusError(.boardNotRunning, "board '\(name)' ended (\(status)) before it registered")) }
        case .limitReached(let name):
            let limit = entry?.restartLimit ?? .init()
            logger.error("restart limit reached; board stays down", metadata: ["board": "\(name)", "limit": "\(limit.count)"])
            failStart(name, BusError(.boardNotRunning, "board '\(name)' failed \(limit.count) times in \(limit.windowSeconds) s"))
        case .restarts(let name, let backoff):
            logger.notice("restarting board", metadata: ["board": "\(name)", "after": "\(backoff)", "exit": "\(status)"])
        }
        redeliverEndedHolding(now: now)
    }

    /// Starts the boards whose back-off is over.
    func restartDueBoards(now: ContinuousClock.Instant) {
        for name in supervisor.dueRestarts(now: now) {
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
        for pid in supervisor.endedAdoptedProcesses(isRunning: producer.isRunning) {
            producer.forgetAdopted(pid)
            processExited(pid: pid, status: Self.adoptedExitStatus, clean: false, now: now)
        }
    }
}
