import BusCore
import MotherboardCore
import BusZeroMQ
import CBoardBusAcceptGuard
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
        /// Logs in `<runtime>/logs` are rotated before they pass this size; 0: never. Default 10 MiB.
        public var maximumLogBytes: Int
        /// The command that writes a board's log (`boardbus-log-writer`; its options and the
        /// file's path are added): a log never passes the limit. Nil: boards write their files
        /// themselves and a directory watch rotates them (copytruncate) once past the limit.
        public var logWriter: [String]?
        /// Where else to listen (`tcp://ADDR:PORT`), besides the ipc socket: CURVE endpoints
        /// unless `insecure`. Default: the manifest's `listen`.
        public var listen: [String] = []
        /// Where what must outlive the broker lives: the stores of its boards, its CURVE key pair,
        /// the allow-list (default: ``BusAddress/stateDirectory(environment:userID:)``). One fleet
        /// per state directory: a second broker on it refuses to start.
        public var stateDirectory: String?
        /// The broker's CURVE key pair file (default `<state>/curve/server.key`, made on first start).
        public var curveKeyPath: String?
        /// The allow-list of client keys (default `<state>/curve/allowed.keys`).
        public var allowListPath: String?
        /// The most connections all endpoints together hold (ipc, tcp, MDP); fewer when the
        /// descriptor limit leaves less room (``ConnectionLimit``). Default 8192.
        public var maximumConnections = 8192
        /// Plaintext tcp, no keys: anyone who reaches the port is in.
        public var insecure = false
        /// The parent motherboard to attach to, serving this manifest's scopes there.
        public var attach: UplinkSettings?
        /// Where to speak Majordomo (MDP 0.2), if anywhere: `ipc://mdp.sock` (a relative path is in
        /// the runtime directory) or `tcp://ADDRESS:PORT` (CURVE as `listen`). Default: the manifest's `mdp`.
        public var mdp: String?

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
        let descriptors = DescriptorLimit.raise()
        logger.info(
            "descriptor limit", metadata: ["soft": "\(descriptors.soft)", "hard": "\(descriptors.hard)", "raisedTo": "\(descriptors.now)"])
        try options.manifest.checkExecutables(binaryDirectory: options.binaryDirectory)
        for warning in options.manifest.warnings() { logger.warning("manifest: \(warning)") }
        try RuntimeDirectory.prepare(address.runtimeDirectory)
        let stateDirectory = options.stateDirectory ?? BusAddress.stateDirectory(environment: ProcessInfo.processInfo.environment, userID: getuid())
        let stateLock = try StateDirectory.claim(stateDirectory, runtimeDirectory: address.runtimeDirectory)
        defer { stateLock.release() }
        logger.info("state directory", metadata: ["path": "\(stateDirectory)"])
        if let path = address.ipcPath {
            if (try? EndpointProbe.checkListening(address)) != nil {
                throw BusError(.idInUse, "a motherboard already listens at \(address.endpoint)")
            }
            try? FileManager.default.removeItem(atPath: path)  // stale socket of a killed broker
        }

        // Room for the helpers' sockets: one per MDP service and per board served to a parent.
        let context = try ZMQContext(maximumSockets: Int32(MajordomoBridge.Settings.maximumServices * 2 + 1024))
        let socket = try ZMQSocket(context: context, kind: .router)
        // Hard cap: frames far beyond the soft limit disconnect the peer inside libzmq; those
        // between the two get a typed `tooLarge` answer from the broker.
        try socket.set(
            .routerMandatory(true), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000),
            .maximumMessageBytes(Int64(options.settings.limits.maximumPayloadBytes * 2 + 65_536)),
            // ZMTP pings on every connection (set before any bind: an endpoint takes the options
            // it is bound with). A peer whose process stops answering them, frozen or gone, is
            // disconnected within 3 s; one that only keeps its own thread busy answers them from
            // libzmq's I/O thread and is kept (``Motherboard/tick(now:)``).
            .heartbeatInterval(.seconds(1)), .heartbeatTimeout(.seconds(3)),
            // A connection that has not finished its handshake (greeting, CURVE) in 5 s is closed:
            // an idle peer without a key holds a descriptor for no longer.
            .handshakeInterval(.seconds(5)))
        let metrics = BrokerMetrics()
        let plan = ConnectionLimit.plan(
            descriptorLimit: descriptors.now, inUse: DescriptorLimit.inUse(), configuredMaximum: options.maximumConnections)
        boardbus_accept_guard_start(Int32(clamping: plan.ceiling))
        let gate = ConnectionGate(maximum: plan.maximum, metrics: metrics, logger: logger)
        logger.info("connection limit", metadata: ["connections": "\(plan.maximum)", "descriptorCeiling": "\(plan.ceiling)"])
        // Before any bind, so that every connection is counted.
        let watch = try ConnectionWatch(context: context, sockets: [socket], handler: gate.handle)
        if address.ipcPath != nil {
            // Only peers running as our uid may talk to the broker (on top of the 0700 directory).
            do {
                try socket.set(.acceptIPCFromUser(getuid()))
            } catch {
                logger.warning("this libzmq cannot filter ipc peers by uid; relying on the runtime directory's mode", metadata: ["error": "\(error)"])
            }
        }
        try socket.bind(address.endpoint)
        // The in-process endpoint of the broker's own helpers, which share its context (the MDP
        // endpoint, the uplink): no kernel socket between them and the routing loop.
        try socket.bind(Self.inProcessEndpoint)
        let mdp = try mdpEndpoint(address)
        let security = try listenOnNetwork(
            socket: socket, context: context, address: address, stateDirectory: stateDirectory, metrics: metrics,
            mdpOnTCP: mdp?.hasPrefix("tcp://") == true)

        // The launcher reports exits from its own threads; they reach the motherboard on the loop.
        let exits = ExitForwarder()
        let launcher = BoardLauncher(
            address: address, stateDirectory: stateDirectory, binaryDirectory: options.binaryDirectory, logger: logger,
            logs: .init(writer: options.logWriter, maximumBytes: options.maximumLogBytes)
        ) { pid, status, clean in
            exits.forward(pid: pid, status: status, clean: clean)
        }
        let transport = RouterTransport(socket: socket, backlogBudget: options.settings.maximumUnreadBytesPerPeer)
        let motherboard = try Motherboard(
            manifest: options.manifest, settings: options.settings, transport: transport,
            producer: LauncherProducer(launcher: launcher), logger: logger, metrics: metrics)
        let attach =
            try options.attach ?? options.manifest.attach.map { try UplinkSettings(manifest: $0, directory: options.manifest.directory) }
        if attach != nil { motherboard.uplinkSecret = Registration.makeSecret() }
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
        let handler = RouterLoopHandler(
            motherboard: motherboard, transport: transport, notifier: startFailure == nil ? notifier : nil, gate: gate,
            allowList: security.allowList)
        let loop = try SocketLoop(
            name: "motherboard", socket: socket, handler: handler, tickInterval: .milliseconds(100), limits: options.settings.limits)
        exits.connect(loop: loop, motherboard: motherboard)
        loop.start()
        var majordomo: MajordomoBridge?
        var majordomoWatch: ConnectionWatch?
        if let endpoint = mdp, startFailure == nil {
            do {
                majordomo = try MajordomoBridge(
                    settings: .init(endpoint: endpoint, limits: options.settings.limits), context: context, localEndpoint: Self.inProcessEndpoint,
                    curveSecretKey: security.curveSecretKey, logger: logger,
                    beforeBind: { router in majordomoWatch = try ConnectionWatch(context: context, sockets: [router], handler: gate.handle) },
                    connectionKey: { name, descriptor in gate.noteKey(name, descriptor: descriptor) })
                majordomo?.start()
                logger.info("speaking Majordomo (MDP 0.2)", metadata: ["endpoint": "\(endpoint)"])
            } catch {
                startFailure = error
                logger.error("cannot serve Majordomo", metadata: ["endpoint": "\(endpoint)", "error": "\(error)"])
            }
        }
        var uplink: Uplink?
        if let attach, let secret = motherboard.uplinkSecret, startFailure == nil {
            uplink = try Uplink(
                settings: attach, context: context, localEndpoint: Self.inProcessEndpoint, secret: secret, limits: options.settings.limits,
                logger: logger)
            uplink?.start()
        }

        let pidFile = "\(address.runtimeDirectory)/motherboard.pid"
        try "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8)

        if startFailure == nil {
            logger.info("motherboard ready", metadata: ["endpoint": "\(address.endpoint)", "pid": "\(getpid())"])
            FileHandle.standardOutput.write(Data("READY \(address.endpoint)\n".utf8))
            await waitForShutdown()
            logger.info("motherboard stopping")
        }

        notifier?.notify("STOPPING=1\nSTATUS=stopping the fleet")
        uplink?.stop()
        majordomo?.stop()
        await launcher.stopAll()
        rotation.stop()
        await metricsEndpoint?.stop()
        try? FileManager.default.removeItem(atPath: metricsFile)
        loop.stop()
        majordomoWatch?.stop()
        watch.stop()
        security.zap?.stop()
        context.terminate()
        try? FileManager.default.removeItem(atPath: pidFile)
        if let path = address.ipcPath { try? FileManager.default.removeItem(atPath: path) }
        if let startFailure { throw startFailure }
    }
}

