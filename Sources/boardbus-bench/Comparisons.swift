import ArgumentParser
import BoardKit
import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Histogram

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

/// After a `load`: the CPU each process and thread used per round trip since `before`.
func printCPU(since before: ThreadCPU, start: UInt64, processes: [(String, Int32)], rate: Double) {
    let roundTrips = rate * Double(monotonicNanoseconds() - start) / 1e9
    let after = ThreadCPU(processes)
    print("CPU per round trip (µs), by process (by thread):")
    print(ThreadCPU.perRoundTrip(from: before, to: after, roundTrips: roundTrips, connections: ["client"]))
    print("context switches per round trip (each a wake-up or a thread put off its core), by thread:")
    print(ThreadCPU.switchesPerRoundTrip(from: before, to: after, roundTrips: roundTrips, skipping: ["client"]))
}
