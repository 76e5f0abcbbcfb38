import BusCore
import BusZeroMQ
import Foundation
import Logging
import ServiceLifecycle

/// The `motherboard` daemon as a service: binds the ROUTER socket, runs ``Motherboard`` on the
/// socket's thread, starts the manifest's always-on boards, and on graceful shutdown stops them,
/// closes the socket and removes its files.
public final class MotherboardServer: Service {
    /// Where and how the server runs.
    public struct Options: Sendable {
        public var address: BusAddress
        public var manifest: FleetManifest
        /// Where board executables named in the manifest are found.
        public var binaryDirectory: String
        public var settings: MotherboardSettings
        /// Stop when the parent process exits (test harnesses use it so that no broker outlives a
        /// crashed test run).
        public var exitWithParent: Bool
        /// Where to serve `/metrics` over HTTP (default: the manifest's `metricsListen`, else nowhere).
        public var metricsListen: MetricsEndpoint.Address?
        /// Logs in `<runtime>/logs` past this size are rotated (copytruncate); 0: never. Default 10 MiB.
        public var maximumLogBytes: Int

        public init(
            address: BusAddress, manifest: FleetManifest, binaryDirectory: String, settings: MotherboardSettings = .init(),
            exitWithParent: Bool = false, metricsListen: MetricsEndpoint.Address? = nil, maximumLogBytes: Int = 10 << 20
        ) {
            self.metricsListen = metricsListen
            self.maximumLogBytes = maximumLogBytes
            self.address = address
            self.manifest = manifest
            self.binaryDirectory = binaryDirectory
            self.settings = settings
            self.exitWithParent = exitWithParent
        }
    }

    private let options: Options
    private let logger: Logger

    public init(options: Options, logger: Logger) {
        self.options = options
        self.logger = logger
    }

    public func run() async throws {
        let address = options.address
        try options.manifest.checkExecutables(binaryDirectory: options.binaryDirectory)
        for warning in options.manifest.warnings() { logger.warning("manifest: \(warning)") }
        try RuntimeDirectory.prepare(address.runtimeDirectory)
        if let path = address.ipcPath {
            if (try? EndpointProbe.checkListening(address)) != nil {
                throw BusError(.idInUse, "a motherboard already listens at \(address.endpoint)")
            }
            try? FileManager.default.removeItem(atPath: path)  // stale socket of a killed broker
        }

        let context = try ZMQContext()
        let socket = try ZMQSocket(context: context, kind: .router)
        // Hard cap: frames far beyond the soft limit disconnect the peer inside libzmq; those
        // between the two get a typed `tooLarge` answer from the broker.
        try socket.set(
            .routerMandatory(true), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000),
            .maximumMessageBytes(Int64(options.settings.limits.maximumPayloadBytes * 2 + 65_536)))
        if address.ipcPath != nil {
            // Only peers running as our uid may talk to the broker (on top of the 0700 directory).
            do {
                try socket.set(.acceptIPCFromUser(getuid()))
            } catch {
                logger.warning("this libzmq cannot filter ipc peers by uid; relying on the runtime directory's mode", metadata: ["error": "\(error)"])
            }
        }
        try socket.bind(address.endpoint)

        // The launcher reports exits from its own threads; they reach the motherboard on the loop.
        let exits = ExitForwarder()
        let launcher = BoardLauncher(address: address, binaryDirectory: options.binaryDirectory, logger: logger) { pid, status, clean in
            exits.forward(pid: pid, status: status, clean: clean)
        }
        let transport = RouterTransport(socket: socket, backlogBudget: options.settings.maximumUnreadBytesPerPeer)
        let motherboard = try Motherboard(
            manifest: options.manifest, settings: options.settings, transport: transport,
            producer: LauncherProducer(launcher: launcher), logger: logger)
        var startFailure: (any Error)?
        var metricsEndpoint: MetricsEndpoint?
        let metricsFile = "\(address.runtimeDirectory)/metrics.addr"
        if let listen = try options.metricsListen ?? options.manifest.metricsListen.map(MetricsEndpoint.parse) {
            do {
                let endpoint = try await MetricsEndpoint(address: listen, metrics: motherboard.metrics, logger: logger)
                metricsEndpoint = endpoint
                // Where a scraper (or a test that asked for port 0) finds it.
                try "\(MetricsEndpoint.Address(host: listen.host, port: endpoint.port))\n".write(
                    toFile: metricsFile, atomically: true, encoding: .utf8)
            } catch {
                startFailure = error
                logger.error("cannot serve metrics", metadata: ["error": "\(error)"])
            }
        }
        if startFailure == nil {
            do {
                // Before the loop starts, on this thread; the loop thread takes the motherboard over.
                try motherboard.startFleet(now: .now)
            } catch {
                startFailure = error
                logger.error("cannot start the fleet", metadata: ["error": "\(error)"])
            }
        }
        let notifier = SystemdNotifier()
        notifier?.notify("STATUS=starting \(options.manifest.boards.filter { $0.start == .always }.count) always-on board(s)")
        let rotation = LogRotation(directory: launcher.logDirectory, maximumBytes: options.maximumLogBytes)
        rotation.start()
        let handler = RouterLoopHandler(motherboard: motherboard, transport: transport, notifier: startFailure == nil ? notifier : nil)
        let loop = try SocketLoop(
            name: "motherboard", socket: socket, handler: handler, tickInterval: .milliseconds(100), limits: options.settings.limits)
        exits.connect(loop: loop, motherboard: motherboard)
        loop.start()

