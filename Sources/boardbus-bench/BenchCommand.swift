import ArgumentParser
import BusCore
import Foundation

/// `boardbus-bench`: BoardBus against a C ZeroMQ baseline, in one run on one machine; each part
/// alone, and the loads that profilers and `scripts/bench --counts` run, as subcommands.
@main
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "boardbus-bench",
        abstract: "Measure BoardBus round trips, throughput, start-up and memory against a C zmq_proxy baseline.",
        subcommands: [
            Compare.self, Soak.self, ScaleRows.self, AlternativesRows.self, StoreRows.self, MajordomoRows.self, NetworkRows.self,
            Load.self, LoadBaseline.self, Latency.self, BrokerLogic.self, Codec.self, Churn.self,
            TCPClient.self, CountClient.self, CountHeaderBytes.self,
        ],
        defaultSubcommand: Compare.self)

    static func main() {
        main(LegacyArguments.translate(Array(CommandLine.arguments.dropFirst())))
    }
}

/// A subcommand that measures: run synchronously on the main thread, so that valgrind can run
/// the count client (see ``runBlocking(_:)``).
protocol BenchPart: ParsableCommand, Sendable {
    func measure() async throws
}

extension BenchPart {
    func run() throws {
        try runBlocking { try await measure() }
    }
}

struct RunLength: ParsableArguments {
    @Flag(help: "A short run (about a minute for the whole comparison).")
    var quick = false
}

/// What the echo board is asked: its command, the payload's format and size.
struct EchoOptions: ParsableArguments {
    @Option(help: "The echo board's command (echo or echo.raw).")
    var command = "echo"

    @Option(help: "With the typed echo: the payload format (json or cbor).")
    var format: PayloadFormat = .json

    @Option(help: "The payload's size in bytes.")
    var bytes = 100

    var call: EchoCall { EchoCall(command: command, format: command == "echo.raw" ? nil : format) }
}

/// How a throughput load is spread.
struct WindowOptions: ParsableArguments {
    @Option(help: "Connections.")
    var clients = 4

    @Option(help: "Requests in flight per connection.")
    var window = 16
}

/// The mode flags of the release before the subcommands (`--load 3`, `--latency-only 20000`,
/// `--scale-only`…), still taken for this release: each becomes its subcommand, with the options
/// it had under their new names.
enum LegacyArguments {
    /// The old flag, the subcommand, and whether the flag took the subcommand's argument.
    static let modes: [(flag: String, subcommand: String, takesValue: Bool)] = [
        ("--soak", "soak", true), ("--load", "load", true), ("--load-baseline", "load-baseline", true),
        ("--latency-only", "latency", true), ("--broker-logic", "broker-logic", true), ("--codec", "codec", true),
        ("--churn", "churn", true), ("--tcp-client", "tcp-client", true), ("--count-client", "count-client", true),
        ("--count-header-bytes", "count-header-bytes", false), ("--scale-only", "scale", false),
        ("--alternatives-only", "alternatives", false), ("--stores-only", "stores", false), ("--mdp-only", "mdp", false),
        ("--network-only", "network", false),
    ]
    static let renamed = [
        "--load-clients": "--clients", "--load-window": "--window", "--broker-io-threads": "--io-threads", "--load-endpoint": "--endpoint",
        "--count-endpoint": "--endpoint", "--tcp-server-key": "--server-key", "--tcp-client-key": "--client-key",
        "--tcp-baseline": "--baseline", "--tcp-baseline-key": "--baseline-key", "--tcp-nats-bus": "--nats-bus",
        "--tcp-requests": "--requests", "--tcp-seconds": "--seconds",
    ]

    static func translate(_ arguments: [String]) -> [String] {
        guard let index = arguments.firstIndex(where: { argument in modes.contains { $0.flag == argument } }) else { return arguments }
        let mode = modes.first { $0.flag == arguments[index] }!
        var rest = arguments
        rest.remove(at: index)
        var translated = [mode.subcommand]
        if mode.takesValue, index < rest.count { translated.append(rest.remove(at: index)) }
        translated += rest.map { renamed[$0] ?? $0 }
        FileHandle.standardError.write(
            Data("boardbus-bench: \(mode.flag) is now a subcommand: boardbus-bench \(translated.joined(separator: " "))\n".utf8))
        return translated
    }
}
