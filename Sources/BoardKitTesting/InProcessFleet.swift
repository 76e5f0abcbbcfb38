import BoardKit
import BusCore
import Foundation
import Logging
import MotherboardCore
import ServiceLifecycle
import Synchronization

/// A fleet in one process, for unit tests of a board's handlers, flows and stores that run in
/// milliseconds: the broker's own routing logic (`MotherboardCore.Motherboard`, the code the
/// `motherboard` process runs) and boards running on ``BusClient``s, joined by in-memory pipes
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
/// routes, queues and times out exactly as the real one. What it does not have: processes (a
/// manifest board is not started on demand or restarted; start it with ``start(_:)``), sockets
/// (no ZeroMQ options, no `ipc://` permissions) and durable files unless a store is given them.
/// For those, use ``TestFleet``, which runs the real executables.
public final class InProcessFleet: Sendable {
    /// A client of the fleet, as busctl or a test would use it.
    public let client: BusClient
    /// The fleet's clock: the continuous clock, or the ``ManualClock`` given to ``with(manifest:settings:clock:_:)``.
    public let clock: BusClock
    private let broker: InMemoryBroker
    private let boards = Mutex<[BoardID: RunningBoard]>([:])
    private let logger: Logger

    private struct RunningBoard: Sendable {
        let group: ServiceGroup
        let task: Task<Void, any Error>
        let client: BusClient
    }

    /// Starts a fleet, runs `body`, and stops every board and the broker, whatever `body` does.
    public static func with<T>(
        manifest: FleetManifest = FleetManifest(), settings: MotherboardSettings = .init(), clock: BusClock = .continuous,
        _ body: (InProcessFleet) async throws -> T
    ) async throws -> T {
        let fleet = try InProcessFleet(manifest: manifest, settings: settings, clock: clock)
        return try await using(fleet, stop: { await $0.stop() }, body)
    }

    public init(manifest: FleetManifest = FleetManifest(), settings: MotherboardSettings = .init(), clock: BusClock = .continuous) throws {
        var logger = Logger(label: "in-process-fleet")
        logger.logLevel = .warning
        self.logger = logger
        self.clock = clock
        broker = try InMemoryBroker(manifest: manifest, settings: settings, clock: clock, logger: logger)
        client = BusClient(connection: broker.connect(), address: InMemoryBroker.address, limits: settings.limits, clock: clock)
    }

    /// Runs `board` in this process on a connection of its own, and returns once it has
    /// registered (its `onStart` handlers have run). It runs until it completes or the fleet stops.
    public func start(_ board: Board, timeout: Duration = .seconds(10)) async throws {
        let boardClient = BusClient(connection: broker.connect(), address: InMemoryBroker.address, limits: broker.limits, clock: clock)
        let (ready, signalReady) = AsyncStream.makeStream(of: Void.self)
        var logger = self.logger
        logger[metadataKey: "board"] = "\(board.id)"
        let service = board.service(on: boardClient, logger: logger) { signalReady.yield() }
        let group = ServiceGroup(configuration: .init(services: [service], gracefulShutdownSignals: [], logger: logger))
        let task = Task {
            defer { signalReady.finish() }
            try await group.run()
        }
        boards.withLock { $0[board.id] = RunningBoard(group: group, task: task, client: boardClient) }
        let registered = await value(within: timeout) { await ready.first { _ in true } != nil } ?? false
        guard registered else {
            await stop(board.id)
            if case .failure(let error) = await task.result { throw error }
            throw BusError(.timeout, "board '\(board.id)' did not register within \(timeout)")
        }
    }

    /// Stops one board as SIGTERM would: it says goodbye and its `run` returns.
    public func stop(_ id: BoardID) async {
        guard let running = boards.withLock({ $0.removeValue(forKey: id) }) else { return }
        await running.group.triggerGracefulShutdown()
        _ = await running.task.result
    }

    /// Cuts a board off without a goodbye, as `kill -9` would: the broker finds out from its
    /// missing heartbeats (or at once, when it next sends to it, from the closed connection).
    public func kill(_ id: BoardID) async {
        guard let running = boards.withLock({ $0.removeValue(forKey: id) }) else { return }
        running.client.close()
        running.task.cancel()
        _ = await running.task.result
    }

    /// Stops every board, then the broker.
    public func stop() async {
        for id in boards.withLock({ Array($0.keys) }) { await stop(id) }
        client.close()
        broker.stop()
    }

    /// Runs the broker's periodic work now (heartbeats, deadlines, restarts), as its timer does
    /// every 100 ms: for a test that moved a ``ManualClock``.
    public func tick() {
        broker.tickNow()
    }
}

/// A clock a test moves by hand; ``busClock`` gives it to BoardKit (``BusClient``, boards) and to
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

    init(manifest: FleetManifest, settings: MotherboardSettings, clock: BusClock, logger: Logger) throws {
        limits = settings.limits
        self.clock = clock
        motherboard = try Motherboard(manifest: manifest, settings: settings, transport: pipes, logger: logger)
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
    private let key = DispatchSpecificKey<Bool>()
    private let handler = Mutex<(any BusConnectionHandler)?>(nil)
    private let timer: any DispatchSourceTimer
    private let stopped = Atomic<Bool>(false)

    init(peer: PeerID, broker: InMemoryBroker) {
        self.peer = peer
        self.broker = broker
        queue = DispatchQueue(label: "boardbus.in-process.connection.\(peer)")
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

    func send(_ envelope: Envelope) {
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

    var executor: any TaskExecutor { globalConcurrentExecutor }
}
