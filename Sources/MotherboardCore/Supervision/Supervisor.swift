import BusCore

/// The board processes of the fleet, as the broker supervises them: which are starting (started
/// or restarting, not registered yet, with the work waiting for them), which run under which
/// pid, which were adopted from an earlier broker, which completed, and what each board's past
/// restarts were. It decides the restart policy (exponential back-off, 100 ms doubling up to
/// 30 s, and a limit on restarts in a window); the broker does the starting, the logging and the
/// answering.
///
/// No I/O and no clock of its own: the broker passes `now`.
struct Supervisor {
    /// A board whose process was started (or is about to be restarted) and has not registered yet.
    struct Start {
        /// 0 while waiting out a restart's back-off.
        var pid: Int32
        /// The secret the process was started with: its registration must carry it.
        var secret: String? = nil
        /// When it was started; for a restart, when the back-off ends.
        var since: ContinuousClock.Instant
        /// Activations and commands waiting for it, with who waits (nil for flows), in order.
        var queue: [HeldInput]

        var isWaitingOutBackoff: Bool { pid == 0 }
    }

    /// What the broker remembers of a board's past processes.
    struct Record: Equatable {
        /// When each restart happened (pruned to the limit's window).
        var restartTimes: [ContinuousClock.Instant] = []
        var restarts = 0
        var lastExit: String?
        /// Set when the restart limit was reached: the board stays down.
        var failed = false
    }

    /// What to do about a process that ended.
    enum Exit: Equatable {
        /// Not a process of this fleet (or already handled).
        case unknown
        /// Not restarted (its policy, or it completed). `wasStarting`: it ended before it
        /// registered, so the work waiting for it must be failed.
        case stays(ScopedName, wasStarting: Bool)
        /// The restart limit was reached: the board stays down, its waiting work is failed.
        case limitReached(ScopedName)
        /// Restarted after `backoff`; work queues meanwhile.
        case restarts(ScopedName, after: Duration)
    }

    /// How an activation for a board that is starting was queued.
    enum Queueing: Equatable {
        case queued
        /// `limit` inputs already wait.
        case full
        /// The board is not starting.
        case notStarting
    }

    static let initialBackoff = Duration.milliseconds(100)
    static let maximumBackoff = Duration.seconds(30)

    private(set) var starting: [ScopedName: Start] = [:]
    /// Board processes started or adopted, by pid.
    private(set) var processes: [Int32: ScopedName] = [:]
    /// Pids adopted from an earlier broker: not children, their end is found by looking.
    private(set) var adopted: Set<Int32> = []
    private(set) var records: [ScopedName: Record] = [:]
    /// Boards that completed: their process's end is not a failure, and is not restarted.
    private(set) var completed: Set<ScopedName> = []

    // MARK: - Starting

    /// A process of `name` was started: registrations for `name` must come from it. Work queued
    /// for the board stays queued.
    mutating func started(_ process: LaunchedProcess, as name: ScopedName, now: ContinuousClock.Instant) {
        processes[process.pid] = name
        completed.remove(name)
        starting[name] = Start(pid: process.pid, secret: process.secret, since: now, queue: starting[name]?.queue ?? [])
    }

    /// A live process of `name` left by an earlier broker is taken over.
    mutating func adopted(_ process: LaunchedProcess, as name: ScopedName, now: ContinuousClock.Instant) {
        processes[process.pid] = name
        adopted.insert(process.pid)
        starting[name] = Start(pid: process.pid, secret: process.secret, since: now, queue: [])
    }

    /// An on-demand start is about to be made for `input`: it waits in the new start's queue.
    mutating func willStart(_ name: ScopedName, with input: HeldInput, now: ContinuousClock.Instant) {
        starting[name] = Start(pid: 0, since: now, queue: [input])
    }

    /// Queues an activation or a command for a board that is starting, up to `limit` inputs.
    mutating func enqueue(_ input: HeldInput, for name: ScopedName, limit: Int) -> Queueing {
        guard var start = starting[name] else { return .notStarting }
        guard start.queue.count < limit else { return .full }
        start.queue.append(input)
        starting[name] = start
        return .queued
    }