extension MotherboardServer {
    static let inProcessEndpoint = "inproc://motherboard"

    /// What listening on tcp set up: the ZAP handler to stop, the allow-list it reads.
    struct NetworkSecurity {
        var zap: ZAPHandler?
        var allowList: AllowListFile?
        /// The broker's CURVE secret key, for other tcp endpoints (MDP); nil without CURVE.
        var curveSecretKey: String?
    }

    /// The MDP endpoint, with a relative ipc path made absolute in the runtime directory.
    func mdpEndpoint(_ address: BusAddress) throws -> String? {
        guard let endpoint = options.mdp ?? options.manifest.mdp else { return nil }
        if endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst(6))
            return path.hasPrefix("/") ? endpoint : "ipc://\(address.runtimeDirectory)/\(path)"
        }
        guard endpoint.hasPrefix("tcp://") else { throw BusError(.badArgument, "--mdp takes an ipc:// or tcp:// endpoint, not '\(endpoint)'") }
        return endpoint
    }

    /// Binds the tcp endpoints (after the ipc one: libzmq takes the security options of an
    /// endpoint when it is bound, so the ipc socket stays as it was). CURVE with the broker's key
    /// pair and a ZAP handler checking the allow-list, unless `--insecure`.
    /// An MDP endpoint on tcp (`mdpOnTCP`) is guarded as the main one: keys, allow-list, ZAP.
    func listenOnNetwork(
        socket: ZMQSocket, context: ZMQContext, address: BusAddress, stateDirectory: String, metrics: BrokerMetrics, mdpOnTCP: Bool
    ) throws -> NetworkSecurity {
        let endpoints = options.listen.isEmpty ? options.manifest.listen : options.listen
        guard !endpoints.isEmpty || mdpOnTCP else { return NetworkSecurity(zap: nil) }
        for endpoint in endpoints where !endpoint.hasPrefix("tcp://") {
            throw BusError(.badArgument, "--listen takes tcp://ADDRESS:PORT endpoints, not '\(endpoint)'")
        }
        let logger = logger
        var decide: @Sendable (ZAPHandler.Request) -> String?
        var secretKey: String?
        var allowList: AllowListFile?
        if options.insecure {
            logger.critical(
                "INSECURE: tcp endpoints without CURVE: anyone who reaches them can use the fleet", metadata: ["endpoints": "\(endpoints)"])
            FileHandle.standardError.write(
                Data("motherboard: WARNING: --insecure: \(endpoints.joined(separator: " ")) accept anyone, unencrypted\n".utf8))
            // Every peer is let in; the name marks its connection as a tcp one (for `list`'s host).
            decide = { _ in "insecure" }
        } else {
            let directory = "\(stateDirectory)/curve"
            try RuntimeDirectory.prepare(directory)
            for moved in try StateDirectory.adoptCurveFiles(from: "\(address.runtimeDirectory)/curve", to: directory) {
                logger.notice("moved a CURVE file from the runtime directory to the state directory", metadata: ["file": "\(moved)"])
            }
            let keyPath = options.curveKeyPath ?? "\(directory)/server.key"
            let (keys, created) = try CurveKeyPair.loadOrCreate(path: keyPath, name: "motherboard")
            if created { logger.notice("made the motherboard's CURVE key pair", metadata: ["file": "\(keyPath)"]) }
            try keys.certificate(includingSecret: false).write(toFile: "\(directory)/server.pub", atomically: true, encoding: .utf8)
            let allowListPath = options.allowListPath ?? "\(directory)/allowed.keys"
            // A malformed allow-list stops the start, rather than refusing everyone later.
            let known = try CurveAllowList.load(path: allowListPath)
            if known.names.isEmpty {
                logger.warning("the allow-list is empty: no client can connect over tcp yet", metadata: ["file": "\(allowListPath)"])
            }
            let file = AllowListFile(path: allowListPath, list: known, logger: logger)
            allowList = file
            decide = { request in
                if request.mechanism == "CURVE", let key = request.publicKey, let name = file.name(of: key) { return name }
                metrics.countRefusedConnection(reason: "key")
                logger.warning(
                    "connection refused: key not in the allow-list",
                    metadata: [
                        "address": "\(request.address)", "mechanism": "\(request.mechanism)", "key": "\(request.publicKey ?? "none")",
                        "allowList": "\(file.path)",
                    ])
                return nil
            }
            secretKey = keys.secretKey
            try socket.set(.curveServer(true), .curveSecretKey(keys.secretKey ?? ""))
        }
        let zap = try ZAPHandler(context: context, decide: decide)
        try socket.set(.zapDomain("boardbus"))
        do {
            for endpoint in endpoints {
                try socket.bind(endpoint)
                logger.info("listening", metadata: ["endpoint": "\(endpoint)", "security": "\(options.insecure ? "none" : "CURVE")"])
            }
        } catch {
            zap.stop()
            throw error
        }
        return NetworkSecurity(zap: zap, allowList: allowList, curveSecretKey: secretKey)
    }

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
    let backlog: ConnectionBacklog<PeerID>

    init(socket: ZMQSocket, backlogBudget: Int = MotherboardSettings().maximumUnreadBytesPerPeer) {
        self.socket = socket
        backlog = ConnectionBacklog(budget: backlogBudget)
    }

    /// The peer of the last send that failed because the peer is gone (not merely full).
    private var lastGone: PeerID?

    func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
        guard backlog.mayQueue(envelope.payload.count, to: peer) else {
            answerInstead(kind: envelope.header.kind, correlationID: envelope.header.correlationID, to: peer)
            return false
        }
        return sent(try? socket.send(envelope, routingID: peer.bytes), to: peer)
    }

    /// Sends the frames of the message being handled on to `peer`, as they are (`header` is its
    /// header frame, as routed).
    func forwardReceived(to peer: PeerID, payloadBytes: Int, kind: MessageKind, header: UnsafeRawBufferPointer) -> Bool {
        guard backlog.mayQueue(payloadBytes, to: peer) else {
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
            .busy, "the answer was dropped: \(backlog.queuedBytes(to: peer)) bytes of earlier answers to this connection wait unread")
        _ = sent(try? socket.send(Envelope.error(error, correlationID: correlationID), routingID: peer.bytes), to: peer)
    }

    private func sent(_ result: ZMQSocket.SendResult?, to peer: PeerID) -> Bool {
        if result == .peerUnreachable {
            lastGone = peer
            backlog.forget(peer)
        }
        return result == .sent
    }

    func isConnected(_ peer: PeerID) -> Bool {
        lastGone != peer
    }

    func isBacklogged(_ peer: PeerID) -> Bool {
        backlog.isStalled(peer)
    }
}

