import BusCore
import Foundation
import Testing

@testable import MotherboardGateways

/// What the uplink holds while its own connection to the parent is not made yet: nothing is sent
/// out of order, nothing waits past its deadline, and the queue does not grow past its bounds.
@Suite("Messages held for the parent's connection")
struct HeldMessagesTests {
    let start = ContinuousClock.now

    func message(_ id: UInt64, payload: Int = 0) -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: id, target: "demo.greeter", typeName: "greet"),
            payload: Data(count: payload))
    }

    func ids(_ held: [HeldMessages.Held]) -> [UInt64] { held.map(\.envelope.header.correlationID) }

    /// Holds each id until `start` plus its seconds.
    func holding(_ deadlines: [(UInt64, Int)], capacity: Int = 10, bytes: Int = 1 << 20) -> HeldMessages {
        var held = HeldMessages(capacity: capacity, byteCapacity: bytes)
        for (id, seconds) in deadlines {
            let taken = held.hold(message(id), now: start, until: start.advanced(by: .seconds(seconds)))
            #expect(taken, "hold \(id)")
        }
        return held
    }

    @Test func heldMessagesLeaveInOrderOnceTheConnectionTakesThem() {
        var held = holding([(1, 5), (2, 5), (3, 5)])
        // Not connected: nothing leaves, nothing is lost.
        var sent: [UInt64] = []
        let none = held.flush(now: start) { _ in .refused }
        #expect(none.isEmpty && held.count == 3)
        // The connection takes one, then refuses (its queue is full): the rest wait, in order.
        var room = 1
        let first = held.flush(now: start) { message in
            guard room > 0 else { return .refused }
            room -= 1
            sent.append(message.envelope.header.correlationID)
            return .left
        }
        #expect(first.isEmpty)
        #expect(sent == [1])
        let fourth = held.hold(message(4), now: start, until: start.advanced(by: .seconds(5)))
        #expect(fourth)
        let rest = held.flush(now: start) { message in
            sent.append(message.envelope.header.correlationID)
            return .left
        }
        #expect(rest.isEmpty)
        #expect(sent == [1, 2, 3, 4])
        #expect(held.isEmpty)
    }

    @Test func aMessageThatCannotLeaveBeforeItsDeadlineIsGivenBack() {
        // A later message with a shorter deadline expires behind one that cannot leave yet.
        var held = holding([(1, 5), (2, 1), (3, 5)])
        let early = held.flush(now: start.advanced(by: .seconds(1))) { _ in .refused }
        #expect(ids(early) == [2])
        let late = held.flush(now: start.advanced(by: .seconds(5))) { _ in
            Issue.record("an expired message was offered")
            return .left
        }
        #expect(ids(late) == [1, 3])
        #expect(held.isEmpty)
    }

    @Test func anExpiredHeadDoesNotHoldBackWhatCanLeaveBehindIt() {
        var held = holding([(1, 1), (2, 5), (3, 5)])
        var sent: [UInt64] = []
        let expired = held.flush(now: start.advanced(by: .seconds(2))) { message in
            sent.append(message.envelope.header.correlationID)
            return .left
        }
        #expect(ids(expired) == [1])
        #expect(sent == [2, 3])
        #expect(held.isEmpty)
    }

    @Test func theQueueRefusesPastItsBoundsAndEmptiesWhenTheLinkGoesDown() {
        var held = holding([(1, 5), (2, 5), (3, 5)], capacity: 3)
        let overflowing = held.hold(message(4), now: start, until: start.advanced(by: .seconds(5)))
        #expect(!overflowing)
        #expect(held.count == 3)
        let all = held.removeAll()
        #expect(ids(all) == [1, 2, 3])
        #expect(held.isEmpty)
        // Bounded in bytes too: large payloads fill it before the count does.
        var big = HeldMessages(capacity: 100, byteCapacity: 3 * (1000 + HeaderCodec.fixedSize))
        for id in UInt64(1)...3 {
            let taken = big.hold(message(id, payload: 1000), now: start, until: start.advanced(by: .seconds(5)))
            #expect(taken)
        }
        let tooMuch = big.hold(message(4, payload: 1000), now: start, until: start.advanced(by: .seconds(5)))
        #expect(!tooMuch)
        // Room again once some left.
        var first = true
        _ = big.flush(now: start) { _ in
            defer { first = false }
            return first ? .left : .refused
        }
        let again = big.hold(message(4, payload: 1000), now: start, until: start.advanced(by: .seconds(5)))
        #expect(again && big.count == 3)
    }
}
