import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// The broker's ledger of what it waits for, on its own: both routing paths rely on these rules.
@Suite("Reply registry")
struct ReplyRegistryTests {
    let client = PeerID(Data([0xC0]))
    let board = PeerID(Data([0xB0]))
    let other = PeerID(Data([0xB1]))
    let greeter = ScopedName(scope: "", name: "demo.greeter")
    let start = ContinuousClock.now

    @Test func aReplyIsAcceptedOnceAndOnlyFromTheConnectionTheRequestWentTo() {
        var registry = ReplyRegistry()
        let id = registry.expect(from: client, clientCorrelationID: 7, board: greeter, boardPeer: board, deadline: FixedInstant(start + .seconds(1)))!
        #expect(registry.count == 1)
        // Forged: another connection answers. Nothing changes.
        #expect(registry.takeReply(id, from: other) == nil)
        #expect(registry.count == 1)
        // Refused by the caller's own check (the in-place path's header checks): put back.
        #expect(registry.takeReply(id, from: board, accept: { _ in false }) == nil)
        #expect(registry.count == 1)
        let request = registry.takeReply(id, from: board)
        #expect(request?.client == client && request?.clientCorrelationID == 7 && request?.board == greeter)
        // Late or duplicated: nobody waits for it any more.
        #expect(registry.takeReply(id, from: board) == nil)
        #expect(registry.isEmpty)
    }

    /// A request's deadline and forwarding time come back as they went in, however far from now
    /// (they are held as offsets from a fixed origin), and the round trip is read from them.
    @Test func aRequestKeepsItsTimesAndReadsItsRoundTrip() {
        var registry = ReplyRegistry()
        for offset: Duration in [.zero, .nanoseconds(1), .seconds(-86_400 * 365), .seconds(86_400 * 365 * 100)] {
            let sentAt = start + offset
            let id = registry.expect(
                from: client, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: FixedInstant(sentAt + .seconds(5)),
                sentAt: FixedInstant(sentAt))!
            let request = registry.take(id)
            #expect(request?.sentAt == sentAt && request?.deadline == sentAt + .seconds(5))
            #expect(request?.nanosecondsSinceForwarded(at: FixedInstant(sentAt + .microseconds(1_500))) == 1_500_000)
            #expect(request?.nanosecondsSinceForwarded(at: FixedInstant(sentAt - .nanoseconds(3))) == -3)
        }
        // The broker's one reading of the clock, fixed, and the deadline added to it.
        let fixed = FixedInstant(start)
        let routed = registry.expect(
            from: client, clientCorrelationID: 3, board: greeter, boardPeer: board, deadline: fixed.advanced(by: .milliseconds(250)),
            sentAt: fixed, clientIsBoard: false)!
        let request = registry.take(routed)
        #expect(request?.sentAt == start && request?.deadline == start + .milliseconds(250) && request?.clientIsBoard == false)
        let unrecorded = registry.expect(from: client, clientCorrelationID: 2, board: greeter, boardPeer: board, deadline: FixedInstant(start))!
        #expect(registry.take(unrecorded)?.nanosecondsSinceForwarded(at: FixedInstant(start + .seconds(1))) == nil)
    }

    @Test func correlationIDsAreNeverReused() {
        var registry = ReplyRegistry()
        var seen = Set<UInt64>()
        for index in 0..<1000 {
            let id =
                index.isMultiple(of: 3)
                ? registry.makeCorrelationID()
                : registry.expect(from: client, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: FixedInstant(start))!
            #expect(seen.insert(id).inserted && id != 0)
            _ = registry.take(id)
        }
    }

    @Test func expiryTakesExactlyTheRequestsPastTheirDeadline() {
        var registry = ReplyRegistry()
        let early = registry.expect(
            from: client, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: FixedInstant(start + .milliseconds(100)))!
        let onTime = registry.expect(
            from: client, clientCorrelationID: 2, board: greeter, boardPeer: board, deadline: FixedInstant(start + .milliseconds(200)))!
        let late = registry.expect(
            from: client, clientCorrelationID: 3, board: greeter, boardPeer: board, deadline: FixedInstant(start + .seconds(5)))!
        #expect(registry.takeExpired(now: start + .milliseconds(99)).isEmpty)
        #expect(registry.takeExpired(now: start + .milliseconds(200)).map(\.clientCorrelationID) == [1, 2])
        #expect(registry.takeReply(early, from: board) == nil && registry.takeReply(onTime, from: board) == nil)
        #expect(registry.takeReply(late, from: board)?.clientCorrelationID == 3)
    }