    /// The board registered, or its start failed: its start ends, and its waiting work is returned.
    mutating func endStart(_ name: ScopedName) -> Start? {
        starting.removeValue(forKey: name)
    }

    /// The board completed (`isDone`): the end of its process is not a failure.
    mutating func completed(_ name: ScopedName) {
        completed.insert(name)
    }

    // MARK: - Ends and restarts

    /// A process ended. `entry` is its board's manifest entry, if the manifest still has it;
    /// `canRestart` is false when the broker cannot start processes.
    mutating func processExited(
        pid: Int32, status: String, clean: Bool, entry: FleetManifest.Board?, canRestart: Bool, now: ContinuousClock.Instant
    ) -> Exit {
        adopted.remove(pid)
        guard let name = processes.removeValue(forKey: pid) else { return .unknown }
        var record = records[name] ?? Record()
        record.lastExit = status
        defer { records[name] = record }
        // A newer process of the board was started meanwhile (on demand, once its board was
        // dropped): this end restarts nothing and leaves that start as it is.
        if processes.values.contains(name) { return .stays(name, wasStarting: false) }
        guard let entry, canRestart, !completed.contains(name), Self.policyRestarts(entry.restart, clean: clean) else {
            return .stays(name, wasStarting: starting[name]?.pid == pid)
        }
        let window = Duration.milliseconds(Int64(entry.restartLimit.windowSeconds * 1000))
        record.restartTimes.removeAll { $0.duration(to: now) > window }
        guard record.restartTimes.count < entry.restartLimit.count else {
            record.failed = true
            return .limitReached(name)
        }
        let backoff = Self.backoff(afterRestarts: record.restartTimes.count)
        record.restartTimes.append(now)
        record.restarts += 1
        starting[name] = Start(pid: 0, since: now.advanced(by: backoff), queue: starting[name]?.queue ?? [])
        return .restarts(name, after: backoff)
    }

    /// Whether a restart policy restarts a process that ended cleanly (`clean`) or not.
    static func policyRestarts(_ policy: FleetManifest.RestartPolicy, clean: Bool) -> Bool {
        switch policy {
        case .no: false
        case .onFailure: !clean
        case .always: true
        }
    }

    /// The back-off before a restart, after `count` restarts within the window: 100 ms doubling,
    /// at most 30 s.
    static func backoff(afterRestarts count: Int) -> Duration {
        var backoff = initialBackoff
        for _ in 0..<count where backoff < maximumBackoff { backoff = min(backoff * 2, maximumBackoff) }
        return backoff
    }

    /// The boards whose restart back-off is over, in a stable order.
    func dueRestarts(now: ContinuousClock.Instant) -> [ScopedName] {
        starting.filter { $0.value.isWaitingOutBackoff && $0.value.since <= now }.keys.sorted()
    }

    /// The boards started more than `timeout` ago that have not registered, in a stable order.
    func overdueStarts(now: ContinuousClock.Instant, timeout: Duration) -> [ScopedName] {
        starting.filter { !$0.value.isWaitingOutBackoff && $0.value.since.duration(to: now) > timeout }.keys.sorted()
    }

    /// The adopted pids that are no longer running (not children: nothing reports their end).
    func endedAdoptedProcesses(isRunning: (Int32) -> Bool) -> [Int32] {
        adopted.filter { !isRunning($0) }.sorted()
    }

    // MARK: - What status shows

    /// The board is started again by hand: its restart limit starts over.
    mutating func clearFailure(_ name: ScopedName) {
        records[name]?.failed = false
        records[name]?.restartTimes = []
    }

    /// Whether the board reached its restart limit.
    func hasFailed(_ name: ScopedName) -> Bool { records[name]?.failed == true }

    /// The state of a manifest board that is not live.
    func offlineState(of name: ScopedName) -> BoardState {
        if let start = starting[name] { return start.isWaitingOutBackoff ? .restarting : .starting }
        return hasFailed(name) ? .failed : .stopped
    }
}

/// An activation or a command held for a board that is starting: what it was, who waits for its
/// answer (nil: a flow's delivery), and since when (a command is delivered with what is left of
/// its deadline, or answered `timeout` when nothing is).
struct HeldInput {
    var envelope: Envelope
    var client: PeerID?
    var since: ContinuousClock.Instant
}