        let pidFile = "\(address.runtimeDirectory)/motherboard.pid"
        try "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8)

        if startFailure == nil {
            logger.info("motherboard ready", metadata: ["endpoint": "\(address.endpoint)", "pid": "\(getpid())"])
            FileHandle.standardOutput.write(Data("READY \(address.endpoint)\n".utf8))
            await waitForShutdown()
            logger.info("motherboard stopping")
        }

        notifier?.notify("STOPPING=1\nSTATUS=stopping the fleet")
        await launcher.stopAll()
        rotation.stop()
        await metricsEndpoint?.stop()
        try? FileManager.default.removeItem(atPath: metricsFile)
        loop.stop()
        context.terminate()
        try? FileManager.default.removeItem(atPath: pidFile)
        if let path = address.ipcPath { try? FileManager.default.removeItem(atPath: path) }
        if let startFailure { throw startFailure }
    }
}

extension MotherboardServer {
    /// Returns on SIGTERM/SIGINT (graceful shutdown) or, with `exitWithParent`, when the parent exits.
    private func waitForShutdown() async {
        let watchParent = options.exitWithParent
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await gracefulShutdown() }
            if watchParent {
                let parent = getppid()
                group.addTask {
                    while getppid() == parent && !Task.isCancelled {
                        try? await Task.sleep(for: .milliseconds(250))
                    }
                }
            }
            await group.next()
            group.cancelAll()
        }
    }
}

/// Sends the broker's envelopes on the ROUTER socket, prefixed with the peer's routing id. Large
/// messages toward a peer that does not read them are refused past its backlog budget, as if its
/// queue were full.
final class RouterTransport: MotherboardTransport {
    private let socket: ZMQSocket
    let backlog: ConnectionBacklog

    init(socket: ZMQSocket, backlogBudget: Int = MotherboardSettings().maximumUnreadBytesPerPeer) {
        self.socket = socket
        backlog = ConnectionBacklog(budget: backlogBudget)
    }

    /// The peer of the last send that failed because the peer is gone (not merely full).
    private var lastGone: PeerID?

    func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
        guard backlog.mayQueue(envelope.payload.count, to: peer.bytes) else {
            answerInstead(kind: envelope.header.kind, correlationID: envelope.header.correlationID, to: peer)
            return false
        }
        return sent(try? socket.send(envelope, routingID: peer.bytes), to: peer)
    }

    /// Sends the frames of the message being handled on to `peer`, as they are (`header` is its
    /// header frame, as routed).
    func forwardReceived(to peer: PeerID, payloadBytes: Int, kind: MessageKind, header: UnsafeRawBufferPointer) -> Bool {
        guard backlog.mayQueue(payloadBytes, to: peer.bytes) else {
            answerInstead(kind: kind, correlationID: HeaderLayout.correlationID(in: header), to: peer)
            return false
        }
        return sent(try? socket.forwardReceived(to: peer.bytes), to: peer)
    }

    /// An answer refused because its peer does not read: a small `busy` error goes in its place,
    /// so that the request still ends with an answer (when it is read) rather than a timeout.
    private func answerInstead(kind: MessageKind, correlationID: UInt64, to peer: PeerID) {
        guard kind == .reply || kind == .error, correlationID != 0 else { return }
        let error = BusError(
            .busy, "the answer was dropped: \(backlog.queuedBytes(to: peer.bytes)) bytes of earlier answers to this connection wait unread")
        _ = sent(try? socket.send(Envelope.error(error, correlationID: correlationID), routingID: peer.bytes), to: peer)
    }

    private func sent(_ result: ZMQSocket.SendResult?, to peer: PeerID) -> Bool {
        if result == .peerUnreachable {
            lastGone = peer
            backlog.forget(peer.bytes)
        }
        return result == .sent
    }

    func isConnected(_ peer: PeerID) -> Bool {
        lastGone != peer
    }

    func isBacklogged(_ peer: PeerID) -> Bool {
        backlog.isStalled(peer.bytes)
    }
}

