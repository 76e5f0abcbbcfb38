import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// What the uplink holds while its own connection to the parent is not made yet: nothing is sent
/// out of order, nothing waits past its deadline, and the queue does not grow past its bound.
@Suite("Messages held for the parent's connection")
struct HeldMessagesTests {
    let start = ContinuousClock.now

    func message(_ id: UInt64) -> Envelope {
        Envelope(header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: id, target: "demo.greeter", typeName: "greet"))
    }

    @Test func heldMessagesLeaveInOrderOnceTheConnectionTakesThem() {
        var held = HeldMessages(capacity: 10)
        for id in UInt64(1)...3 {
            let taken = held.hold(message(id), until: start.advanced(by: .seconds(5)))
            #expect(taken)
        }
        // Not connected: nothing leaves, nothing is lost.
        var sent: [UInt64] = []
        let none = held.flush(now: start) { _ in false }
        #expect(none.isEmpty)
        #expect(held.count == 3)
        // The connection takes one, then refuses (its queue is full): the rest wait, in order.
        var room = 1
        let first = held.flush(now: start) { envelope in
            guard room > 0 else { return false }
            room -= 1
            sent.append(envelope.header.correlationID)
            return true
        }
        #expect(first.isEmpty)
        #expect(sent == [1])
        let fourth = held.hold(message(4), until: start.advanced(by: .seconds(5)))
        #expect(fourth)
        let rest = held.flush(now: start) { envelope in
            sent.append(envelope.header.correlationID)
            return true
        }
        #expect(rest.isEmpty)
        #expect(sent == [1, 2, 3, 4])
        #expect(held.isEmpty)
    }

    @Test func aMessageThatCannotLeaveBeforeItsDeadlineIsGivenBack() {
        var held = HeldMessages(capacity: 10)
        // A later message with a shorter deadline expires behind one that cannot leave yet.
        for (id, seconds) in [(UInt64(1), 5), (2, 1), (3, 5)] {
            let taken = held.hold(message(id), until: start.advanced(by: .seconds(seconds)))
            #expect(taken)
        }
        let early = held.flush(now: start.advanced(by: .seconds(1))) { _ in false }
        #expect(early.map(\.envelope.header.correlationID) == [2])
        let late = held.flush(now: start.advanced(by: .seconds(5))) { _ in
            Issue.record("an expired message was sent")
            return true
        }
        #expect(late.map(\.envelope.header.correlationID) == [1, 3])
        #expect(held.isEmpty)
    }

    @Test func theQueueRefusesPastItsBoundAndEmptiesWhenTheLinkGoesDown() {
        var held = HeldMessages(capacity: 3)
        for id in UInt64(1)...3 {
            let taken = held.hold(message(id), until: start.advanced(by: .seconds(5)))
            #expect(taken)
        }
        let overflowing = held.hold(message(4), until: start.advanced(by: .seconds(5)))
        #expect(!overflowing)
        #expect(held.count == 3)
        let all = held.removeAll()
        #expect(all.map(\.envelope.header.correlationID) == [1, 2, 3])
        #expect(held.isEmpty)
    }
}
