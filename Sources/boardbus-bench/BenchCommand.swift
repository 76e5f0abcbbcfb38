import ArgumentParser
import BoardKit
import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Histogram

/// `boardbus-bench`: BoardBus against a C ZeroMQ baseline, in one run on one machine.
@main
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "boardbus-bench",
        abstract: "Measure BoardBus round trips, throughput, start-up and memory against a C zmq_proxy baseline.")

    @Flag(help: "A short run (about a minute).")
    var quick = false

    @Option(help: "Instead of the comparison, a steady load for this many seconds: messages sent, answered, lost, broker memory.")
    var soak: Double?

    @Option(
        help: ArgumentHelp(
            "Instead of the comparison, only BoardBus's throughput load (by default 4×16 echo commands in flight) for this many seconds, printing the processes' pids: for profiling with perf.",
            visibility: .hidden))
    var load: Double?

    @Option(help: ArgumentHelp("With --load, --load-baseline or --latency-only: the echo board's command (echo or echo.raw).", visibility: .hidden))
    var command = "echo"

    @Option(help: ArgumentHelp("With --load or --latency-only and the typed echo: the payload format (json or cbor).", visibility: .hidden))
    var format: PayloadFormat = .json

    @Option(help: ArgumentHelp("With --load or --latency-only: the payload's size in bytes.", visibility: .hidden))
    var bytes = 100

    @Option(help: ArgumentHelp("Instead of the comparison, only the baseline's throughput load for this many seconds.", visibility: .hidden))
    var loadBaseline: Double?

    @Option(help: ArgumentHelp("With --load: the broker's libzmq I/O threads (motherboard --io-threads).", visibility: .hidden))
    var brokerIOThreads = 1

    @Option(help: ArgumentHelp("With --load or --load-baseline: connections.", visibility: .hidden))
    var loadClients = 4

    @Option(help: ArgumentHelp("With --load or --load-baseline: requests in flight per connection.", visibility: .hidden))
    var loadWindow = 16

    @Flag(help: ArgumentHelp("With --latency-only or --load: every request starts a new trace.", visibility: .hidden))
    var traced = false

    @Flag(
        help: ArgumentHelp(
            "With --load: load the broker with the baseline's blocking raw clients instead of BusClient; with --latency-only: also time them against it.",
            visibility: .hidden))
    var rawClients = false

    @Option(help: ArgumentHelp("Instead of the comparison, only the broker's logic without sockets, this many round trips.", visibility: .hidden))
    var brokerLogic: Int?

    @Option(help: ArgumentHelp("Instead of the comparison, only the typed echo's payload decode + encode, this many times.", visibility: .hidden))
    var codec: Int?

    @Option(
        help: ArgumentHelp(
            "Instead of the comparison, only the round trips (100 B, or --bytes) of the baseline and BoardBus's echo, this many of each, alternated in rounds.",
            visibility: .hidden))
    var latencyOnly: Int?

    @Option(
        help: ArgumentHelp("Instead of the comparison, only this many boards registering and leaving, with the broker's memory.", visibility: .hidden)
    )
    var churn: Int?

    @Option(
        help: ArgumentHelp("Instead of the comparison: the client side of the tcp+CURVE rows, against this BoardBus endpoint.", visibility: .hidden))
    var tcpClient: String?
    @Option(help: ArgumentHelp("With --tcp-client: the motherboard's public key file.", visibility: .hidden))
    var tcpServerKey = ""
    @Option(help: ArgumentHelp("With --tcp-client: this client's key pair file.", visibility: .hidden))
    var tcpClientKey = ""
    @Option(help: ArgumentHelp("With --tcp-client: the baseline proxy's CURVE endpoint.", visibility: .hidden))
    var tcpBaseline = ""
    @Option(help: ArgumentHelp("With --tcp-client: the baseline proxy's key file.", visibility: .hidden))
    var tcpBaselineKey = ""
    @Option(help: ArgumentHelp("With --tcp-client: a motherboard joined by NATS to the echo board's, to call it through too.", visibility: .hidden))
    var tcpNatsBus: String?
    @Option(help: ArgumentHelp("With --tcp-client: round trips of each.", visibility: .hidden))
    var tcpRequests = 5_000
    @Option(help: ArgumentHelp("With --tcp-client: seconds of throughput load of each.", visibility: .hidden))
    var tcpSeconds = 2.0

    @Option(
        help: ArgumentHelp(
            "Instead of the comparison: the client of scripts/bench --counts, this many serial echo calls (--command, --format, --bytes) to the broker at --count-endpoint.",
            visibility: .hidden))
    var countClient: Int?
    @Option(help: ArgumentHelp("With --count-client: the broker's endpoint.", visibility: .hidden))
    var countEndpoint = ""
    @Option(
        help: ArgumentHelp(
            "With --load: load a broker already running at this endpoint (a motherboard, or the baseline's proxy, with its echo) with the baseline's raw clients, and print the round trips; for a broker run under a tool.",
            visibility: .hidden))
    var loadEndpoint = ""
    @Flag(
        help: ArgumentHelp(
            "Instead of the comparison: print the size of a BoardBus echo request's header and its 0 byte (its frame without the payload).",
            visibility: .hidden))
    var countHeaderBytes = false

    @Flag(help: ArgumentHelp("Only the rows across hosts (tcp+CURVE in network namespaces, cut-link times).", visibility: .hidden))
    var networkOnly = false

    @Flag(help: ArgumentHelp("Only the scale rows (2 000 boards and flows against 10, memory per board).", visibility: .hidden))
    var scaleOnly = false

    @Flag(help: ArgumentHelp("Only the rows against NATS and D-Bus (raw echo, one at a time).", visibility: .hidden))
    var alternativesOnly = false

    @Flag(help: ArgumentHelp("Only the Majordomo rows (BoardBus's MDP endpoint against majortomo's broker).", visibility: .hidden))
    var mdpOnly = false

    @Flag(help: "Only the store rows (a durable keyed store at 10, 10 000 and, without --quick, 1 000 000 records).")
    var storesOnly = false

    /// The store sizes of this run; the first is the one the others are compared with.
    var storeSizes: [Int] { quick ? [10, 10_000] : [10, 10_000, 1_000_000] }
    var storeDispatches: Int { quick ? 300 : 2_000 }

    func validate() throws {
        // The baseline's clients send the plain payload, untraced: the same work as BusClient's only then.
        if rawClients && (traced || (command != "echo.raw" && format != .json)) {
            throw ValidationError("--raw-clients sends plain untraced payloads: use it without --traced, with JSON or echo.raw")
        }
    }

    // Synchronous, so that valgrind can run the --count-client (see runBlocking).
    func run() throws {
        try runBlocking { try await measure() }
    }

    func measure() async throws {
        if countHeaderBytes {
            print(try BaselineBench.frames(payload: Data())[0].count)
            return
        }
        if let countClient {
            try await CountClient.run(
                endpoint: countEndpoint, requests: countClient,
                call: EchoCall(command: command, format: command == "echo.raw" ? nil : format), payload: echoPayload(bytes: bytes))
            return
        }
        if let tcpClient {
            try await NetworkBench.client(
                endpoint: tcpClient, serverKey: tcpServerKey, clientKey: tcpClientKey, baselineEndpoint: tcpBaseline, baselineKey: tcpBaselineKey,
                natsBus: tcpNatsBus, requests: tcpRequests, seconds: tcpSeconds, settings: quick ? .quick : .full)
            return
        }
        if scaleOnly {
            let report = Report()
            try await TestFleet.with(manifest: #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}]}"#) { fleet in
                try await ScaleBench(fleet: fleet, bus: BoardBusBench(fleet: fleet), settings: quick ? .quick : .full).run(report: report)
            }
            print(report.render())
            return
        }
        if alternativesOnly {
            let report = Report()
            try await TestFleet.with(manifest: #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}]}"#) { fleet in
                try await AlternativesBench(bus: BoardBusBench(fleet: fleet), quick: quick).run(report: report)
            }
            print(report.render())
            return
        }
        if storesOnly {
            let report = Report()
            try await StoreBench(sizes: storeSizes, dispatches: storeDispatches).run(report: report)
            print(report.render())
            return
        }
        if mdpOnly {
            let report = Report()
            try await MajordomoBench.run(quick: quick, report: report)
            print(report.render())
            return
        }
        if networkOnly {
            let report = Report()
            print("boardbus-bench (across hosts, \(quick ? "quick" : "full")) on \(MachineDescription.current())")
            try await NetworkBench.run(settings: quick ? .quick : .full, quick: quick, report: report)
            print("")
            print(report.render())
            return
        }
        if let churn {
            try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
                let result = try await ChurnBench(endpoint: fleet.address.endpoint, brokerPID: fleet.brokerPID).run(boards: churn)
                print(
                    "registering \(churn) boards: \(String(format: "%.2f", result.registerSeconds)) s; broker RSS \(result.beforeKiB) → \(result.registeredKiB) → \(result.afterKiB) KiB"
                )
            }
            return
        }
        if let codec {
            try CodecBench.run(iterations: codec)
            return
        }
        if let brokerLogic {
            print("broker logic per round trip, no sockets: \(Int(try BrokerLogicBench.roundTrip(iterations: brokerLogic))) ns")
            print("routed in place: \(Int(try BrokerLogicBench.roundTripInPlace(iterations: brokerLogic))) ns")
            return
        }
        if let load, !loadEndpoint.isEmpty {
            let rate = try BaselineBench(endpoint: loadEndpoint, command: command).throughput(
                payload: echoPayload(bytes: bytes), clients: loadClients, window: loadWindow, seconds: load)
            print("round trips: \(Int((rate * load).rounded())) in \(load) s (\(Int(rate)) msg/s)")
            return
        }
        if let load {
            let manifest = #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}]}"#
            try await TestFleet.with(manifest: manifest, brokerArguments: ["--io-threads", "\(brokerIOThreads)"]) { fleet in
                print("motherboard pid \(fleet.brokerPID), bench-echo-board pid \(fleet.pid(of: BoardBusBench.board) ?? 0), client pid \(getpid())")
                fflush(nil)
                let payload = echoPayload(bytes: bytes)
                let processes = [
                    ("motherboard", fleet.brokerPID), ("bench-echo-board", fleet.pid(of: BoardBusBench.board) ?? 0), ("client", getpid()),
                ]
                let (before, start) = (ThreadCPU(processes), monotonicNanoseconds())
                let rate: Double
                if rawClients {
                    rate = try BaselineBench(endpoint: fleet.address.endpoint, command: command).throughput(
                        payload: payload, clients: loadClients, window: loadWindow, seconds: load)
                    print("BoardBus broker and board, raw clients, throughput \(bytes) B: \(Int(rate)) msg/s")
                } else {
                    let call = EchoCall(command: command, format: command == "echo.raw" ? nil : format)
                    rate = try await BoardBusBench(fleet: fleet).throughput(
                        payload: call.payload(payload), clients: loadClients, window: loadWindow, seconds: load, command: command,
                        contentType: call.contentType, traced: traced)
                    print("BoardBus throughput \(bytes) B: \(Int(rate)) msg/s")
                }
                printCPU(since: before, start: start, processes: processes, rate: rate)
            }
            return
        }
        if let loadBaseline {
            try await BaselineProcesses.with { baseline in
                print("zmq-baseline-proxy pid \(baseline.proxy.pid), zmq-baseline-echo pid \(baseline.echo.pid), client pid \(getpid())")
                fflush(nil)
                let processes = [("zmq-baseline-proxy", baseline.proxy.pid), ("zmq-baseline-echo", baseline.echo.pid), ("client", getpid())]
                let (before, start) = (ThreadCPU(processes), monotonicNanoseconds())
                let rate = try BaselineBench(endpoint: baseline.frontEndpoint).throughput(
                    payload: echoPayload(bytes: 100), clients: loadClients, window: loadWindow, seconds: loadBaseline)
                print("baseline throughput 100 B: \(Int(rate)) msg/s")
                printCPU(since: before, start: start, processes: processes, rate: rate)
            }
            return
        }
        if let latencyOnly {
            try await BaselineProcesses.with { baseline in
                try await TestFleet.with(manifest: #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}]}"#) { fleet in
                    let (base, echo) = try await alternatedLatency(
                        label: "\(bytes) B", base: BaselineBench(endpoint: baseline.frontEndpoint), bus: BoardBusBench(fleet: fleet),
                        payload: echoPayload(bytes: bytes), requests: latencyOnly, warmup: latencyOnly / 20,
                        calls: [EchoCall(command: command, format: command == "echo.raw" ? nil : format)], traced: traced,
                        rawClient: rawClients ? BaselineBench(endpoint: fleet.address.endpoint, command: command) : nil)
                    let (b, e) = (LatencySummary(base), LatencySummary(echo[0]))
                    print(
                        String(
                            format: "p50 %.1f / %.1f µs = %.3f×  p99 %.1f / %.1f µs = %.3f×", b.p50, e.p50, e.p50 / b.p50, b.p99, e.p99, e.p99 / b.p99
                        )
                    )
                    if rawClients {
                        let r = LatencySummary(echo[echo.count - 1])
                        print(
                            String(
                                format: "the baseline's client → BoardBus: p50 %.1f µs = %.3f×  p99 %.1f µs = %.3f×", r.p50, r.p50 / b.p50, r.p99,
                                r.p99 / b.p99))
                    }
                }
            }
            return
        }
        if let soak {
            let manifest =
                #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}, {"id": "demo.comments", "executable": "BoardBusDemoComments"}]}"#
            print("boardbus-bench --soak \(Int(soak)) on \(MachineDescription.current())")
            try await TestFleet.with(manifest: manifest) { fleet in
                try await Soak(fleet: fleet, seconds: soak).run { print($0) }
            }
            return
        }
        let settings = quick ? BenchSettings.quick : BenchSettings.full
        let report = Report()
        let machine = MachineDescription.current()
        print("boardbus-bench (\(quick ? "quick" : "full")) on \(machine)")

        try await BaselineProcesses.with { baseline in
            try await compare(baseline: baseline, settings: settings, report: report)
        }
        try await NetworkBench.run(settings: settings, quick: quick, report: report)
        try await MajordomoBench.run(quick: quick, report: report)
        print("")
        print(report.render())
    }

    /// The rows against the C baseline: round trips, throughput, costs, memory, churn, start-up.
    private func compare(baseline: BaselineProcesses, settings: BenchSettings, report: Report) async throws {
        let manifest = #"""
            {"boards": [{"id": "bench.echo", "executable": "bench-echo-board", "start": "always"},
                        {"id": "bench.cold", "executable": "bench-echo-board", "start": "on-demand"}]}
            """#
        try await TestFleet.with(manifest: manifest) { fleet in
            let bus = BoardBusBench(fleet: fleet)
            let base = BaselineBench(endpoint: baseline.frontEndpoint)
            let brokerPID = fleet.brokerPID

            // Two handlers on the echo board: `echo.raw` answers with the payload it got, as the
            // baseline's C echo does (the bus's own cost); `echo` decodes the payload into a Codable
            // struct and encodes the reply (what a typed handler adds on top), in JSON (the
            // default) or in CBOR (the content type a client may ask for).
            let typed = EchoCall.typed.map { "typed Codable echo (\($0.formatName) decode + encode)" }
            for (label, bytes, requests) in [("100 B", 100, settings.latencyRequests), ("64 KiB", 65_536, settings.largeLatencyRequests)] {
                let payload = echoPayload(bytes: bytes)
                let judged = label == "100 B"
                let (baseHistogram, echoHistograms) = try await alternatedLatency(
                    label: label, base: base, bus: bus, payload: payload, requests: requests, warmup: settings.warmupRequests,
                    calls: [.raw] + EchoCall.typed)
                report.latency(
                    label, baseline: LatencySummary(baseHistogram), boardBus: LatencySummary(echoHistograms[0]), judged: judged ? "echo" : nil,
                    p50Guard: 1.15)
                for (index, call) in EchoCall.typed.enumerated() {
                    report.latency(
                        "\(label), \(typed[index])", baseline: LatencySummary(baseHistogram), boardBus: LatencySummary(echoHistograms[index + 1]),
                        judged: "typed echo \(label), \(call.formatName)", p50Guard: judged ? 1.15 : 2)
                }

                // The window sweep at 100 B (the C broker's rate grows about threefold from 4×16 to
                // 4×100, so one window hides where BoardBus stands at scale); 4×16 at 64 KiB.
                let windows = judged ? settings.windows : [(settings.clients, settings.window)]
                for (clients, window) in windows {
                    let (baseRate, rates, rawClientsRate) = try await alternatedThroughput(
                        label: "\(label), \(clients)×\(window)", base: base, bus: bus, payload: payload, clients: clients, window: window,
                        seconds: settings.sweepSeconds, rounds: settings.sweepRounds,
                        // At the large windows, where the SDK client's share of the CPU is the question.
                        withRawClients: judged && clients * window >= 400)
                    report.throughput(
                        "\(label), \(clients)×\(window) in flight", baseline: baseRate, boardBus: rates[0], judged: judged ? "echo" : nil, floor: 0.33
                    )
                    for (index, call) in EchoCall.typed.enumerated() {
                        report.throughput(
                            "\(label), \(clients)×\(window) in flight, \(typed[index])", baseline: baseRate, boardBus: rates[index + 1],
                            judged: judged ? "typed echo, \(call.formatName)" : nil, floor: 0.20)
                    }
                    if let rawClientsRate {
                        report.throughput(
                            "\(label), \(clients)×\(window) in flight, raw echo from the baseline's clients (broker and board alone)",
                            baseline: baseRate, boardBus: rawClientsRate)
                    }
                }
            }

            try await AlternativesBench(bus: bus, quick: quick).run(report: report)

            try await observabilityCosts(bus: bus, fleet: fleet, settings: settings, report: report)

            progress("broker memory over \(Int(settings.memorySeconds)) s of load")
            let memoryStart = residentKiB(of: brokerPID) ?? 0
            let messages =
                try await bus.throughput(
                    payload: echoPayload(bytes: 100), clients: settings.clients, window: settings.window,
                    seconds: settings.memorySeconds, command: "echo.raw") * settings.memorySeconds
            let memoryEnd = residentKiB(of: brokerPID) ?? 0
            report.memory(startKiB: memoryStart, endKiB: memoryEnd, messages: Int(messages), seconds: settings.memorySeconds)

            try await ScaleBench(fleet: fleet, bus: bus, settings: settings).run(report: report)

            try await StoreBench(sizes: storeSizes, dispatches: storeDispatches).run(report: report)

            progress("\(settings.churnBoards) boards registering and leaving")
            let churn = try await ChurnBench(endpoint: fleet.address.endpoint, brokerPID: brokerPID).run(boards: settings.churnBoards)
            report.churn(churn)

            progress("cold start and busctl")
            var coldStarts: [Double] = []
            for _ in 0..<settings.coldStarts { coldStarts.append(try await bus.coldStart()) }
            var busctlRuns: [Double] = []
            for _ in 0..<settings.busctlRuns { busctlRuns.append(try await bus.busctlList()) }
            report.single("activate an on-demand board not running → reply (median of \(settings.coldStarts))", milliseconds: median(coldStarts))
            report.single("one `busctl list` process, wall time (median of \(settings.busctlRuns))", milliseconds: median(busctlRuns))
            progress("broker logic without sockets")
            let logic = try BrokerLogicBench.roundTrip(iterations: quick ? 50_000 : 200_000)
            report.single("broker logic per round trip, no sockets, parsed envelopes (µs)", milliseconds: logic / 1000, unit: "")
            let inPlace = try BrokerLogicBench.roundTripInPlace(iterations: quick ? 50_000 : 200_000)
            report.single("broker logic per round trip, no sockets, routed in place (µs)", milliseconds: inPlace / 1000, unit: "")
        }
    }
}

/// What seeing the fleet costs, BoardBus against itself in alternated rounds: the raw echo
/// without anything, with each request in a new trace (the header's trace context, the board's
/// handler under it), and with one monitor attached that reads everything.
func observabilityCosts(bus: BoardBusBench, fleet: TestFleet, settings: BenchSettings, report: Report) async throws {
    let payload = echoPayload(bytes: 100)
    let rounds = 5
    let (count, warmup) = (settings.latencyRequests / 2 / rounds, settings.warmupRequests / rounds)
    let seconds = settings.throughputSeconds / 2 / Double(rounds)
    var (plain, traced, monitored) = (makeHistogram(), makeHistogram(), makeHistogram())
    var (plainRate, tracedRate, monitoredRate) = (0.0, 0.0, 0.0)
    var (shown, dropped) = (0, 0)
    for round in 1...rounds {
        progress("costs of trace context and a monitor: round \(round)/\(rounds)")
        // Each variant in turn, starting with a different one each round: what runs after a
        // throughput load runs on a warmer, busier machine.
        for variant in (0..<3).map({ ($0 + round) % 3 }) {
            let monitor = variant == 2 ? try await AttachedMonitor.attach(fleet) : nil
            let histogram = try await bus.latency(payload: payload, requests: count, warmup: warmup, command: "echo.raw", traced: variant == 1)
            let rate =
                try await bus.throughput(
                    payload: payload, clients: settings.clients, window: settings.window, seconds: seconds, command: "echo.raw",
                    traced: variant == 1) / Double(rounds)
            switch variant {
            case 0:
                plain.add(histogram)
                plainRate += rate
            case 1:
                traced.add(histogram)
                tracedRate += rate
            default:
                monitored.add(histogram)
                monitoredRate += rate
            }
            if let monitor {
                let read = await monitor.detach()
                shown += read.events
                dropped += read.dropped
            }
        }
    }
    let (p, t, m) = (LatencySummary(plain), LatencySummary(traced), LatencySummary(monitored))
    report.cost("round trip 100 B p50 (µs), trace context on every request", without: p.p50, with: t.p50)
    report.cost("round trip 100 B p99 (µs), trace context on every request", without: p.p99, with: t.p99)
    report.cost("throughput 100 B (msg/s), trace context on every request", without: plainRate, with: tracedRate, decimals: 0)
    report.cost("round trip 100 B p50 (µs), one monitor attached", without: p.p50, with: m.p50)
    report.cost("round trip 100 B p99 (µs), one monitor attached", without: p.p99, with: m.p99)
    report.cost("throughput 100 B (msg/s), one monitor attached", without: plainRate, with: monitoredRate, decimals: 0)
    report.count("monitor lines shown while attached (window 1000)", shown, note: "\(dropped) dropped")
}

/// Throughput of the baseline, BoardBus's raw echo and its typed echo at one window, alternated
/// in rounds (runs minutes apart on a virtual machine differ by more than the effects measured).
/// With `withRawClients`, each round also loads BoardBus's raw echo from the baseline's own
/// blocking clients (frames built once): the broker and the board without the SDK's client,
/// which tells how much of the gap to the baseline is the client's.
func alternatedThroughput(
    label: String, base: BaselineBench, bus: BoardBusBench, payload: Data, clients: Int, window: Int, seconds: Double, rounds: Int,
    withRawClients: Bool = false
) async throws -> (baseline: Double, boardBus: [Double], rawClients: Double?) {
    let calls = [EchoCall.raw] + EchoCall.typed
    var (baseRate, rates, rawClientsRate) = (0.0, calls.map { _ in 0.0 }, 0.0)
    let rawClients = BaselineBench(endpoint: bus.address.endpoint, command: EchoCall.raw.command)
    for round in 1...rounds {
        progress("throughput \(label): round \(round)/\(rounds)")
        baseRate += try base.throughput(payload: payload, clients: clients, window: window, seconds: seconds) / Double(rounds)
        for (index, call) in calls.enumerated() {
            rates[index] +=
                try await bus.throughput(
                    payload: call.payload(payload), clients: clients, window: window, seconds: seconds, command: call.command,
                    contentType: call.contentType) / Double(rounds)
        }
        if withRawClients {
            rawClientsRate += try rawClients.throughput(payload: payload, clients: clients, window: window, seconds: seconds) / Double(rounds)
        }
    }
    return (baseRate, rates, withRawClients ? rawClientsRate : nil)
}

/// A request the bench sends the echo board: `echo.raw` (the payload back as it came: the bus's
/// own cost), or the typed `echo` in JSON or in CBOR (the board decodes and encodes it).
struct EchoCall: Sendable {
    var command: String
    /// Nil for the raw echo.
    var format: PayloadFormat?

    static let raw = EchoCall(command: "echo.raw", format: nil)
    static let typed = [EchoCall(command: "echo", format: .json), EchoCall(command: "echo", format: .cbor)]

    var contentType: String? { format?.contentType }
    var formatName: String { format.map { $0.rawValue.uppercased() } ?? "raw" }

    /// The request for a JSON echo payload: as it is, or the same value in CBOR.
    func payload(_ json: Data) -> Data {
        guard format == .cbor, let value = try? PayloadCodec.decode(EchoValue.self, from: json) else { return json }
        return (try? PayloadCodec.encode(value, format: .cbor)) ?? json
    }

    private struct EchoValue: Codable { var data: String }
}

/// The baseline's round trips and BoardBus's (one histogram per echo command), alternated in
/// rounds so that drift in the machine's speed hits all of them alike. With `rawClient` (the
/// baseline's blocking client pointed at the BoardBus broker), one more histogram, last: the same
/// broker and board without the SDK's client.
func alternatedLatency(
    label: String, base: BaselineBench, bus: BoardBusBench, payload: Data, requests: Int, warmup: Int, calls: [EchoCall], rounds: Int = 10,
    traced: Bool = false, rawClient: BaselineBench? = nil
) async throws -> (baseline: Histogram<UInt64>, boardBus: [Histogram<UInt64>]) {
    var baseline = makeHistogram()
    var boardBus = (0..<(calls.count + (rawClient == nil ? 0 : 1))).map { _ in makeHistogram() }
    for round in 1...rounds {
        progress("round trip \(label): round \(round)/\(rounds)")
        let (count, warmup) = (requests / rounds, warmup / rounds)
        baseline.add(try base.latency(payload: payload, requests: count, warmup: warmup))
        for (index, call) in calls.enumerated() {
            boardBus[index].add(
                try await bus.latency(
                    payload: call.payload(payload), requests: count, warmup: warmup, command: call.command, contentType: call.contentType,
                    traced: traced))
        }
        if let rawClient { boardBus[calls.count].add(try rawClient.latency(payload: payload, requests: count, warmup: warmup)) }
    }
    return (baseline, boardBus)
}

/// The directory of this executable (`.build/<triple>/release`; `.build/release` links there),
/// where the bench's other executables are.
let benchBinaries = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()

func progress(_ text: String) {
    FileHandle.standardError.write(Data("… \(text)\n".utf8))
}

/// The C baseline's two processes in a temporary directory.
struct BaselineProcesses {
    let directory: String
    let proxy: ChildProcess
    let echo: ChildProcess
    var frontEndpoint: String { "ipc://\(directory)/front.sock" }

    /// Starts the baseline, runs `body`, and stops the baseline (waiting for its processes, then
    /// removing its directory) whether `body` returns or throws.
    static func with<T>(label: String = "baseline", _ body: (BaselineProcesses) async throws -> T) async throws -> T {
        try await using(try await start(label: label), stop: { await $0.stop() }, body)
    }

    static func start(label: String = "baseline") async throws -> BaselineProcesses {
        let binaries = benchBinaries.path
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-\(label)-\(getpid())-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let environment = ProcessInfo.processInfo.environment
        let proxy = try await ChildProcess(
            executable: "\(binaries)/zmq-baseline-proxy", arguments: ["ipc://\(directory)/front.sock", "ipc://\(directory)/back.sock"],
            environment: environment, directory: directory, name: "proxy")
        try await proxy.waitForOutput("READY", timeout: .seconds(10))
        let echo = try await ChildProcess(
            executable: "\(binaries)/zmq-baseline-echo", arguments: ["ipc://\(directory)/back.sock"],
            environment: environment, directory: directory, name: "echo")
        try await echo.waitForOutput("READY", timeout: .seconds(10))
        return BaselineProcesses(directory: directory, proxy: proxy, echo: echo)
    }

    func stop() async {
        // Waited for, so that nothing writes their output files again once the directory is gone.
        for child in [echo, proxy] { await child.killAndWait() }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Cores and CPU model, for the report.
enum MachineDescription {
    static func current() -> String {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { $0.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" } ?? "unknown CPU"
        return "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(model), libzmq \(ZMQVersion.string)"
    }
}

extension PayloadFormat: ExpressibleByArgument {}

/// After a `--load`: the CPU each process and thread used per round trip since `before`.
func printCPU(since before: ThreadCPU, start: UInt64, processes: [(String, Int32)], rate: Double) {
    let roundTrips = rate * Double(monotonicNanoseconds() - start) / 1e9
    let after = ThreadCPU(processes)
    print("CPU per round trip (µs), by process (by thread):")
    print(ThreadCPU.perRoundTrip(from: before, to: after, roundTrips: roundTrips, connections: ["client"]))
    print("context switches per round trip (each a wake-up or a thread put off its core), by thread:")
    print(ThreadCPU.switchesPerRoundTrip(from: before, to: after, roundTrips: roundTrips, skipping: ["client"]))
}
