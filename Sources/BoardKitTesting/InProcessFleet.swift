import BoardKit
import BusCore
import Foundation
import Logging
import MotherboardCore
import ServiceLifecycle
import Synchronization

/// A fleet in one process, for unit tests of a board's handlers, flows and stores that run in
/// milliseconds: the broker's own routing logic (`MotherboardCore.Motherboard`, the code the
/// `motherboard` process runs) and boards running on `BusClient`s, joined by in-memory pipes
/// instead of ZeroMQ sockets.
///
/// ```swift
/// try await InProcessFleet.with(manifest: FleetManifest(flows: ["auth.login ->> app.dashboard"])) { fleet in
///     try await fleet.start(loginBoard)
///     try await fleet.start(dashboardBoard)
///     let greeting = try await fleet.client.interact(with: "demo.greeter", GreeterIO.Greet(name: "Ann"))
/// }
/// ```
/// Every message is encoded and parsed as on the wire (header codec, limits), and the broker
/// routes, queues and times out exactly as the real one. Each board's handlers run on one serial
/// executor of its own, as a real board's run on its socket's thread: they interleave only where
/// they suspend, never in parallel.
///
/// A manifest board given a ``Program`` (`programs:`) is produced as the real broker produces a
/// process: always-on ones when the fleet starts, on-demand ones when an activation, a flow or a
/// command first reaches them (held until they register, within the request's deadline), again
/// after ``kill(_:scope:)`` or a failure where its restart policy says so, with its at-least-once
/// activations delivered again. What remains different from ``TestFleet``, which runs the real
/// executables:
/// - A board without a program is never started by the broker (start it with ``start(_:timeout:)``); an
///   input for it is refused `boardNotRunning`, as by a broker that cannot start it.
/// - Every board shares this process: one registration secret and pid, no exit codes (a board
///   whose `run` throws ended "with a failure"), no crash that takes one board down alone (a
///   trap ends the test), no memory or file-descriptor limits of its own.
/// - No sockets (no ZeroMQ options or high-water marks, no `ipc://` permissions), no broker
///   restart, and no durable files unless a store or the broker is given them.
public final class InProcessFleet: Sendable {
    /// A client of the fleet, as busctl or a test would use it.
    public let client: BusClient
    /// The fleet's clock: the continuous clock, or the ``ManualClock`` given to `with(manifest:settings:clock:_:)`.
    public let clock: BusClock
    private let broker: InMemoryBroker
    private let boards = Mutex<[BoardKey: RunningBoard]>([:])
    private let stopping = Atomic<Bool>(false)
    private let logger: Logger
    /// The manifest's always-on boards that have a program: the broker starts them with the fleet.
    private let alwaysOn: [BoardKey]

    /// What a manifest board runs, in this process: its board, built from the environment the
    /// broker gives a process it starts (`BOARDBUS_BOARD_ID`, `BOARDBUS_SCOPE`), as the board's
    /// `main` builds it — so one program serves the board in every scope the manifest names it.
    public typealias Program = @Sendable (_ environment: [String: String]) -> Board

    private struct BoardKey: Hashable, Sendable {
        let id: BoardID
        let scope: Scope
    }

    private struct RunningBoard: Sendable {
        let group: ServiceGroup
        let task: Task<Void, any Error>
        let client: BusClient
        /// The pid the broker knows it by, when the broker started it.
        let pid: Int32?
    }

    /// Starts a fleet, waits until its always-on boards have registered
    /// (``waitForAlwaysOnBoards(timeout:)``), runs `body`, and stops every board and the broker,
    /// whatever `body` does.
    public static func with<T>(
        manifest: FleetManifest = FleetManifest(), programs: [BoardID: Program] = [:], settings: MotherboardSettings = .init(),
        clock: BusClock = .continuous, _ body: (InProcessFleet) async throws -> T
    ) async throws -> T {
        let fleet = try InProcessFleet(manifest: manifest, programs: programs, settings: settings, clock: clock)
        return try await using(
            fleet, stop: { await $0.stop() },
            { fleet in
                try await fleet.waitForAlwaysOnBoards()
                return try await body(fleet)
            })
    }

