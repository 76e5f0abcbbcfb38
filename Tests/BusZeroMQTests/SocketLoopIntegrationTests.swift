import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Synchronization
import Testing

/// The socket loop over a real `ipc://` socket: it must never sleep while messages wait, even
/// with its periodic tick (its safety net) an hour away.
@Suite("Socket loop", .timeLimit(.minutes(1)))
struct SocketLoopIntegrationTests {
    /// Answers every message with its payload, on the loop thread.
    final class EchoHandler: SocketLoopHandler, @unchecked Sendable {
        let received = Atomic<Int>(0)
        func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {
            guard case .success(let envelope) = message.content, let routingID = message.routingID else { return }
            received.add(1, ordering: .relaxed)
            _ = try? socket.send(envelope.reply(payload: envelope.payload), routingID: routingID)
        }
        func tick(on socket: ZMQSocket) {}
        func stopping(on socket: ZMQSocket) {}
    }

    /// Counts ticks and signals each.
    final class TickCounter: SocketLoopHandler, @unchecked Sendable {
        let ticks = Atomic<Int>(0)
        let ticked = DispatchSemaphore(value: 0)
        func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {}
        func tick(on socket: ZMQSocket) {
            ticks.add(1, ordering: .relaxed)
            ticked.signal()
        }
        func stopping(on socket: ZMQSocket) {}
    }

