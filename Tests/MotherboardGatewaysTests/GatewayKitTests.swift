import BusCore
import BusZeroMQ
import Foundation
import Synchronization
import Testing

@testable import MotherboardGateways

/// What every gateway is built of: ids, the table of requests in flight with their deadlines,
/// the attachment to its own motherboard.
@Suite("Gateway kit")
struct GatewayKitTests {
    struct Request: Expiring {
        var deadline: ContinuousClock.Instant
        var name: String
    }

    /// A gateway's session and sockets are its thread's: bound to it, they are reachable there
    /// and nowhere else (a debug build stops at the first touch from another thread).
    @Test func whatAGatewayThreadOwnsIsReachableOnThatThreadOnly() {
        let thread = HelperThread()
        let bound = LoopBound([Int](), loop: thread)
        #expect(!bound.isAccessibleHere)
        let seen = Mutex<(accessible: Bool, ticks: Int)>((false, 0))
        let done = DispatchSemaphore(value: 0)
        thread.start(name: "kit-test") {
            thread.runLoop([], waitMilliseconds: { 1 }) { _ in
                bound.value.append(1)
                let count = bound.value.count
                seen.withLock { $0 = (bound.isAccessibleHere, count) }
                if count == 3 { done.signal() }
                return count < 3
            }
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        thread.stop()
        #expect(seen.withLock { $0 } == (true, 3))
        #expect(!bound.isAccessibleHere)
    }

    @Test func anIDSourceNeverGivesZeroNorTheSameIDTwiceInARow() {
        var ids = IDSource()
        let first = ids.make()
        let second = ids.make()
        #expect(first != 0 && second != 0 && first != second)
    }

    @Test func onlyWhatIsPastItsDeadlineExpiresEarliestFirstAndOnce() {
        let start = ContinuousClock.now
        var table = DeadlineTable<Request>()
        table[1] = Request(deadline: start.advanced(by: .seconds(3)), name: "late")
        table[2] = Request(deadline: start.advanced(by: .seconds(1)), name: "early")
        table[3] = Request(deadline: start.advanced(by: .seconds(2)), name: "answered")
        table.removeValue(forKey: 3)
        #expect(table.takeExpired(now: start).isEmpty)
        #expect(table.takeExpired(now: start.advanced(by: .seconds(5))).map(\.value.name) == ["early", "late"])
        #expect(table.isEmpty && table.takeExpired(now: start.advanced(by: .seconds(9))).isEmpty)
    }

    /// An entry whose deadline moves later is not expired at its old one; one updated in place
    /// keeps its deadline.
    @Test func aLaterDeadlineReplacesTheEarlierOne() {
        let start = ContinuousClock.now
        var table = DeadlineTable<Request>()
        table[7] = Request(deadline: start.advanced(by: .seconds(1)), name: "first")
        table[7] = Request(deadline: start.advanced(by: .seconds(4)), name: "moved")
        #expect(table.takeExpired(now: start.advanced(by: .seconds(2))).isEmpty)
        table[7]?.name = "renamed"
        #expect(table.takeExpired(now: start.advanced(by: .seconds(4))).map(\.value.name) == ["renamed"])
    }

    /// A peer that asks with deadlines weeks away and is answered at once leaves no heap behind.
    @Test func answeredRequestsWithFarDeadlinesDoNotGrowTheHeap() {
        let far = ContinuousClock.now.advanced(by: .seconds(4_000_000))
        var table = DeadlineTable<Request>()
        table[0] = Request(deadline: far, name: "still waiting")
        for id in 1...10_000 as ClosedRange<UInt64> {
            table[id] = Request(deadline: far, name: "answered at once")
            table.removeValue(forKey: id)
        }
        #expect(table.count == 1 && table.heapCount <= 65)
        #expect(table[0]?.name == "still waiting")
        #expect(table.takeExpired(now: far).map(\.id) == [0])
    }

    @Test func anEntryIsKeptItsGracePastItsDeadline() {
        let start = ContinuousClock.now
        var table = DeadlineTable<Request>(keepingPastDeadline: .seconds(5))
        table[1] = Request(deadline: start, name: "answer may come late")
        #expect(table.takeExpired(now: start.advanced(by: .seconds(4))).isEmpty && table[1] != nil)
        #expect(table.takeExpired(now: start.advanced(by: .seconds(5))).count == 1)
    }

    @Test func anAttachmentIsAskedEachSecondUntilAnsweredAndNotTakenFromAnotherAnswer() throws {
        var ids = IDSource()
        var attachment = BrokerAttachment(operation: ControlOperation.exportAttach, secret: "s3cret")
        let start = ContinuousClock.now
        let asked = try #require(attachment.request(now: start, ids: &ids))
        #expect(asked.header.typeName == ControlOperation.exportAttach && asked.header.flags.contains(.replyExpected))
        #expect(try PayloadCodec.decode(UplinkAttach.self, from: asked.payload).secret == "s3cret")
        #expect(attachment.request(now: start.advanced(by: .milliseconds(500)), ids: &ids) == nil)
        // An answer under another id (a forger's, or an old request's) does not attach it.
        #expect(attachment.read(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: asked.header.correlationID + 1))) == nil)
        let again = try #require(attachment.request(now: start.advanced(by: .milliseconds(1100)), ids: &ids))
        guard case .refused = attachment.read(Envelope.error(BusError(.unauthorized, "no"), correlationID: again.header.correlationID)) else {
            Issue.record("a refusal was not read as one")
            return
        }
        #expect(!attachment.isAttached)
        let third = try #require(attachment.request(now: start.advanced(by: .milliseconds(2200)), ids: &ids))
        guard case .attached = attachment.read(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: third.header.correlationID))) else {
            Issue.record("the answer did not attach it")
            return
        }
        #expect(attachment.isAttached && attachment.request(now: start.advanced(by: .seconds(9)), ids: &ids) == nil)
    }
}