    /// `programs`: what the manifest's boards run, by board id; the broker starts these
    ///   boards itself (the always-on ones as this returns: they register a moment later, which
    ///   ``waitForAlwaysOnBoards(timeout:)`` waits for, and ``with(manifest:programs:settings:clock:_:)`` too).
    public init(
        manifest: FleetManifest = FleetManifest(), programs: [BoardID: Program] = [:], settings: MotherboardSettings = .init(),
        clock: BusClock = .continuous
    ) throws {
        var logger = Logger(label: "in-process-fleet")
        logger.logLevel = .warning
        self.logger = logger
        self.clock = clock
        alwaysOn = manifest.boards.filter { $0.start == .always && programs[$0.id] != nil }.map { BoardKey(id: $0.id, scope: $0.scope) }
        let producer = programs.isEmpty ? nil : InProcessProducer(programs: programs)
        broker = try InMemoryBroker(manifest: manifest, settings: settings, clock: clock, producer: producer, logger: logger)
        client = BusClient(connection: broker.connect(), address: InMemoryBroker.address, limits: settings.limits, clock: clock)
        producer?.launch = { [weak self] board, pid in self?.run(board, pid: pid) }
        try broker.startFleet()
    }

    /// Returns once every always-on board of the manifest that has a program is registered (calls
    /// to it are served) or has ended (a board whose `run` fails at start is the test's to see);
    /// `timeout` when one is still starting past `timeout`.
    public func waitForAlwaysOnBoards(timeout: Duration = .seconds(10)) async throws {
        guard !alwaysOn.isEmpty else { return }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while true {
            let live = Set(
                try await client.list().boards.filter { $0.state == .running || $0.state == .busy }.map { BoardKey(id: $0.id, scope: $0.scope) })
            let starting = alwaysOn.filter { !live.contains($0) && isRunning($0.id, scope: $0.scope) }
            if starting.isEmpty { return }
            guard ContinuousClock.now < deadline else {
                let names = starting.map { $0.scope == .root ? "'\($0.id)'" : "'\($0.scope.name)/\($0.id)'" }.joined(separator: ", ")
                throw BusError(.timeout, "always-on board(s) \(names) did not register within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Runs `board` in this process on a connection of its own, and returns once it has
    /// registered (its `onStart` handlers have run). It runs until it completes or the fleet stops.
    public func start(_ board: Board, timeout: Duration = .seconds(10)) async throws {
        let (ready, signalReady) = AsyncStream.makeStream(of: Void.self)
        let task = run(board, pid: nil) {
            signalReady.yield()
        } finished: {
            signalReady.finish()
        }
        let registered = await value(within: timeout) { await ready.first { _ in true } != nil } ?? false
        guard registered else {
            await stop(board.id, scope: board.scope)
            if case .failure(let error) = await task.result { throw error }
            throw BusError(.timeout, "board '\(board.id)' did not register within \(timeout)")
        }
    }

    /// Runs a board on a connection of its own until it completes or is stopped; a board the
    /// broker started (`pid`) is reported to it when it ends, as a process's exit would be.
    @discardableResult
    private func run(_ board: Board, pid: Int32?, onReady: @escaping @Sendable () -> Void = {}, finished: @escaping @Sendable () -> Void = {})
        -> Task<Void, any Error>
    {
        let boardClient = BusClient(connection: broker.connect(), address: InMemoryBroker.address, limits: broker.limits, clock: clock)
        var board = board
        board.registrationPID = pid
        var logger = self.logger
        logger[metadataKey: "board"] = "\(board.id)"
        let service = board.service(on: boardClient, logger: logger, onReady: onReady)
        let group = ServiceGroup(configuration: .init(services: [service], gracefulShutdownSignals: [], logger: logger))
        let name = BoardKey(id: board.id, scope: board.scope)
        let task = Task { [weak self] in
            defer { finished() }
            let result: Result<Void, any Error>
            do {
                try await group.run()
                result = .success(())
            } catch {
                result = .failure(error)
            }
            boardClient.close()
            if let pid, let self {
                // The running entry is this run's unless a kill or stop took it (they report the end themselves).
                let ended = self.boards.withLock { boards -> Bool in
                    guard boards[name]?.pid == pid else { return false }
                    boards[name] = nil
                    return true
                }
                if ended { self.reportEnd(pid, result: result) }
            }
            try result.get()
        }
        boards.withLock { $0[name] = RunningBoard(group: group, task: task, client: boardClient, pid: pid) }
        return task
    }

    /// Tells the broker that a board it started ended, as the launcher reports a process's exit.
    private func reportEnd(_ pid: Int32, result: Result<Void, any Error>, killed: Bool = false) {
        guard !stopping.load(ordering: .acquiring) else { return }
        let (status, clean) =
            switch (killed, result) {
            case (true, _): ("killed by signal 9", false)
            case (false, .success): ("exited 0", true)
            case (false, .failure(let error)): ("ended with a failure: \(error)", false)
            }
        broker.processExited(pid: pid, status: status, clean: clean)
    }

    /// Stops one board as SIGTERM would: it says goodbye and its `run` returns (a board the broker
    /// started ends cleanly, and is started again only where its restart policy is `always`).
    public func stop(_ id: BoardID, scope: Scope = .root) async {
        guard let running = boards.withLock({ $0.removeValue(forKey: BoardKey(id: id, scope: scope)) }) else { return }
        await running.group.triggerGracefulShutdown()
        let result = await running.task.result
        if let pid = running.pid { reportEnd(pid, result: result) }
    }

    /// Cuts a board off without a goodbye, as `kill -9` would: the broker finds out from its
    /// missing heartbeats (or at once, when it next sends to it, from the closed connection); a
    /// board the broker started is reported killed, and restarted as its restart policy says.
    public func kill(_ id: BoardID, scope: Scope = .root) async {
        guard let running = boards.withLock({ $0.removeValue(forKey: BoardKey(id: id, scope: scope)) }) else { return }
        running.client.close()
        running.task.cancel()
        _ = await running.task.result
        if let pid = running.pid { reportEnd(pid, result: .success(()), killed: true) }
    }

    /// Whether a board runs in this fleet (started by ``start(_:timeout:)`` or by the broker).
    public func isRunning(_ id: BoardID, scope: Scope = .root) -> Bool {
        boards.withLock { $0[BoardKey(id: id, scope: scope)] != nil }
    }

    /// Stops every board, then the broker.
    public func stop() async {
        stopping.store(true, ordering: .releasing)
        while let name = boards.withLock({ $0.keys.first }) {
            await stop(name.id, scope: name.scope)
        }
        client.close()
        broker.stop()
    }

    /// Runs the broker's periodic work now (heartbeats, deadlines, restarts), as its timer does
    /// every 100 ms: for a test that moved a ``ManualClock``.
    public func tick() {
        broker.tickNow()
    }
}

/// A clock a test moves by hand; ``busClock`` gives it to BoardKit (`BusClient`, boards) and to
/// an ``InProcessFleet``, so that deadlines and heartbeats are tested without waiting.
public final class ManualClock: Sendable {
    private let instant: Mutex<ContinuousClock.Instant>

    public init(start: ContinuousClock.Instant = .now) { instant = Mutex(start) }

    public var now: ContinuousClock.Instant { instant.withLock { $0 } }

    public func advance(by duration: Duration) {
        instant.withLock { $0 = $0.advanced(by: duration) }
    }

    public var busClock: BusClock { BusClock { [self] in now } }
}

/// The broker's logic on one serial queue, with each client's connection an in-memory pipe.
final class InMemoryBroker: @unchecked Sendable {
    static let address = BusAddress(runtimeDirectory: "/nonexistent/in-process-fleet")

    let limits: BusLimits
    private let queue = DispatchQueue(label: "boardbus.in-process.broker")
    private let motherboard: Motherboard
    private let pipes = Pipes()
    private let clock: BusClock
    private let timer: any DispatchSourceTimer
    private let nextPeer = Atomic<UInt32>(1)

    init(manifest: FleetManifest, settings: MotherboardSettings, clock: BusClock, producer: (any BoardProducer)?, logger: Logger) throws {
        limits = settings.limits
        self.clock = clock
        motherboard = try Motherboard(manifest: manifest, settings: settings, transport: pipes, producer: producer, logger: logger)
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(100), repeating: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.tickOnQueue() }
        timer.resume()
    }

    /// A new connection, as a new DEALER would be.
    func connect() -> InMemoryConnection {
        var id = nextPeer.wrappingAdd(1, ordering: .relaxed).oldValue.bigEndian
        let peer = PeerID(Data(bytes: &id, count: 4))
        let connection = InMemoryConnection(peer: peer, broker: self)
        pipes.add(connection)
        return connection
    }

    /// From a client: parsed and routed on the broker's queue, as the motherboard's socket loop does.
    func deliver(_ frames: [Data], from peer: PeerID) {
        queue.async { [self] in
            motherboard.receive(frames, from: peer, now: clock.now())
        }
    }

    func disconnect(_ peer: PeerID) { pipes.remove(peer) }

    /// Starts the manifest's always-on boards, as the daemon does once its socket is bound.
    func startFleet() throws {
        try queue.sync { try motherboard.startFleet(now: clock.now()) }
    }

    /// A board the broker started ended.
    func processExited(pid: Int32, status: String, clean: Bool) {
        queue.async { [self] in
            motherboard.processExited(pid: pid, status: status, clean: clean, now: clock.now())
        }
    }

    func tickNow() { queue.sync { tickOnQueue() } }

    private func tickOnQueue() { motherboard.tick(now: clock.now()) }

    func stop() {
        timer.cancel()
        queue.sync {}
    }

    /// The broker's transport: the connections, by peer.
    private final class Pipes: MotherboardTransport, @unchecked Sendable {
        private let connections = Mutex<[PeerID: InMemoryConnection]>([:])

        func add(_ connection: InMemoryConnection) { connections.withLock { $0[connection.peer] = connection } }

        func remove(_ peer: PeerID) { _ = connections.withLock { $0.removeValue(forKey: peer) } }

        func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
            guard let connection = connections.withLock({ $0[peer] }), let frames = try? envelope.frames() else { return false }
            connection.receive(frames)
            return true
        }

        func isConnected(_ peer: PeerID) -> Bool {
            connections.withLock { $0[peer] != nil }
        }
    }
}

/// One client's end of an in-memory pipe: what it sends is encoded and handed to the broker's
/// queue; what the broker sends it is parsed and delivered, in order, on a serial queue of its
/// own (the connection's "thread"), with a tick every 50 ms.
final class InMemoryConnection: BusConnection, @unchecked Sendable {
    let peer: PeerID
    private weak var broker: InMemoryBroker?
    private let queue: DispatchQueue
    private let serialExecutor: QueueExecutor
    private let key = DispatchSpecificKey<Bool>()
    private let handler = Mutex<(any BusConnectionHandler)?>(nil)
    private let timer: any DispatchSourceTimer
    private let stopped = Atomic<Bool>(false)

    init(peer: PeerID, broker: InMemoryBroker) {
        self.peer = peer
        self.broker = broker
        queue = DispatchQueue(label: "boardbus.in-process.connection.\(peer)")
        serialExecutor = QueueExecutor(queue: queue)
        queue.setSpecific(key: key, value: true)
        timer = DispatchSource.makeTimerSource(queue: queue)
    }

    func start(_ handler: any BusConnectionHandler) {
        self.handler.withLock { $0 = handler }
        timer.schedule(deadline: .now() + .milliseconds(50), repeating: .milliseconds(50))
        timer.setEventHandler { [weak self] in
            guard let self, !self.stopped.load(ordering: .acquiring) else { return }
            self.handler.withLock { $0 }?.tick()
        }
        timer.resume()
    }

    func send(_ envelope: Envelope, headerBytes: Int?) {
        guard !stopped.load(ordering: .acquiring), let frames = try? envelope.frames() else { return }
        broker?.deliver(frames, from: peer)
    }

    /// From the broker: parsed with the limits a socket would apply, delivered in order.
    func receive(_ frames: [Data]) {
        let limits = broker?.limits ?? .default
        queue.async { [self] in
            guard !stopped.load(ordering: .acquiring), case .success(let envelope) = Envelope.parse(frames: frames, limits: limits) else { return }
            handler.withLock { $0 }?.received(envelope)
        }
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        broker?.disconnect(peer)
        timer.cancel()
        handler.withLock { $0 = nil }
    }

    var isCurrentThread: Bool { DispatchQueue.getSpecific(key: key) == true }

    /// The connection's serial queue, as the socket loop's thread is a real board's executor.
    var executor: any TaskExecutor { serialExecutor }
}

/// A task executor on a serial dispatch queue: what runs on it runs one job at a time.
final class QueueExecutor: TaskExecutor, @unchecked Sendable {
    private let queue: DispatchQueue

    init(queue: DispatchQueue) { self.queue = queue }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Produces the manifest's boards that have a program, in this process: the broker calls it on
/// its queue, and it hands the board to the fleet to run (a pid of its own names the run).
final class InProcessProducer: BoardProducer, @unchecked Sendable {
    private let programs: [BoardID: InProcessFleet.Program]
    private let nextPID = Atomic<Int32>(1_000_000)
    /// Set once by the fleet, before the broker can start anything.
    var launch: (@Sendable (Board, Int32) -> Void)?

    init(programs: [BoardID: InProcessFleet.Program]) { self.programs = programs }

    func start(_ entry: FleetManifest.Board) throws -> LaunchedProcess {
        guard let program = programs[entry.id], let launch else {
            throw BusError(.boardNotRunning, "board '\(entry.id)' has no program in this in-process fleet")
        }
        let pid = nextPID.wrappingAdd(1, ordering: .relaxed).newValue
        launch(program(["BOARDBUS_BOARD_ID": entry.id.rawValue, "BOARDBUS_SCOPE": entry.scope.name]), pid)
        // No secret: every board of this process shares one, so any registration of the name is its.
        return LaunchedProcess(pid: pid, secret: nil)
    }

    func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess? { nil }

    /// Asked only of adopted processes and of boards whose connection named a process, which
    /// in-memory connections never do.
    func isRunning(_ pid: Int32) -> Bool { false }

    func forgetAdopted(_ pid: Int32) {}

    /// Never asked: a board of this process is never busy (``isRunning(_:)`` is false), so the
    /// watchdog, which ends only busy boards, never fires here.
    func end(_ pid: Int32, _ how: EndSignal) {}
}