    /// An idle loop still ticks (heartbeats and deadlines depend on it): it sleeps in `poll`
    /// without a timeout, and its tick timer must wake it.
    @Test func anIdleLoopKeepsTicking() async throws {
        try await withTemporaryEndpoint("tick") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let router = try ZMQSocket(context: context, kind: .router)
            try router.bind(endpoint)
            let counter = TickCounter()
            let loop = try SocketLoop(name: "test-tick", socket: router, handler: counter, tickInterval: .milliseconds(10))
            loop.start()
            defer { loop.stop() }
            let woke = try await onOwnThread {
                (0..<5).allSatisfy { _ in counter.ticked.wait(timeout: .now() + 5) == .success }
            }
            #expect(woke)
            #expect(counter.ticks.load(ordering: .relaxed) >= 5)
        }
    }

    /// The loop's thread carries the loop's name in the kernel (what `ps -L`, `top -H` and `perf`
    /// show), cut to the 15 bytes the kernel keeps.
    @Test func theLoopThreadIsNamed() async throws {
        try await withTemporaryEndpoint("name") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let router = try ZMQSocket(context: context, kind: .router)
            try router.bind(endpoint)
            let loop = try SocketLoop(name: "test-named-loop-thread", socket: router, handler: TickCounter(), tickInterval: .seconds(3600))
            loop.start()
            defer { loop.stop() }
            let name = Mutex<String?>(nil)
            let done = DispatchSemaphore(value: 0)
            loop.execute { _ in
                name.withLock { $0 = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8) }
                done.signal()
            }
            let ran = try await onOwnThread { done.wait(timeout: .now() + 5) == .success }
            #expect(ran)
            #expect(name.withLock { $0 } == "test-named-loop\n")
        }
    }

    /// A value bound to the loop may be touched on its thread and says it may not be elsewhere
    /// (where a debug build stops at the first touch).
    @Test func aLoopBoundValueIsAccessibleOnTheLoopThreadOnly() async throws {
        try await withTemporaryEndpoint("bound") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let router = try ZMQSocket(context: context, kind: .router)
            try router.bind(endpoint)
            let loop = try SocketLoop(name: "test-bound", socket: router, handler: TickCounter(), tickInterval: .seconds(3600))
            loop.start()
            defer { loop.stop() }
            let counter = LoopBound(0, loop: loop)
            #expect(!counter.isAccessibleHere)
            let seen = Mutex<(accessible: Bool, value: Int)?>(nil)
            let done = DispatchSemaphore(value: 0)
            loop.execute { _ in
                counter.value += 2
                seen.withLock { $0 = (counter.isAccessibleHere, counter.value) }
                done.signal()
            }
            let ran = try await onOwnThread { done.wait(timeout: .now() + 5) == .success }
            #expect(ran)
            #expect(seen.withLock { $0?.accessible } == true && seen.withLock { $0?.value } == 2)
        }
    }

    @Test func aBurstLargerThanOneBatchIsAnsweredWithoutWaitingForATick() async throws {
        try await withTemporaryEndpoint("loop") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let router = try ZMQSocket(context: context, kind: .router)
            try router.set(.receiveHighWaterMark(100_000), .sendHighWaterMark(100_000))
            try router.bind(endpoint)
            let handler = EchoHandler()
            let loop = try SocketLoop(name: "test-loop", socket: router, handler: handler, tickInterval: .seconds(3600))
            loop.start()
            defer { loop.stop() }

            let count = 2_000
            let (sent, answered, wrong) = try await onOwnThread {
                let clientContext = try ZMQContext()
                defer { clientContext.terminate() }
                let dealer = try ZMQSocket(context: clientContext, kind: .dealer)
                defer { dealer.close() }
                try dealer.set(.receiveHighWaterMark(100_000), .sendHighWaterMark(100_000))
                try dealer.connect(endpoint)
                // All at once, so that more than one batch waits when the loop wakes.
                var sent = 0
                for index in 0..<count {
                    let envelope = Envelope(header: EnvelopeHeader(kind: .command, correlationID: UInt64(index + 1)), payload: Data("\(index)".utf8))
                    if try dealer.send(envelope) == .sent { sent += 1 }
                }
                var answered = Set<UInt64>()
                var wrong = 0
                while answered.count < count, dealer.waitReadable(timeoutMilliseconds: 20_000) {
                    while let frames = try dealer.receive() {
                        let reply = try Envelope(frames: frames)
                        if reply.payload != Data("\(reply.header.correlationID - 1)".utf8) { wrong += 1 }
                        answered.insert(reply.header.correlationID)
                    }
                }
                return (sent, answered.count, wrong)
            }
            #expect(sent == count)
            #expect(wrong == 0)
            #expect(answered == count)
            #expect(handler.received.load(ordering: .relaxed) == count)
        }
    }

    /// A full queue refuses a whole envelope, never half of one: the peer only ever receives
    /// complete two-frame messages, as many as were accepted.
    @Test func aFullQueueRefusesWholeEnvelopes() async throws {
        try await withTemporaryEndpoint("hwm") { endpoint in
            let (accepted, refused, received, malformed) = try await onOwnThread {
                let context = try ZMQContext()
                defer { context.terminate() }
                let router = try ZMQSocket(context: context, kind: .router)
                defer { router.close() }
                try router.set(.receiveHighWaterMark(1))
                try router.bind(endpoint)
                let dealer = try ZMQSocket(context: context, kind: .dealer)
                defer { dealer.close() }
                try dealer.set(.sendHighWaterMark(1))
                try dealer.connect(endpoint)
                var accepted = 0
                var refused = 0
                // Payloads on both sides of the copy-free threshold.
                for index in 0..<2_000 where refused < 200 {
                    let payload = Data(count: index % 2 == 0 ? 100 : 20_000)
                    let envelope = Envelope(header: EnvelopeHeader(kind: .command, correlationID: UInt64(index + 1)), payload: payload)
                    if try dealer.send(envelope) == .sent { accepted += 1 } else { refused += 1 }
                }
                var received = 0
                var malformed = 0
                while received + malformed < accepted, router.waitReadable(timeoutMilliseconds: 5_000) {
                    while let message = try router.receiveEnvelope(limits: .default) {
                        if case .success = message.content { received += 1 } else { malformed += 1 }
                    }
                }
                return (accepted, refused, received, malformed)
            }
            #expect(accepted > 0)
            #expect(refused > 0, "the queue never filled: \(accepted) accepted")
            #expect(malformed == 0)
            #expect(received == accepted)
        }
    }

    /// Work a message queues on the loop (a task its reply resumes) runs before the next message
    /// is received, so that what the work sends goes out before the receive that finds the socket
    /// empty. Messages sent all at once, so that many wait when the loop wakes.
    @Test func workQueuedByAMessageRunsBeforeTheNextIsReceived() async throws {
        final class Recorder: SocketLoopHandler, @unchecked Sendable {
            let events = Mutex<[String]>([])
            weak var loop: SocketLoop?
            func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {
                guard case .success(let envelope) = message.content else { return }
                let id = envelope.header.correlationID
                events.withLock { $0.append("received \(id)") }
                loop?.execute { [self] _ in events.withLock { $0.append("work \(id)") } }
            }
            func tick(on socket: ZMQSocket) {}
            func stopping(on socket: ZMQSocket) {}
        }
        try await withTemporaryEndpoint("order") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let count = 50
            // The dealer queues every message before the loop's socket exists.
            let dealer = try ZMQSocket(context: context, kind: .dealer)
            defer { dealer.close() }
            try dealer.connect(endpoint)
            for index in 1...count {
                _ = try dealer.send(Envelope(header: EnvelopeHeader(kind: .command, correlationID: UInt64(index))))
            }
            let router = try ZMQSocket(context: context, kind: .router)
            try router.bind(endpoint)
            let recorder = Recorder()
            let loop = try SocketLoop(name: "test-order", socket: router, handler: recorder, tickInterval: .seconds(3600))
            recorder.loop = loop
            loop.start()
            defer { loop.stop() }
            _ = await eventually(timeout: .seconds(20)) { recorder.events.withLock { $0.count } >= 2 * count }
            let expected = (1...count).flatMap { ["received \($0)", "work \($0)"] }
            #expect(recorder.events.withLock { $0 } == expected)
        }
    }

    /// The same for tasks on the loop's executor: a task a message resumes is queued by the loop
    /// thread itself (without the shared queue's lock) and runs before the next message is
    /// received; and a task that prefers a loop that has stopped still runs, elsewhere.
    @Test func tasksAMessageResumesRunBeforeTheNextIsReceived() async throws {
        final class Resumer: SocketLoopHandler, @unchecked Sendable {
            let events = Mutex<[String]>([])
            let waiting = Mutex<[UInt64: CheckedContinuation<Void, Never>]>([:])
            func received(_ message: consuming ReceivedMessage, on socket: ZMQSocket) {
                guard case .success(let envelope) = message.content else { return }
                let id = envelope.header.correlationID
                events.withLock { $0.append("received \(id)") }
                waiting.withLock { $0.removeValue(forKey: id) }?.resume()
            }
            func tick(on socket: ZMQSocket) {}
            func stopping(on socket: ZMQSocket) {}
        }
        try await withTemporaryEndpoint("tasks") { endpoint in
            let context = try ZMQContext()
            defer { context.terminate() }
            let count = 50
            let router = try ZMQSocket(context: context, kind: .router)
            try router.bind(endpoint)
            let resumer = Resumer()
            let loop = try SocketLoop(name: "test-tasks", socket: router, handler: resumer, tickInterval: .seconds(3600))
            loop.start()
            // One task per message, each waiting on the loop's executor for its message.
            let tasks = (1...count).map { index in
                Task(executorPreference: loop) {
                    await withCheckedContinuation { continuation in
                        resumer.waiting.withLock { $0[UInt64(index)] = continuation }
                    }
                    resumer.events.withLock { $0.append("task \(index)") }
                }
            }
            _ = await eventually(timeout: .seconds(20)) { resumer.waiting.withLock { $0.count } == count }
            let dealer = try ZMQSocket(context: context, kind: .dealer)
            defer { dealer.close() }
            try dealer.connect(endpoint)
            for index in 1...count {
                _ = try dealer.send(Envelope(header: EnvelopeHeader(kind: .command, correlationID: UInt64(index))))
            }
            for task in tasks { await task.value }
            let expected = (1...count).flatMap { ["received \($0)", "task \($0)"] }
            #expect(resumer.events.withLock { $0 } == expected)
            loop.stop()
            // After the loop stopped, a task that prefers it runs all the same.
            let late = await Task(executorPreference: loop) { 42 }.value
            #expect(late == 42)
        }
    }
}
