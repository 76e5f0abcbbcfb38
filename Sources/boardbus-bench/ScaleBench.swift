import BoardKit
import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Histogram

/// A fleet at scale: 2 000 registered boards with one run-time flow each, against 10 of each,
/// alternated in rounds: the raw echo's round trip, the time to register them, and the broker's
/// memory per board against what a bare libzmq ROUTER (the C baseline's `zmq_proxy`) holds per
/// connection, measured the same way in the same run.
struct ScaleBench {
    let fleet: TestFleet
    let bus: BoardBusBench
    let settings: BenchSettings

    func run(report: Report) async throws {
        let (small, large) = (10, settings.scaleBoards)
        var (few, many) = (makeHistogram(), makeHistogram())
        var registerSeconds: [Double] = []
        var perBoard: [Double] = []
        let payload = echoPayload(bytes: 100)
        let (count, warmup) = (settings.scaleRequests / settings.scaleRounds, settings.warmupRequests / settings.scaleRounds)
        // The broker's settled memory once the last boards left: the next size's starting point.
        var settled: Int?
        for round in 1...settings.scaleRounds {
            progress("scale: round \(round)/\(settings.scaleRounds)")
            // Which goes first changes each round: what runs second runs on a warmer machine.
            for size in round % 2 == 1 ? [small, large] : [large, small] {
                var before = settled ?? 0
                if settled == nil { before = try await settledResidentKiB(of: fleet.brokerPID) }
                try await ManyBoards.with(count: size, prefix: "scale.r\(round)n", flows: true, endpoint: fleet.address.endpoint) { seconds in
                    // Memory is compared at the large size only.
                    let with = size == large ? try await settledResidentKiB(of: fleet.brokerPID) : 0
                    let histogram = try await bus.latency(payload: payload, requests: count, warmup: warmup, command: "echo.raw")
                    if size == large {
                        many.add(histogram)
                        registerSeconds.append(seconds)
                        perBoard.append(Double(with - before) / Double(size))
                    } else {
                        few.add(histogram)
                    }
                }
                settled = try await settledResidentKiB(of: fleet.brokerPID)
            }
        }
        let (f, m) = (LatencySummary(few), LatencySummary(many))
        report.scale(
            boards: large, p50: (few: f.p50, many: m.p50), p99: (few: f.p99, many: m.p99), registerSeconds: median(registerSeconds),
            brokerKiBPerBoard: median(perBoard), routerKiBPerConnection: try await routerKiBPerConnection(connections: large))
    }

    /// What a bare ROUTER holds per connection: the resident memory of a baseline proxy started
    /// for this, before and with `connections` DEALERs that each sent one message through it and
    /// got it back. Not the run's own proxy: after the throughput rounds its heap has free room
    /// that new connections reuse, which made its figure depend on what ran before (26.9–27.2 KiB
    /// after a full run's load, 28.0–28.1 on its own), while the broker's does not move.
    private func routerKiBPerConnection(connections: Int) async throws -> Double {
        try await BaselineProcesses.with(label: "router-memory") { fresh in
            try await routerKiBPerConnection(of: fresh, connections: connections)
        }
    }

    private func routerKiBPerConnection(of baseline: BaselineProcesses, connections: Int) async throws -> Double {
        let pid = baseline.proxy.pid
        // Steady for half a second: the C proxy has no heap check of its own to wait for.
        let before = try await settledResidentKiB(of: pid, steadyFor: .milliseconds(500))
        let frames = try BaselineBench.frames(payload: echoPayload(bytes: 100))
        let endpoint = baseline.frontEndpoint
        let connected = StopFlag()
        let done = StopFlag()
        let holder = Thread.detachedResult { () throws -> Void in
            let context = try ZMQContext(maximumSockets: Int32(connections + 64))
            defer { context.terminate() }
            var sockets: [ZMQSocket] = []
            defer { sockets.forEach { $0.close() } }
            for _ in 0..<connections {
                let socket = try ZMQSocket(context: context, kind: .dealer)
                sockets.append(socket)
                try socket.connect(endpoint)
                _ = try socket.send(frames)
            }
            for socket in sockets {
                guard socket.waitReadable(timeoutMilliseconds: 30_000), try socket.receive() != nil else {
                    connected.raise()
                    throw BusError(.timeout, "the baseline proxy did not answer a connection")
                }
            }
            connected.raise()
            while !done.isRaised { usleep(10_000) }
        }
        while !connected.isRaised { try await Task.sleep(for: .milliseconds(10)) }
        let with = try await settledResidentKiB(of: pid, steadyFor: .milliseconds(500))
        done.raise()
        try holder.wait()
        return Double(with - before) / Double(connections)
    }
}