/// Feeds the ROUTER's messages and ticks to the motherboard, on the socket's thread.
final class RouterLoopHandler: SocketLoopHandler {
    private let motherboard: Motherboard
    private let transport: RouterTransport
    private let clock = ContinuousClock()
    private var heap = HeapTrim()
    private let notifier: SystemdNotifier?

    private let gate: ConnectionGate?
    private let allowList: AllowListFile?
    private var ticks = 0

    init(
        motherboard: Motherboard, transport: RouterTransport, notifier: SystemdNotifier? = nil, gate: ConnectionGate? = nil,
        allowList: AllowListFile? = nil
    ) {
        self.motherboard = motherboard
        self.transport = transport
        self.notifier = notifier
        self.gate = gate
        self.allowList = allowList
    }

    /// A message came on a connection new to its peer: a tcp one names its CURVE key (its
    /// `User-Id`), so that the connection can be closed if the key is revoked.
    private func noteConnection(of peer: PeerID, on socket: ZMQSocket) {
        let descriptor = socket.lastSourceDescriptor
        guard transport.backlog.noteReceived(from: peer, descriptor: descriptor), let gate,
            let user = socket.lastReceivedProperty("User-Id"), !user.isEmpty
        else { return }
        gate.noteKey(user, descriptor: descriptor)
    }

