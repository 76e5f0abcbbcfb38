import ArgumentParser
import BoardKit
import BoardKitTesting
import BusCore
import Foundation

/// The echo fleet the loads and single rows run against.
let echoFleetManifest = #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}]}"#

/// `boardbus-bench load SECONDS`: BoardBus's throughput load alone, printing the processes' pids
/// (for a profiler) and the CPU each thread used per round trip.
struct Load: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "Only BoardBus's throughput load (4×16 echo commands in flight by default) for this many seconds.")

    @Argument(help: "Seconds of load.")
    var seconds: Double
    @OptionGroup var echo: EchoOptions
    @OptionGroup var spread: WindowOptions
    @Option(help: "The broker's libzmq I/O threads (motherboard --io-threads).")
    var ioThreads = 1
    @Flag(help: "Every request starts a new trace.")
    var traced = false
    @Flag(help: "Load the broker with the baseline's blocking raw clients instead of BusClient.")
    var rawClients = false
    @Option(
        help:
            "Load a broker already running at this endpoint (a motherboard, or the baseline's proxy, with its echo) with the raw clients, and print the round trips: for a broker run under a tool."
    )
    var endpoint: String?

    func validate() throws {
        try checkRawClients(rawClients, traced: traced, echo: echo)
    }

    func measure() async throws {
        let payload = echoPayload(bytes: echo.bytes)
        if let endpoint {
            let rate = try BaselineBench(endpoint: endpoint, command: echo.command).throughput(
                payload: payload, clients: spread.clients, window: spread.window, seconds: seconds)
            print("round trips: \(Int((rate * seconds).rounded())) in \(seconds) s (\(Int(rate)) msg/s)")
            return
        }
        try await TestFleet.with(manifest: echoFleetManifest, brokerArguments: ["--io-threads", "\(ioThreads)"]) { fleet in
            let boardPID = fleet.pid(of: BoardBusBench.board) ?? 0
            print("motherboard pid \(fleet.brokerPID), bench-echo-board pid \(boardPID), client pid \(getpid())")
            fflush(nil)
            let processes = [("motherboard", fleet.brokerPID), ("bench-echo-board", boardPID), ("client", getpid())]
            let (before, start) = (ThreadCPU(processes), monotonicNanoseconds())
            let rate: Double
            if rawClients {
                rate = try BaselineBench(endpoint: fleet.address.endpoint, command: echo.command).throughput(
                    payload: payload, clients: spread.clients, window: spread.window, seconds: seconds)
                print("BoardBus broker and board, raw clients, throughput \(echo.bytes) B: \(Int(rate)) msg/s")
            } else {
                let call = echo.call
                rate = try await BoardBusBench(fleet: fleet).throughput(
                    payload: call.payload(payload), clients: spread.clients, window: spread.window, seconds: seconds, command: echo.command,
                    contentType: call.contentType, traced: traced)
                print("BoardBus throughput \(echo.bytes) B: \(Int(rate)) msg/s")
            }
            printCPU(since: before, start: start, processes: processes, rate: rate)
        }
    }
}

/// The baseline's clients send the plain payload, untraced: the same work as BusClient's only then.
func checkRawClients(_ rawClients: Bool, traced: Bool, echo: EchoOptions) throws {
    if rawClients && (traced || (echo.command != "echo.raw" && echo.format != .json)) {
        throw ValidationError("--raw-clients sends plain untraced payloads: use it without --traced, with JSON or echo.raw")
    }
}

/// `boardbus-bench load-baseline SECONDS`: the C baseline's throughput load alone.
struct LoadBaseline: BenchPart {
    static let configuration = CommandConfiguration(abstract: "Only the C baseline's throughput load (100 B) for this many seconds.")

    @Argument(help: "Seconds of load.")
    var seconds: Double
    @OptionGroup var spread: WindowOptions

