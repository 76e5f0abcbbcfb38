import BoardKitTesting
import BusCore
import Foundation
import Synchronization
import Testing

@testable import BoardKit

/// BoardKit's timing logic with a clock the test moves: deadlines and heartbeats are checked
/// without waiting for them.
@Suite("Client timing")
struct ClientTimingTests {
    /// A connection that keeps what is sent and delivers nothing by itself.
    final class Recorder: BusConnection, @unchecked Sendable {
        let sent = Mutex<[Envelope]>([])
        let handler = Mutex<(any BusConnectionHandler)?>(nil)
        func start(_ handler: any BusConnectionHandler) { self.handler.withLock { $0 = handler } }
        /// What the connection's timer does every 50 ms.
        func tick() { handler.withLock { $0 }?.tick() }
        func send(_ envelope: Envelope, headerBytes: Int?) { sent.withLock { $0.append(envelope) } }
        func stop() {}
        var isCurrentThread: Bool { false }
        var executor: any TaskExecutor { globalConcurrentExecutor }
    }

    @Test func aRequestFailsWithTimeoutOnceItsDeadlinePassesOnTheClientsClock() async throws {
        let clock = ManualClock()
        let connection = Recorder()
        let state = ClientState(connection: connection, clock: clock.busClock)
        let outcome = Task {
            try await withUnsafeThrowingContinuation { continuation in
                state.addPending(
                    7, deadline: clock.now.advanced(by: .seconds(2)),
                    header: EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"), continuation: continuation)
            } as Envelope
        }
        _ = await eventually { state.pendingCount == 1 }
        state.expireRequests(now: clock.now)
        clock.advance(by: .milliseconds(1999))
        state.expireRequests(now: clock.now)
        #expect(state.pendingCount == 1)
        clock.advance(by: .milliseconds(1))
        state.tick()
        let error = await #expect(throws: BusError.self) { try await outcome.value }
        #expect(error?.code == .timeout)
        #expect(error?.message == "no answer to command greet to 'demo.greeter' in time")
        #expect(state.pendingCount == 0)
    }

    @Test func theDeadlineOfARequestIsReadFromTheClientsClock() async throws {
        let clock = ManualClock()
        let connection = Recorder()
        let client = BusClient(connection: connection, address: BusAddress(runtimeDirectory: "/nonexistent"), clock: clock.busClock)
        let call = Task {
            try await client.request(Envelope(header: EnvelopeHeader(kind: .command, target: "b", typeName: "c")), timeout: .seconds(30))
        }
        _ = await eventually { connection.sent.withLock { $0.count } == 1 }
        let sent = try #require(connection.sent.withLock { $0.first })
        #expect(sent.header.timeoutMilliseconds == 30_000 && sent.header.flags.contains(.replyExpected))
        connection.tick()
        #expect(connection.sent.withLock { $0.count } == 1)
        // 30 s pass on the client's clock in no time; the next tick fails the request.
        clock.advance(by: .seconds(30))
        connection.tick()
        let error = await #expect(throws: BusError.self) { try await call.value }
        #expect(error?.code == .timeout)
        client.close()
    }

    /// A store's change is a push for watches; one that no watch wants any more (it arrives after
    /// the watch ended) is dropped, not handed to the board as if it were a request to its stores.
    @Test func aStoreChangeNoWatchWantsIsDroppedAndOtherMessagesReachTheBoard() {
        let state = ClientState(connection: Recorder(), clock: .continuous)
        let handled = Mutex<[String]>([])
        state.setMessageHandler { envelope in handled.withLock { $0.append("\(envelope.header.kind) \(envelope.header.typeName)") } }
        state.received(Envelope(header: EnvelopeHeader(kind: .store, source: "owner", target: "items", typeName: StoreOperation.change)))
        state.received(Envelope(header: EnvelopeHeader(kind: .store, target: "items", typeName: StoreOperation.restored)))
        state.received(Envelope(header: EnvelopeHeader(kind: .store, target: "items", typeName: StoreOperation.state)))
        state.received(Envelope(header: EnvelopeHeader(kind: .command, target: "me", typeName: "greet")))
        #expect(handled.withLock { $0 } == ["store state", "command greet"])
    }

    @Test func heartbeatsFollowTheIntervalTheBrokerAskedForAndOnlyWhileRegistered() {
        let start = ContinuousClock.now
        var schedule = HeartbeatSchedule(now: start)
        /// Which of `offsets` (milliseconds from the start, in order) have a heartbeat due.
        func due(_ offsets: [Int64]) -> [Int64] {
            offsets.filter { schedule.isDue(at: start + .milliseconds($0)) }
        }
        #expect(due([10_000]).isEmpty, "not registered yet")
        schedule.start(every: .milliseconds(200))
        // A late tick (950) counts from when it was sent, not from when it was due.
        #expect(due([200, 399, 400, 950, 1100, 1150]) == [200, 400, 950, 1150])
        schedule.isActive = false
        #expect(due([60_000]).isEmpty, "after goodbye")
    }
}