    /// A request answered long after thousands of others (moved out of the pending table's ring):
    /// still matched only from its own connection, still expired in order with the rest.
    @Test func aRequestLeftBehindByThousandsOfOthersKeepsTheRules() {
        var registry = ReplyRegistry()
        let slow = registry.expect(
            from: client, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: FixedInstant(start + .seconds(3)))!
        var last: UInt64 = 0
        for index in 0..<10_000 {
            let id = registry.expect(
                from: client, clientCorrelationID: UInt64(index + 2), board: greeter, boardPeer: board, deadline: FixedInstant(start + .seconds(1)))!
            if index < 9_990 { #expect(registry.takeReply(id, from: board) != nil) }
            last = id
        }
        #expect(registry.count == 11)
        #expect(registry.takeReply(slow, from: other) == nil)
        #expect(registry.takeReply(slow, from: board, accept: { _ in false }) == nil)
        #expect(registry.count == 11)
        // The ten recent ones expire first, oldest id first; then the slow one.
        let expired = registry.takeExpired(now: start + .seconds(2))
        #expect(expired.map(\.clientCorrelationID) == Array(UInt64(9_992)...10_001))
        #expect(registry.takeReply(last, from: board) == nil)
        #expect(registry.takeExpired(now: start + .seconds(3)).map(\.clientCorrelationID) == [1])
        #expect(registry.isEmpty)
    }

    @Test func aBoardThatGoesAwayTakesOnlyItsOwnRequests() {
        var registry = ReplyRegistry()
        let payment = ScopedName(scope: "checkout", name: "demo.payment")
        _ = registry.expect(from: client, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: FixedInstant(start + .seconds(1)))!
        _ = registry.expect(from: client, clientCorrelationID: 2, board: payment, boardPeer: other, deadline: FixedInstant(start + .seconds(1)))!
        // The same id on a newer connection: the old connection's requests only.
        _ = registry.expect(from: client, clientCorrelationID: 3, board: greeter, boardPeer: other, deadline: FixedInstant(start + .seconds(1)))!
        #expect(registry.takeAll(waitingOn: greeter, peer: board).map(\.clientCorrelationID) == [1])
        #expect(registry.count == 2)
    }

    @Test func anActionIsAnsweredOnceEveryPartHasEndedCountingOnlyAcknowledgements() {
        var registry = ReplyRegistry()
        let delivery = registry.beginAction(from: client, clientCorrelationID: 9, subscribers: 3)
        let parts = [board, other, PeerID(Data([0xB2]))].map {
            registry.expectActionPart(delivery, board: greeter, boardPeer: $0, deadline: start + .seconds(1))
        }
        #expect(registry.takeReply(parts[0], from: board)?.action == delivery)
        #expect(registry.finishActionPart(delivery, acknowledged: 1) == nil)
        #expect(registry.take(parts[1])?.action == delivery)
        #expect(registry.finishActionPart(delivery, acknowledged: 0) == nil)
        #expect(registry.takeExpired(now: start + .seconds(2)).count == 1)
        let done = registry.finishActionPart(delivery, acknowledged: 0)
        #expect(done == .init(client: client, clientCorrelationID: 9, acknowledged: 1))
        #expect(registry.isEmpty)
        // A part that ends after the delivery was answered changes nothing.
        #expect(registry.finishActionPart(delivery, acknowledged: 1) == nil)
    }

    /// Past the first `countedAbove` pending, each request counts for its client and its board:
    /// a client that never stops asking, or a board that never answers, is refused past its share
    /// while others are not; what a client waits for goes when it leaves, and gives its share back.
    @Test func pastTheFirstPendingEachClientAndBoardHasAShare() {
        var registry = ReplyRegistry()
        let deadline = FixedInstant(ContinuousClock.now + .seconds(3_600))
        let (greedy, other) = (PeerID(Data([0xE1])), PeerID(Data([0xE2])))
        let (greeter, sink) = (ScopedName(scope: .root, name: "demo.greeter"), ScopedName(scope: .root, name: "far.sink"))
        var taken = 0
        for number in 0..<(ReplyRegistry.countedAbove + ReplyRegistry.maximumPerClient + 100) {
            let id = registry.expect(from: greedy, clientCorrelationID: UInt64(number), board: sink, boardPeer: board, deadline: deadline)
            if id != nil { taken += 1 }
        }
        #expect(taken == ReplyRegistry.countedAbove + ReplyRegistry.maximumPerClient)
        #expect(registry.counted(client: greedy) == ReplyRegistry.maximumPerClient)
        #expect(registry.refusal(client: greedy, board: sink)?.contains("this connection") == true)
        #expect(registry.expect(from: other, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: deadline) != nil)
        // The greedy client leaves: everything it waited for goes, and its share with it.
        #expect(registry.takeAll(waitedForBy: greedy).count == taken)
        #expect(registry.count == 1 && registry.counted(client: greedy) == 0 && registry.counted(board: sink) == 0)
        // A board that never answers: many clients together reach its share, then it is refused.
        for number in 0..<ReplyRegistry.countedAbove {
            _ = registry.expect(from: other, clientCorrelationID: UInt64(number), board: greeter, boardPeer: board, deadline: deadline)
        }
        var refused = 0
        for number in 0..<(ReplyRegistry.maximumPerBoard + 10) {
            let client = PeerID(withUnsafeBytes(of: UInt32(number).bigEndian) { Data($0) })
            if registry.expect(from: client, clientCorrelationID: 1, board: sink, boardPeer: board, deadline: deadline) == nil { refused += 1 }
        }
        #expect(refused == 10 && registry.counted(board: sink) == ReplyRegistry.maximumPerBoard)
        #expect(registry.refusal(client: other, board: sink)?.contains("far.sink") == true)
        // Answered or expired, a counted request gives its share back.
        let pending = registry.count
        #expect(registry.takeExpired(now: ContinuousClock.now + .seconds(7_200)).count == pending)
        #expect(registry.count == 0 && registry.counted(board: sink) == 0)
    }

    /// Large requests count their bytes toward their client's 16 MiB in flight: a client that
    /// never reads its answers cannot queue more toward a board; small ones are not counted; an
    /// answer gives its bytes back.
    @Test func aClientsLargeRequestsInFlightAreBoundedInBytes() {
        var registry = ReplyRegistry()
        let deadline = FixedInstant(ContinuousClock.now + .seconds(60))
        let size = 512 << 10
        var ids: [UInt64] = []
        for number in 0..<40 {
            if let id = registry.expect(
                from: client, clientCorrelationID: UInt64(number), board: greeter, boardPeer: board, deadline: deadline, bytes: size)
            {
                ids.append(id)
            }
        }
        #expect(ids.count == ReplyRegistry.maximumBytesPerClient / size)
        #expect(registry.bytesRefusal(client: client, bytes: size)?.contains("read the answers first") == true)
        // Small requests, and another client's, still go.
        #expect(registry.expect(from: client, clientCorrelationID: 99, board: greeter, boardPeer: board, deadline: deadline, bytes: 100) != nil)
        #expect(registry.expect(from: other, clientCorrelationID: 1, board: greeter, boardPeer: board, deadline: deadline, bytes: size) != nil)
        _ = registry.takeReply(ids[0], from: board)
        #expect(registry.bytesWaiting(for: client) == ReplyRegistry.maximumBytesPerClient - size)
        #expect(registry.expect(from: client, clientCorrelationID: 100, board: greeter, boardPeer: board, deadline: deadline, bytes: size) != nil)
        #expect(registry.takeAll(waitedForBy: client).count == ids.count + 1)
        #expect(registry.bytesWaiting(for: client) == 0)
    }
}
