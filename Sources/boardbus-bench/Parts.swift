import ArgumentParser
import BoardKitTesting
import BusCore
import Foundation

/// A part whose rows go into a report printed at the end.
protocol ReportedPart: BenchPart {
    var run: RunLength { get }
    func rows(into report: Report) async throws
}

extension ReportedPart {
    func measure() async throws {
        let report = Report()
        try await rows(into: report)
        print(report.render())
    }
}

/// `boardbus-bench scale`: 2 000 boards and flows against 10, memory per board.
struct ScaleRows: ReportedPart {
    static let configuration = CommandConfiguration(
        commandName: "scale", abstract: "Only the scale rows (2 000 boards and flows against 10, memory per board).")
    @OptionGroup var run: RunLength

    func rows(into report: Report) async throws {
        try await TestFleet.with(manifest: echoFleetManifest) { fleet in
            try await ScaleBench(fleet: fleet, bus: BoardBusBench(fleet: fleet), settings: run.quick ? .quick : .full).run(report: report)
        }
    }
}

/// `boardbus-bench alternatives`: against NATS and D-Bus, one call at a time.
struct AlternativesRows: ReportedPart {
    static let configuration = CommandConfiguration(
        commandName: "alternatives", abstract: "Only the rows against NATS and D-Bus (raw echo, one at a time).")
    @OptionGroup var run: RunLength

    func rows(into report: Report) async throws {
        try await TestFleet.with(manifest: echoFleetManifest) { fleet in
            try await AlternativesBench(bus: BoardBusBench(fleet: fleet), quick: run.quick).run(report: report)
        }
    }
}

/// `boardbus-bench stores`: a durable keyed store at 10, 10 000 and 1 000 000 records.
struct StoreRows: ReportedPart {
    static let configuration = CommandConfiguration(
        commandName: "stores", abstract: "Only the store rows (a durable keyed store at 10, 10 000 and, without --quick, 1 000 000 records).")
    @OptionGroup var run: RunLength

    func rows(into report: Report) async throws { try await StoreBench(quick: run.quick).run(report: report) }
}

/// `boardbus-bench mdp`: BoardBus's MDP endpoint against majortomo's broker.
struct MajordomoRows: ReportedPart {
    static let configuration = CommandConfiguration(
        commandName: "mdp", abstract: "Only the Majordomo rows (BoardBus's MDP endpoint against majortomo's broker).")
    @OptionGroup var run: RunLength

    func rows(into report: Report) async throws { try await MajordomoBench.run(quick: run.quick, report: report) }
}

/// `boardbus-bench network`: tcp+CURVE and NATS in network namespaces, cut-link times.
struct NetworkRows: BenchPart {
    static let configuration = CommandConfiguration(
        commandName: "network", abstract: "Only the rows across hosts (tcp+CURVE and NATS in network namespaces, cut-link times).")
    @OptionGroup var run: RunLength

    func measure() async throws {
        let report = Report()
        print("boardbus-bench (across hosts, \(run.quick ? "quick" : "full")) on \(MachineDescription.current())")
        try await NetworkBench.run(settings: run.quick ? .quick : .full, quick: run.quick, report: report)
        print("")
        print(report.render())
    }
}

/// `boardbus-bench broker-logic ROUND_TRIPS`: the routing logic without sockets.
struct BrokerLogic: BenchPart {
    static let configuration = CommandConfiguration(abstract: "Only the broker's logic without sockets, this many round trips.")
    @Argument(help: "Round trips.")
    var roundTrips: Int

    func measure() async throws {
        print("broker logic per round trip, no sockets: \(Int(try BrokerLogicBench.roundTrip(iterations: roundTrips))) ns")
        print("routed in place: \(Int(try BrokerLogicBench.roundTripInPlace(iterations: roundTrips))) ns")
    }
}

/// `boardbus-bench codec ITERATIONS`: the typed echo's payload decode and encode.
struct Codec: BenchPart {
    static let configuration = CommandConfiguration(abstract: "Only the typed echo's payload decode + encode, this many times.")
    @Argument(help: "Iterations.")
    var iterations: Int

    func measure() async throws {
        try CodecBench.run(iterations: iterations)
    }
}

/// `boardbus-bench tcp-client ENDPOINT`: the client side of the tcp+CURVE rows, run by
/// `network` inside a network namespace.
struct TCPClient: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "The client side of the tcp+CURVE rows, against this BoardBus endpoint (run by 'network').", shouldDisplay: false)
    @Argument(help: "The motherboard's tcp endpoint.")
    var endpoint: String
    @Option(help: "The motherboard's public key file.")
    var serverKey = ""
    @Option(help: "This client's key pair file.")
    var clientKey = ""
    @Option(help: "The baseline proxy's CURVE endpoint.")
    var baseline = ""
    @Option(help: "The baseline proxy's key file.")
    var baselineKey = ""
    @Option(help: "A motherboard joined by NATS to the echo board's, to call it through too.")
    var natsBus: String?
    @Option(help: "Round trips of each.")
    var requests = 5_000
    @Option(help: "Seconds of throughput load of each.")
    var seconds = 2.0
    @OptionGroup var run: RunLength

    func measure() async throws {
        try await NetworkBench.client(
            endpoint: endpoint, serverKey: serverKey, clientKey: clientKey, baselineEndpoint: baseline, baselineKey: baselineKey,
            natsBus: natsBus, requests: requests, seconds: seconds, settings: run.quick ? .quick : .full)
    }
}

/// `boardbus-bench count-client REQUESTS --endpoint E`: the client that `scripts/bench --counts`
/// runs under valgrind, this many serial echo calls.
struct CountClient: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "The client of scripts/bench --counts: this many serial echo calls to the broker at --endpoint.", shouldDisplay: false)
    @Argument(help: "Calls.")
    var requests: Int
    @Option(help: "The broker's endpoint.")
    var endpoint: String
    @OptionGroup var echo: EchoOptions

    func measure() async throws {
        try await CountLoop.run(endpoint: endpoint, requests: requests, call: echo.call, payload: echoPayload(bytes: echo.bytes))
    }
}

/// `boardbus-bench count-header-bytes`: the size of an echo request's header and its 0 byte.
struct CountHeaderBytes: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The size of a BoardBus echo request's header and its 0 byte (its frame without the payload).", shouldDisplay: false)

    func run() throws {
        print(try BaselineBench.frames(payload: Data())[0].count)
    }
}
