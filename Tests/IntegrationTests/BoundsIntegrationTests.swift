import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Synchronization
import Testing

/// A flag one thread sets and another reads.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

/// The tables a peer can fill, with the real broker: bounded while the peer is there, freed once
/// its connection closes.
@Suite("Tables a peer fills", .serialized, .timeLimit(.minutes(3)))
struct BoundsIntegrationTests {
    /// A gauge's value in `busctl metrics`.
    static func gauge(_ name: String, in fleet: TestFleet) async throws -> Double? {
        let text = try await fleet.busctl("metrics").standardOutput
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ")[1])
        }
        return nil
    }

    /// A board of the test's own: registers `far.sink`, reads all it is sent and answers nothing
    /// but heartbeats, until `stop`.
    static func sink(at endpoint: String, until stop: Flag) throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let sink = try ZMQSocket(context: context, kind: .dealer)
        defer { sink.close() }
        try sink.set(.linger(.zero))
        try sink.connect(endpoint)
        let registration = Registration(id: "far.sink", pid: getpid(), commands: ["hold"])
        let register = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 5_000, source: "far.sink")
        _ = try sink.send(try Envelope(header: register, payload: try PayloadCodec.encode(registration)).frames())
        let clock = ContinuousClock()
        let end = clock.now + .seconds(120)
        var beat = clock.now
        while !stop.isSet, clock.now < end {
            if sink.waitReadable(timeoutMilliseconds: 50) { while try sink.receive() != nil, sink.waitReadable(timeoutMilliseconds: 0) {} }
            if clock.now >= beat {
                _ = try sink.send(try Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "far.sink")).frames())
                beat = clock.now + .milliseconds(300)
            }
        }
    }

    /// A client renews 1 100 stores nobody owns and sends 2 200 commands with a 49-day deadline to
    /// a board that reads them and never answers: past 1 024 subscriptions and 2 048 pending
    /// requests it is refused (`busy`), and once it closes its connection both go within seconds
    /// while the board stays. (200 000 renewals took the broker from 36 to 315 MB, still 296 MB
    /// 10 s after the client left.)
    @Test func aClientThatLeavesTakesItsSubscriptionsAndPendingRequestsWithIt() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let endpoint = fleet.address.endpoint
            let stop = Flag()
            async let board: Void = onOwnThread { try Self.sink(at: endpoint, until: stop) }
            defer { stop.set() }
            #expect(try await eventually { try await fleet.busctl("status", "far.sink").exitCode == 0 })
            let busy = try await onOwnThread { () -> Int in
                let context = try ZMQContext()
                defer { context.terminate() }
                let client = try ZMQSocket(context: context, kind: .dealer)
                defer { client.close() }
                try client.set(.linger(.zero))
                try client.connect(endpoint)
                for number in 0..<1_100 {
                    let renew = EnvelopeHeader(kind: .store, target: "nobody.\(number)", typeName: StoreOperation.renew)
                    _ = try client.send(try Envelope(header: renew).frames())
                }
                var busy = 0
                func read(waiting milliseconds: Int) throws {
                    while client.waitReadable(timeoutMilliseconds: milliseconds), let frames = try client.receive() {
                        if try Envelope(frames: frames).carriedError?.code == .busy { busy += 1 }
                    }
                }
                for number in 0..<2_200 {
                    let command = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(number + 1), timeoutMilliseconds: .max, target: "far.sink",
                        typeName: "hold")
                    _ = try client.send(try Envelope(header: command, payload: Data("{}".utf8)).frames())
                    if number % 100 == 99 { try read(waiting: 0) }
                }
                try read(waiting: 1_000)
                return busy
            }
            #expect(busy == 2_200 - 2_048)
            #expect(try await Self.gauge("boardbus_refused_subscriptions_total", in: fleet) == 1_100 - 1_024)
            // The client's sockets closed with its thread: what it held is freed within seconds.
            let freed = try await eventually(timeout: .seconds(10), checkingEvery: .milliseconds(200)) {
                let pending = try await Self.gauge("boardbus_pending_requests", in: fleet)
                let subscriptions = try await Self.gauge("boardbus_store_subscriptions", in: fleet)
                return pending == 0 && subscriptions == 0
            }
            let metrics = try await fleet.busctl("metrics").standardOutput
            #expect(freed, "\(metrics)")
            #expect(try await fleet.busctl("status", "far.sink").exitCode == 0)
            stop.set()
            try await board
        }
    }
}