    /// Keys removed from the allow-list: their connections are closed and the boards registered
    /// over them dropped, within half a second of the file's change.
    private func revokeRemovedKeys() {
        guard let allowList, let gate else { return }
        allowList.refresh()
        let revoked = allowList.takeRevoked()
        guard !revoked.isEmpty else { return }
        let closed = gate.close(connectionsOfKeys: revoked)
        motherboard.revoke(keys: revoked)
        motherboard.logger.notice(
            "keys removed from the allow-list: their connections closed",
            metadata: ["keys": "\(revoked.sorted().joined(separator: ","))", "connections": "\(closed)"])
    }

    /// Commands and replies that need only a new correlation id go on in the frames they came in.
    func intercept(from routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int, on socket: ZMQSocket) -> Bool {
        guard let routingID else { return false }
        let peer = PeerID(routingID)
        noteConnection(of: peer, on: socket)
        if transport.backlog.isStalled(peer) { return refuseStalled(peer, header: UnsafeRawBufferPointer(header)) }
        guard let route = motherboard.routeInPlace(header, from: peer, now: clock.now) else { return false }
        if !transport.forwardReceived(to: route.peer, payloadBytes: payloadBytes, kind: route.kind, header: UnsafeRawBufferPointer(header)) {
            motherboard.undeliverable(route.kind, to: route.peer, correlationID: HeaderLayout.correlationID(in: UnsafeRawBufferPointer(header)))
        }
        return true
    }

