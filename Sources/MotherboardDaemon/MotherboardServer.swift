import BusCore
import MotherboardCore
import MotherboardGateways
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
        /// The access policy for remote principals (default: the manifest's `policy`, else
        /// `<state>/policy.json`; without a file, a remote principal may do nothing).
        public var policyPath: String?
        /// The most connections all endpoints together hold (ipc, tcp, MDP); fewer when the
        /// descriptor limit leaves less room (``ConnectionLimit``). Default 8192.
        public var maximumConnections = 8192
        /// libzmq I/O threads of the broker's sockets (1 to 16): each connection is served by one
        /// of them, so more than one spreads many connections' reads and writes over more cores.
        public var ioThreads = 1

        /// Refuses an I/O thread count out of 1…16 (a context without one serves no connection),
        /// naming it as `name` (the option it came from).
        public static func checkIOThreads(_ count: Int, name: String = "ioThreads") throws(BusError) {
            guard (1...16).contains(count) else { throw BusError(.badArgument, "\(name) must be 1 to 16, not \(count)") }
        }
        /// Plaintext tcp, no keys: anyone who reaches the port is in.
        public var insecure = false
        /// The parent motherboard to attach to, serving this manifest's scopes there.
        public var attach: UplinkSettings?
        /// Where to speak Majordomo (MDP 0.2), if anywhere: `ipc://mdp.sock` (a relative path is in
        /// the runtime directory) or `tcp://ADDRESS:PORT` (CURVE as `listen`). Default: the manifest's `mdp`.
        public var mdp: String?
        /// The NATS cluster this motherboard joins (`--nats`, else the manifest's `nats`).
        public var nats: NATSGatewaySettings?

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

    let options: Options
    let logger: Logger

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

        // Room to spare for the broker's sockets, their monitors and the gateways' three each
        // (their boards share one connection): libzmq's default is 1 023.
        try Options.checkIOThreads(options.ioThreads)
        let context = try ZMQContext(maximumSockets: 4096, ioThreads: Int32(options.ioThreads))
        let socket = try ZMQSocket(context: context, kind: .router)
        // A board that is gone fails the broker's next heartbeat to it (every 500 ms); one silent
        // past the liveness timeout is dropped unless its process runs, not stopped
        // (``Motherboard/tick(now:)``).
        try socket.set(ZMQSocket.Option.peerRouter(limits: options.settings.limits))
        let metrics = BrokerMetrics(series: PrometheusSeries())
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
        if attach != nil { motherboard.links.uplinkSecret = Registration.makeSecret() }
        let nats =
            try options.nats ?? options.manifest.nats.map { try NATSGatewaySettings(manifest: $0, directory: options.manifest.directory) }
        if nats != nil { motherboard.links.exportSecret = Registration.makeSecret() }
        let policy = try PolicyFile(path: policyPath(stateDirectory: stateDirectory), logger: logger)
        motherboard.install(policy: policy.policy, source: policy.path, text: policy.text)
        let audit = AuditLog(path: "\(stateDirectory)/audit.log", maximumBytes: options.maximumLogBytes, logger: logger)
        motherboard.access.audit = { principal, line in audit.write(principal: principal, line) }
        // What an earlier broker's at-least-once boards had not answered goes to them again.
        let deliveries = DeliveryLogFile(path: "\(stateDirectory)/deliveries.log", logger: logger)
        let journaled = try deliveries.load()
        motherboard.deliveries.journal = deliveries
        motherboard.restoreDeliveries(journaled.pending, deadLetters: journaled.deadLetters, now: .now)
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
            allowList: security.allowList, policy: policy, hasRemotePeers: security.zap != nil)
        let loop = try SocketLoop(
            name: "motherboard", socket: socket, handler: handler, tickInterval: .milliseconds(100), limits: options.settings.limits)
        exits.connect(loop: loop, motherboard: motherboard)
        loop.start()
        // The gateways, once the routing loop runs: each reaches it over the in-process endpoint.
        var watches = [watch]
        var gateways: [any Gateway] = []
        if startFailure == nil {
            let environment = GatewayEnvironment(
                context: context, localEndpoint: Self.inProcessEndpoint, limits: options.settings.limits, logger: logger,
                curveSecretKey: security.curveSecretKey,
                watchConnections: { socket in watches.append(try ConnectionWatch(context: context, sockets: [socket], handler: gate.handle)) },
                keys: gate)
            var configurations: [Gateways.Configuration] = []
            if let mdp {
                if mdp.hasPrefix("tcp://"), let reason = security.closedBecause {
                    logger.critical("the MDP endpoint stays closed, as the tcp ones", metadata: ["endpoint": "\(mdp)", "error": "\(reason.message)"])
                } else {
                    configurations.append(.majordomo(endpoint: mdp))
                }
            }
            if let attach, let secret = motherboard.links.uplinkSecret { configurations.append(.uplink(attach, secret: secret)) }
            if let nats, let secret = motherboard.links.exportSecret { configurations.append(.nats(nats, secret: secret)) }
            for configuration in configurations {
                do {
                    let gateway = try Gateways.make(configuration, environment: environment)
                    gateway.start()
                    gateways.append(gateway)
                    logger.info("gateway started", metadata: ["gateway": "\(gateway.description)"])
                } catch {
                    startFailure = error
                    logger.error("cannot start a gateway", metadata: ["gateway": "\(configuration)", "error": "\(error)"])
                    break
                }
            }
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
        for gateway in gateways.reversed() { gateway.stop() }
        await launcher.stopAll()
        rotation.stop()
        await metricsEndpoint?.stop()
        try? FileManager.default.removeItem(atPath: metricsFile)
        loop.stop()
        for connections in watches { connections.stop() }
        security.zap?.stop()
        context.terminate()
        try? FileManager.default.removeItem(atPath: pidFile)
        if let path = address.ipcPath { try? FileManager.default.removeItem(atPath: path) }
        if let startFailure { throw startFailure }
    }
}

extension MotherboardServer {
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
