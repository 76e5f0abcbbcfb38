import BusCore
import BusZeroMQ
import Foundation
import Logging
import Synchronization
import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon
@testable import MotherboardGateways

/// The lines a logger was given, at or above a level.
final class RecordedLog: Sendable {
    private let lines = Mutex<[(level: Logger.Level, message: String)]>([])

    func count(of message: String, atLeast level: Logger.Level) -> Int {
        lines.withLock { $0.filter { $0.message == message && $0.level >= level }.count }
    }

    var logger: Logger {
        Logger(label: "recorded") { _ in Handler(log: self) }
    }

    struct Handler: LogHandler {
        let log: RecordedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            log.lines.withLock { $0.append((event.level, event.message.description)) }
        }
    }
}

/// Issue: a child motherboard that lost a scope's board id to another child asked for it every
/// second for ever, and the parent logged every refusal. The parent says it once per id and
/// connection (and counts every one); the helper asks later and later.
@Suite("Refused registrations, said once")
struct RefusalLogTests {
    @Test func aRefusalRepeatedOnOneConnectionIsLoggedOnceAndCountedEachTime() throws {
        let log = RecordedLog()
        let harness = try Harness(
            manifest: FleetManifest(),
            makeMotherboard: { transport in try Motherboard(manifest: FleetManifest(), transport: transport, logger: log.logger) })
        let holder = PeerID(Data([0x21]))
        let other = PeerID(Data([0x22]))
        harness.register("edge.sensor", peer: holder, secret: "first child's")
        for _ in 0..<5 {
            #expect(harness.register("edge.sensor", peer: other, secret: "second child's").first?.carriedError?.code == .idInUse)
        }
        #expect(harness.motherboard.counters.refusedRegistrations == 5)
        #expect(log.count(of: "registration refused", atLeast: .warning) == 1)
        // Another connection asking is said again.
        harness.register("edge.sensor", peer: PeerID(Data([0x23])), secret: "third")
        #expect(log.count(of: "registration refused", atLeast: .warning) == 2)
    }

    @Test func aHelperAsksAgainLaterAndLaterWhileItIsRefused() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, kind: .dealer)
        defer { socket.close() }
        try socket.set(.linger(.zero))
        var board = HelperBoard(connection: socket, registration: Registration(id: "edge.sensor", pid: 0))
        let now = ContinuousClock.now
        var id: UInt64 = 1
        func refuse() {
            let error = BusError(.idInUse, "held by another")
            _ = board.read(Envelope.error(error, correlationID: id))
        }
        board.register(now: now, id: id)
        refuse()
        #expect(board.retryAfter == .seconds(2))
        for expected in [4, 8, 16, 32, 60, 60] {
            id += 1
            board.register(now: now, id: id)
            refuse()
            #expect(board.retryAfter == .seconds(expected))
        }
        // Accepted: back to a second.
        id += 1
        board.register(now: now, id: id)
        _ = board.read(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: id)))
        #expect(board.retryAfter == .seconds(1))
    }
}

@Suite("Log throttle")
struct LogThrottleTests {
    @Test func aLineAtMostEveryIntervalEachSayingHowManySinceTheLast() {
        var throttle = LogThrottle(every: .seconds(1))
        let start = ContinuousClock.now
        #expect(throttle.note(now: start) == 1)
        for step in 1...9 { #expect(throttle.note(now: start.advanced(by: .milliseconds(100 * step))) == nil) }
        #expect(throttle.note(now: start.advanced(by: .seconds(1))) == 10)
        #expect(throttle.note(now: start.advanced(by: .milliseconds(1500))) == nil)
        #expect(throttle.total == 12)
    }
}