    /// A peer that does not read what it asked for: its requests are answered `busy` (a small
    /// answer, which the backlog lets through) and go no further. Other messages (heartbeats,
    /// answers it gives as a board) are handled as usual.
    private func refuseStalled(_ peer: PeerID, header: UnsafeRawBufferPointer) -> Bool {
        guard let correlationID = HeaderLayout.answerableCorrelationID(header) else { return false }
        motherboard.counters.refusedWhileStalled += 1
        let error = BusError(
            .busy, "\(transport.backlog.queuedBytes(to: peer)) bytes of answers to this connection wait unread; read them before asking for more"
        )
        _ = transport.send(Envelope.error(error, correlationID: correlationID), to: peer)
        return true
    }

    func received(_ message: ReceivedMessage, on socket: ZMQSocket) {
        guard let routingID = message.routingID else { return }
        let peer = PeerID(routingID)
        noteConnection(of: peer, on: socket)
        guard case .success(let envelope) = message.content, envelope.header.kind == .register else {
            return motherboard.receive(message.content, from: peer, now: clock.now)
        }
        motherboard.receive(
            message.content, from: peer, now: clock.now, origin: Self.origin(of: message, on: socket), process: socket.lastSourceProcessID)
    }

    /// Where a registration's connection comes from, when it is a tcp one: the peer's address
    /// and the name its key has in the allow-list (`10.0.0.2 (edge-b)`).
    static func origin(of message: ReceivedMessage, on socket: ZMQSocket) -> PeerOrigin? {
        // Only tcp connections went through the ZAP handler and carry a user id; ipc ones do not.
        guard let user = socket.lastReceivedProperty("User-Id"), !user.isEmpty,
            let address = socket.lastReceivedProperty("Peer-Address")
        else { return nil }
        return PeerOrigin(address: address, keyName: user)
    }

