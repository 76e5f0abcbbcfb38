import ArgumentParser
import BoardKit
import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Histogram

/// `boardbus-bench` (or `boardbus-bench compare`): every row, against the C baseline and the
/// alternatives, in one run on one machine.
struct Compare: BenchPart {
    static let configuration = CommandConfiguration(
        abstract: "Every row: round trips, throughput, costs, memory, scale, stores, churn, start-up, across hosts, Majordomo.")

    @OptionGroup var run: RunLength

    var quick: Bool { run.quick }

    func measure() async throws {
        let settings = quick ? BenchSettings.quick : BenchSettings.full
        let report = Report()
        print("boardbus-bench (\(quick ? "quick" : "full")) on \(MachineDescription.current())")
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

            try await StoreBench(quick: quick).run(report: report)

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
