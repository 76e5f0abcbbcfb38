import ArgumentParser
import BoardBusLogWriter
import BusCore
import BusZeroMQ
import Foundation
import Logging
import MotherboardCore
import MotherboardDaemon
import MotherboardGateways
import ServiceLifecycle

/// The BoardBus broker: routes messages between board processes and starts the fleet's boards.
@main
struct MotherboardCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "motherboard",
        abstract: "The BoardBus broker: routes outputs, activations, actions and commands between boards.",
        subcommands: [LogWriterCommand.self])

    @Option(help: "The fleet manifest (JSON).")
    var manifest: String?

    @Option(help: "The runtime directory (default: $BOARDBUS_RUNTIME_DIR, $XDG_RUNTIME_DIR/boardbus or /tmp/boardbus-$UID).")
    var runtimeDir: String?

    @Option(
        help:
            "Where stores, the CURVE key pair and the allow-list are kept, apart from the runtime directory (default: $BOARDBUS_STATE_DIR, $XDG_STATE_HOME/boardbus or ~/.local/state/boardbus)."
    )
    var stateDir: String?

    @Option(help: "The endpoint to bind (default: ipc://<runtime dir>/motherboard.sock).")
    var bus: String?

    @Option(help: "Where board executables are (default: the directory of this executable).")
    var binDir: String?

    @Option(help: "Serve metrics over HTTP at http://HOST:PORT/metrics (an IP address; port 0 picks one, written to <runtime dir>/metrics.addr).")
    var metricsListen: String?

    @Option(
        help:
            "Keep each board log under this many bytes, with 3 old copies (0: never rotate; at least 4096; default $BOARDBUS_LOG_MAX_BYTES, else 10485760)."
    )
    var logMaxBytes: Int?

    @Option(
        help: ArgumentHelp(
            "Also listen on tcp://ADDRESS:PORT (repeatable; default: the manifest's listen), CURVE-encrypted and authenticated.",
            valueName: "endpoint"))
    var listen: [String] = []

    @Option(help: "The motherboard's CURVE key pair file (default: <state dir>/curve/server.key, made on first start, mode 0600).")
    var curveKey: String?

    @Option(help: "The allow-list of client public keys, 'NAME KEY' per line (default: <state dir>/curve/allowed.keys; re-read when it changes).")
    var allow: String?

    @Option(
        help:
            "The access policy for remote principals, JSON (default: the manifest's policy, else <state dir>/policy.json; re-read when it changes). Without one, a remote key may do nothing."
    )
    var policy: String?

    @Option(
        help:
            "The most connections all endpoints together hold (ipc, tcp, MDP; fewer when the descriptor limit leaves less room; tcp gets at most 3/4). Default 8192."
    )
    var maxConnections: Int?

    @Flag(help: "Listen on tcp without CURVE: anyone who reaches the port can use the fleet. For a private test network only.")
    var insecure = false

    @Option(help: "Attach to a parent motherboard at tcp://HOST:PORT, serving this manifest's scopes there (default: the manifest's attach).")
    var attach: String?

    @Option(help: "The parent's public key (40 Z85 characters, or a file holding it; default $BOARDBUS_SERVER_KEY).")
    var attachServerKey: String?

    @Option(help: "This motherboard's key pair file for the parent (default $BOARDBUS_CLIENT_KEY).")
    var attachClientKey: String?

    @Flag(help: "The parent listens without CURVE (--insecure there).")
    var attachInsecure = false

    @Option(
        help:
            "Speak Majordomo (MDP 0.2) at this endpoint too: ipc://mdp.sock (a relative path is in the runtime directory) or tcp://ADDRESS:PORT (CURVE, as --listen). Default: the manifest's mdp."
    )
    var mdp: String?

    @Option(
        help:
            "Join a NATS cluster: nats://HOST:PORT[,nats://HOST:PORT…] (user and password may be in a URL). This motherboard's boards are served to the fleet's other motherboards there, and theirs here. Default: the manifest's nats."
    )
    var nats: String?

    @Option(help: "The fleet's name on the NATS cluster (A–Z a–z 0–9 _ -; default: the manifest's, else boardbus).")
    var natsFleet: String?

    @Option(help: "This motherboard's name in the fleet's lists (busctl list's HOST; default: the manifest's, else the host name).")
    var natsHost: String?

    @Option(
        help:
            "The access policy's principal for requests and actions that come through NATS (default: the manifest's, else nats): what the policy allows it is all the cluster may do here."
    )
    var natsPrincipal: String?

    @Option(
        help:
            "The most requests and actions from the NATS cluster waiting for this motherboard's answers at once (default: the manifest's, else 10000); past it, the cluster is answered busy."
    )
    var natsMaxInFlight: Int?

    @Option(help: "A NATS .creds file (user JWT and NKey seed).")
    var natsCredentials: String?

    @Option(help: "The certificate authority of the NATS servers' TLS certificates (the connection is then TLS).")
    var natsTlsCa: String?

    @Option(help: "libzmq I/O threads for the broker's connections (1 to 16; default 1). Each connection is served by one of them.")
    var ioThreads = 1

    @Flag(help: "Stop when the parent process exits (for test harnesses).")
    var exitWithParent = false

    func run() throws {
        try runBlocking { try await serve() }
    }

    func serve() async throws {
        BusLogging.bootstrap()
        var environment = ProcessInfo.processInfo.environment
        if let runtimeDir { environment["BOARDBUS_RUNTIME_DIR"] = runtimeDir }
        let address = BusAddress.resolve(explicitEndpoint: bus, environment: environment, userID: getuid())
        // The executable itself (argv[0] is only a name when it was found on PATH).
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let binaries = binDir ?? executable.deletingLastPathComponent().path
        let logger = Logger(label: "motherboard")
        do {
            let fleet = try manifest.map(FleetManifest.load(path:)) ?? FleetManifest()
            let listen = try metricsListen.map(MetricsEndpoint.parse)
            let logLimit = logMaxBytes ?? environment["BOARDBUS_LOG_MAX_BYTES"].flatMap { Int($0) } ?? 10 << 20
            guard logLimit == 0 || logLimit >= 4096 else {
                throw BusError(.badArgument, "--log-max-bytes must be 0 (never rotate) or at least 4096, not \(logLimit)")
            }
            var options = MotherboardServer.Options(
                address: address, manifest: fleet, binaryDirectory: binaries, exitWithParent: exitWithParent, metricsListen: listen,
                maximumLogBytes: logLimit)
            options.listen = self.listen
            options.logWriter = LogWriterCommand.command(beside: executable)
            options.stateDirectory = stateDir
            if let maxConnections {
                guard maxConnections > 0 else { throw BusError(.badArgument, "--max-connections must be at least 1, not \(maxConnections)") }
                options.maximumConnections = maxConnections
            }
            try MotherboardServer.Options.checkIOThreads(ioThreads, name: "--io-threads")
            options.ioThreads = ioThreads
            options.curveKeyPath = curveKey
            options.allowListPath = allow
            options.policyPath = policy
            options.insecure = insecure
            options.mdp = mdp
            if let attach {
                if let attachServerKey { environment["BOARDBUS_SERVER_KEY"] = attachServerKey }
                if let attachClientKey { environment["BOARDBUS_CLIENT_KEY"] = attachClientKey }
                let credentials = attachInsecure ? nil : try CurveClientCredentials.resolve(environment: environment)
                guard credentials != nil || attachInsecure else {
                    throw BusError(.badArgument, "--attach needs --attach-server-key and --attach-client-key (or --attach-insecure)")
                }
                options.attach = try UplinkSettings(endpoint: attach, credentials: credentials)
            }
            if let nats {
                // The manifest's nats with the command line's on top: one way to settings, whose
                // relative files are the manifest's (the command line's are made absolute here).
                var merged = fleet.nats ?? FleetManifest.NATS(servers: [])
                merged.servers = nats.split(separator: ",").map(String.init)
                merged.fleet = natsFleet ?? merged.fleet
                merged.host = natsHost ?? merged.host
                merged.principal = natsPrincipal ?? merged.principal
                merged.maximumInFlight = natsMaxInFlight ?? merged.maximumInFlight
                let here = FileManager.default.currentDirectoryPath
                if let natsCredentials { merged.credentials = URL(fileURLWithPath: natsCredentials, relativeTo: URL(fileURLWithPath: here)).path }
                if let natsTlsCa { merged.tlsCA = URL(fileURLWithPath: natsTlsCa, relativeTo: URL(fileURLWithPath: here)).path }
                options.nats = try NATSGatewaySettings(manifest: merged, directory: fleet.directory)
            } else if natsFleet != nil || natsHost != nil || natsCredentials != nil || natsTlsCa != nil || natsPrincipal != nil
                || natsMaxInFlight != nil
            {
                throw BusError(
                    .badArgument,
                    "--nats-fleet, --nats-host, --nats-principal, --nats-max-in-flight, --nats-credentials and --nats-tls-ca go with --nats")
            }
            let server = MotherboardServer(options: options, logger: logger)
            let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
            try await group.run()
        } catch let error as BusError {
            FileHandle.standardError.write(Data("motherboard: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// `motherboard log-writer`: what the broker runs beside each board to write its log (standard
/// input) to a file kept under a size, where `boardbus-log-writer` (the same, in a much smaller
/// process) is not beside the motherboard executable. Not for people to run; hidden from help.
struct LogWriterCommand: ParsableCommand {
    /// The command that writes a board's log: `boardbus-log-writer` beside `motherboard`, else
    /// `motherboard log-writer`.
    static func command(beside motherboard: URL) -> [String] {
        let small = motherboard.deletingLastPathComponent().appendingPathComponent("boardbus-log-writer").path
        return FileManager.default.isExecutableFile(atPath: small) ? [small] : [motherboard.path, "log-writer"]
    }

    static let configuration = CommandConfiguration(
        commandName: "log-writer", abstract: "Write standard input to a log file kept under a size (started by the broker).",
        shouldDisplay: false)

    @Option(help: "Rotate before the file passes this many bytes (at least 4096).")
    var maxBytes: Int

    @Option(help: "Old copies kept (.1 … .N).")
    var keep = 3

    @Argument(help: "The log file.")
    var path: String

    func run() throws {
        LogWriter(path: path, maximumBytes: maxBytes, generations: keep).runAsProcess()
    }
}
