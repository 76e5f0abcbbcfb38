import ArgumentParser
import BusCore
import Foundation
import Logging
import MotherboardCore
import ServiceLifecycle

/// The BoardBus broker: routes messages between board processes and starts the fleet's boards.
@main
struct MotherboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "motherboard",
        abstract: "The BoardBus broker: routes outputs, activations, actions and commands between boards.")

    @Option(help: "The fleet manifest (JSON).")
    var manifest: String?

    @Option(help: "The runtime directory (default: $BOARDBUS_RUNTIME_DIR, $XDG_RUNTIME_DIR/boardbus or /tmp/boardbus-$UID).")
    var runtimeDir: String?

    @Option(help: "The endpoint to bind (default: ipc://<runtime dir>/motherboard.sock).")
    var bus: String?

    @Option(help: "Where board executables are (default: the directory of this executable).")
    var binDir: String?

    @Option(help: "Serve metrics over HTTP at http://HOST:PORT/metrics (an IP address; port 0 picks one, written to <runtime dir>/metrics.addr).")
    var metricsListen: String?

    @Option(
        help: "Rotate board logs past this many bytes (copytruncate, 3 old copies; 0: never; default $BOARDBUS_LOG_MAX_BYTES, else 10485760).")
    var logMaxBytes: Int?

    @Flag(help: "Stop when the parent process exits (for test harnesses).")
    var exitWithParent = false

    func run() async throws {
        BusLogging.bootstrap()
        var environment = ProcessInfo.processInfo.environment
        if let runtimeDir { environment["BOARDBUS_RUNTIME_DIR"] = runtimeDir }
        let address = BusAddress.resolve(explicitEndpoint: bus, environment: environment, userID: getuid())
        let binaries = binDir ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
        let logger = Logger(label: "motherboard")
        do {
            let fleet = try manifest.map(FleetManifest.load(path:)) ?? FleetManifest()
            let listen = try metricsListen.map(MetricsEndpoint.parse)
            let logLimit = logMaxBytes ?? environment["BOARDBUS_LOG_MAX_BYTES"].flatMap { Int($0) } ?? 10 << 20
            guard logLimit == 0 || logLimit >= 4096 else {
                throw BusError(.badArgument, "--log-max-bytes must be 0 (never rotate) or at least 4096, not \(logLimit)")
            }
            let server = MotherboardServer(
                options: .init(
                    address: address, manifest: fleet, binaryDirectory: binaries, exitWithParent: exitWithParent, metricsListen: listen,
                    maximumLogBytes: logLimit),
                logger: logger)
            let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
            try await group.run()
        } catch let error as BusError {
            FileHandle.standardError.write(Data("motherboard: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}
