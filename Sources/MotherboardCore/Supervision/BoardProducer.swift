import BusCore

/// Starts board processes: the motherboard's producer, for the fleet, on-demand activation and
/// restarts.
public protocol BoardProducer: AnyObject {
    /// Starts the process of a manifest board, handing it a new registration secret; must not
    /// block for long.
    func start(_ board: FleetManifest.Board) throws -> LaunchedProcess
    /// A live process of this board that an earlier broker started, if any (it is adopted), with
    /// the secret it was started with.
    func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess?
    /// Whether a process still runs.
    func isRunning(_ pid: Int32) -> Bool
    /// Whether a process that runs is stopped (by a signal, a debugger or its cgroup's freezer):
    /// frozen, not busy.
    func isStopped(_ pid: Int32) -> Bool
    /// Forgets an adopted process that ended.
    func forgetAdopted(_ pid: Int32)
    /// Ends a process it started or adopted whose board the watchdog found stuck: `abort` (a core
    /// dump, where the system keeps them), then, if it still runs, `kill`.
    func end(_ pid: Int32, _ how: EndSignal)
}

/// How the broker ends a stuck board's process.
public enum EndSignal: Sendable, Hashable {
    case abort, kill
}

extension BoardProducer {
    public func isStopped(_ pid: Int32) -> Bool { false }
}

/// A board process the broker started (or adopted), and the registration secret it was handed:
/// the proof, which a pid written in a message is not, that a registration comes from it.
public struct LaunchedProcess: Sendable, Hashable {
    public var pid: Int32
    /// Nil when it is not known (a process adopted without its secret file).
    public var secret: String?

    public init(pid: Int32, secret: String?) {
        self.pid = pid
        self.secret = secret
    }
}