/// Feeds the ROUTER's messages and ticks to the motherboard, on the socket's thread.
final class RouterLoopHandler: SocketLoopHandler {
    private let motherboard: Motherboard
    private let transport: RouterTransport
    private let clock = ContinuousClock()
    private var heap = HeapTrim()
    private let notifier: SystemdNotifier?

    init(motherboard: Motherboard, transport: RouterTransport, notifier: SystemdNotifier? = nil) {
        self.motherboard = motherboard
        self.transport = transport
        self.notifier = notifier
    }

    /// Commands and replies that need only a new correlation id go on in the frames they came in.
    func intercept(from routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int, on socket: ZMQSocket) -> Bool {
        guard let routingID else { return false }
        transport.backlog.noteReceived(from: routingID, descriptor: socket.lastSourceDescriptor)
        if transport.backlog.isStalled(routingID) { return refuseStalled(routingID, header: UnsafeRawBufferPointer(header)) }
        guard let route = motherboard.routeInPlace(header, from: PeerID(routingID), now: clock.now) else { return false }
        if !transport.forwardReceived(to: route.peer, payloadBytes: payloadBytes, kind: route.kind, header: UnsafeRawBufferPointer(header)) {
            motherboard.undeliverable(route.kind, to: route.peer, correlationID: HeaderLayout.correlationID(in: UnsafeRawBufferPointer(header)))
        }
        return true
    }

    /// A peer that does not read what it asked for: its requests are answered `busy` (a small
    /// answer, which the backlog lets through) and go no further. Other messages (heartbeats,
    /// answers it gives as a board) are handled as usual.
    private func refuseStalled(_ routingID: Data, header: UnsafeRawBufferPointer) -> Bool {
        guard let correlationID = HeaderLayout.answerableCorrelationID(header) else { return false }
        motherboard.counters.refusedWhileStalled += 1
        let error = BusError(
            .busy, "\(transport.backlog.queuedBytes(to: routingID)) bytes of answers to this connection wait unread; read them before asking for more"
        )
        _ = transport.send(Envelope.error(error, correlationID: correlationID), to: PeerID(routingID))
        return true
    }

    func received(_ message: ReceivedMessage, on socket: ZMQSocket) {
        guard let routingID = message.routingID else { return }
        transport.backlog.noteReceived(from: routingID, descriptor: socket.lastSourceDescriptor)
        motherboard.receive(message.content, from: PeerID(routingID), now: clock.now)
    }

    func tick(on socket: ZMQSocket) {
        transport.backlog.tick()
        heap.trimIfWorthwhile()
        let now = clock.now
        motherboard.tick(now: now)
        if let notifier {
            let (live, expected) = motherboard.alwaysOnLive
            notifier.tick(live: live, expected: expected, now: now)
        }
    }

    func stopping(on socket: ZMQSocket) {}
}

/// Carries process exits from the launcher's threads to the motherboard on its loop thread.
final class ExitForwarder: @unchecked Sendable {
    private let lock = NSLock()
    private var loop: SocketLoop?
    // Touched only on the loop thread, inside `execute`.
    private var motherboard: Motherboard?

    func connect(loop: SocketLoop, motherboard: Motherboard) {
        lock.withLock {
            self.loop = loop
            self.motherboard = motherboard
        }
    }

    func forward(pid: Int32, status: String, clean: Bool) {
        guard let loop = lock.withLock({ self.loop }) else { return }
        loop.execute { [self] _ in motherboard?.processExited(pid: pid, status: status, clean: clean, now: .now) }
    }
}

/// Starts on-demand boards with the launcher (on the loop thread; spawning takes a millisecond).
final class LauncherProducer: BoardProducer {
    private let launcher: BoardLauncher
    init(launcher: BoardLauncher) { self.launcher = launcher }
    func start(_ board: FleetManifest.Board) throws -> LaunchedProcess { try launcher.start(board) }
    func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess? { launcher.adoptRunning(board) }
    func isRunning(_ pid: Int32) -> Bool { launcher.isRunning(pid) }
    func forgetAdopted(_ pid: Int32) { launcher.forgetAdopted(pid) }
}

/// The runtime directory: created with mode 0700, since its socket gives access to the fleet.
public enum RuntimeDirectory {
    public static func prepare(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw BusError(.badArgument, "cannot create runtime directory \(path): \(error.localizedDescription)")
        }
        guard chmod(path, 0o700) == 0 else {
            throw BusError(.badArgument, "cannot set mode 0700 on runtime directory \(path)")
        }
    }
}