    func tick(on socket: ZMQSocket) {
        ticks += 1
        if ticks % 5 == 0 { revokeRemovedKeys() }
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

/// The allow-list file, read again whenever it changes (so that a key is added or removed without
/// a restart), from the ZAP thread and the routing loop. A change that does not parse is reported
/// once, with its line, and the list in force stays: a typo never locks every peer out.
final class AllowListFile: @unchecked Sendable {
    let path: String
    private let lock = NSLock()
    private var list: CurveAllowList
    private var stamp: (Int, Int)?
    private let logger: Logger

    /// `list` is the one read at start (the broker does not start with an invalid one).
    init(path: String, list: CurveAllowList, logger: Logger) {
        self.path = path
        self.list = list
        self.logger = logger
        stamp = Self.stamp(path)
    }

    func name(of key: String) -> String? {
        lock.withLock {
            refreshLocked()
            return list.name(of: key)
        }
    }

    private static func stamp(_ path: String) -> (Int, Int)? {
        var info = stat()
        return stat(path, &info) == 0 ? (info.st_mtim.tv_sec, info.st_mtim.tv_nsec ^ Int(info.st_size)) : nil
    }

    /// Reads the file again if it changed; returns the names whose keys it no longer has (once:
    /// whichever thread reads the change first keeps them for ``takeRevoked()``).
    func refresh() {
        lock.withLock { refreshLocked() }
    }

    /// The names removed from the list since the last call.
    func takeRevoked() -> Set<String> {
        lock.withLock {
            defer { revoked = [] }
            return revoked
        }
    }

    private var revoked: Set<String> = []

    private func refreshLocked() {
        let current = Self.stamp(path)
        guard current.map({ $0 != stamp ?? (-1, -1) }) ?? (stamp != nil) else { return }
        stamp = current
        do {
            let before = Set(list.names.values)
            list = try CurveAllowList.load(path: path)
            revoked.formUnion(before.subtracting(list.names.values))
            logger.notice("allow-list read again", metadata: ["file": "\(path)", "keys": "\(list.names.count)"])
        } catch {
            logger.error(
                "allow-list not changed: the new file is invalid; the list read before stays in force",
                metadata: ["file": "\(path)", "error": "\((error as? BusError)?.message ?? "\(error)")"])
        }
    }
}

/// The runtime directory (and the state directory, and their `curve` directory): created with
/// mode 0700, since a socket in it gives access to the fleet and what is kept there is secret.
public enum RuntimeDirectory {
    public static func prepare(_ path: String, what: String = "runtime directory") throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw BusError(.badArgument, "cannot create \(what) \(path): \(error.localizedDescription)")
        }
        guard chmod(path, 0o700) == 0 else {
            throw BusError(.badArgument, "cannot set mode 0700 on \(what) \(path)")
        }
    }
}