    func measure() async throws {
        try await BaselineProcesses.with { baseline in
            print("zmq-baseline-proxy pid \(baseline.proxy.pid), zmq-baseline-echo pid \(baseline.echo.pid), client pid \(getpid())")
            fflush(nil)
            let processes = [("zmq-baseline-proxy", baseline.proxy.pid), ("zmq-baseline-echo", baseline.echo.pid), ("client", getpid())]
            let (before, start) = (ThreadCPU(processes), monotonicNanoseconds())
            let rate = try BaselineBench(endpoint: baseline.frontEndpoint).throughput(
                payload: echoPayload(bytes: 100), clients: spread.clients, window: spread.window, seconds: seconds)
            print("baseline throughput 100 B: \(Int(rate)) msg/s")
            printCPU(since: before, start: start, processes: processes, rate: rate)
        }
    }
}

/// `boardbus-bench latency REQUESTS`: the baseline's round trips and BoardBus's echo, alternated.
struct Latency: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "Only the round trips of the baseline and BoardBus's echo, this many of each, alternated in rounds.")

    @Argument(help: "Round trips of each.")
    var requests: Int
    @OptionGroup var echo: EchoOptions
    @Flag(help: "Every request starts a new trace.")
    var traced = false
    @Flag(help: "Also time the baseline's blocking raw client against BoardBus's broker and board.")
    var rawClients = false

    func validate() throws {
        try checkRawClients(rawClients, traced: traced, echo: echo)
    }

    func measure() async throws {
        try await BaselineProcesses.with { baseline in
            try await TestFleet.with(manifest: echoFleetManifest) { fleet in
                let (base, echoes) = try await alternatedLatency(
                    label: "\(echo.bytes) B", base: BaselineBench(endpoint: baseline.frontEndpoint), bus: BoardBusBench(fleet: fleet),
                    payload: echoPayload(bytes: echo.bytes), requests: requests, warmup: requests / 20, calls: [echo.call], traced: traced,
                    rawClient: rawClients ? BaselineBench(endpoint: fleet.address.endpoint, command: echo.command) : nil)
                let (b, e) = (LatencySummary(base), LatencySummary(echoes[0]))
                print(
                    String(format: "p50 %.1f / %.1f µs = %.3f×  p99 %.1f / %.1f µs = %.3f×", b.p50, e.p50, e.p50 / b.p50, b.p99, e.p99, e.p99 / b.p99)
                )
                if rawClients {
                    let r = LatencySummary(echoes[echoes.count - 1])
                    print(
                        String(
                            format: "the baseline's client → BoardBus: p50 %.1f µs = %.3f×  p99 %.1f µs = %.3f×", r.p50, r.p50 / b.p50, r.p99,
                            r.p99 / b.p99))
                }
            }
        }
    }
}

/// `boardbus-bench soak SECONDS`: a steady load with its losses and the broker's memory.
struct Soak: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "A steady load for this many seconds: messages sent, answered, lost, broker memory.")

    @Argument(help: "Seconds of load.")
    var seconds: Double

    func measure() async throws {
        let manifest =
            #"{"boards": [{"id": "bench.echo", "executable": "bench-echo-board"}, {"id": "demo.comments", "executable": "BoardBusDemoComments"}]}"#
        print("boardbus-bench soak \(Int(seconds)) on \(MachineDescription.current())")
        try await TestFleet.with(manifest: manifest) { fleet in
            try await SoakLoad(fleet: fleet, seconds: seconds).run { print($0) }
        }
    }
}

/// `boardbus-bench churn BOARDS`: boards registering and leaving, with the broker's memory.
struct Churn: BenchPart {
    static let configuration = CommandConfiguration(abstract: "Only this many boards registering and leaving, with the broker's memory.")

    @Argument(help: "Boards.")
    var boards: Int

    func measure() async throws {
        try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
            let result = try await ChurnBench(endpoint: fleet.address.endpoint, brokerPID: fleet.brokerPID).run(boards: boards)
            print(
                "registering \(boards) boards: \(String(format: "%.2f", result.registerSeconds)) s; broker RSS \(result.beforeKiB) → \(result.registeredKiB) → \(result.afterKiB) KiB"
            )
        }
    }
}
