import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// The links to other motherboards on their own: loop detection and what is kept of boards whose
/// link failed.
@Suite("Links")
struct LinksTests {
    func lost(_ name: String, key: String, since: ContinuousClock.Instant) -> (ScopedName, UnreachableBoard) {
        let scoped = ScopedName(scope: .root, name: name)
        let board = LiveBoard(
            registration: Registration(id: BoardID(stringLiteral: name), pid: 1), peer: PeerID(Data([1])), registeredAt: since, lastSeen: since,
            metrics: BrokerMetrics().board(scoped), remote: RemotePeer(address: "10.0.0.2", keyName: key))
        return (scoped, UnreachableBoard(board: board, since: since))
    }

    @Test func aChainThatHoldsThisMotherboardOrOneAboveItIsACycle() {
        var links = Links()
        links.ancestors = [7, 9]
        #expect(links.cycle(in: [1, 2, 3]) == nil)
        #expect(links.cycle(in: [1, links.linkID]) == links.linkID)
        #expect(links.cycle(in: [9]) == 9)
        #expect(links.hasPassedHere([3, links.linkID]) && !links.hasPassedHere([3]) && !links.hasPassedHere(nil))
    }

    @Test func unreachableBoardsAreForgottenPastTheRetentionOrWithTheirKey() {
        var links = Links()
        let start = ContinuousClock.now
        for (name, key, age) in [("old", "edge-a", 60), ("new", "edge-a", 1), ("other", "edge-b", 1)] {
            let (scoped, board) = lost(name, key: key, since: start.advanced(by: .seconds(-age)))
            links.unreachable[scoped] = board
        }
        #expect(links.forgetUnreachable(olderThan: .seconds(30), now: start).map(\.name) == ["old"])
        #expect(links.forgetUnreachable(olderThan: .seconds(30), now: start).isEmpty)
        links.forgetUnreachable(ofKeys: ["edge-b"])
        #expect(links.unreachable.keys.map(\.name) == ["new"])
    }

    @Test func theUplinkAndTheNATSGatewayAreLinksAndNoOtherPeerIs() {
        var links = Links()
        let (uplink, exporter, stranger) = (PeerID(Data([1])), PeerID(Data([2])), PeerID(Data([3])))
        #expect(!links.isLink(uplink))
        links.uplink = uplink
        links.exporter = exporter
        #expect(links.isLink(uplink) && links.isLink(exporter) && !links.isLink(stranger))
    }
}

/// What the broker keeps of at-least-once activations, apart from the ledger itself.
@Suite("Deliveries")
struct DeliveriesTests {
    @Test func restoredActivationsAreDueOnceTheirGraceIsOverAndOnlyOnce() {
        var deliveries = Deliveries()
        let start = ContinuousClock.now
        let boards: Set<ScopedName> = [ScopedName(scope: .root, name: "b"), ScopedName(scope: .root, name: "a")]
        deliveries.expectRestored(boards, until: start.advanced(by: .seconds(5)))
        #expect(deliveries.takeRestoredDue(now: start.advanced(by: .seconds(4))).isEmpty)
        #expect(deliveries.takeRestoredDue(now: start.advanced(by: .seconds(5))).map(\.name) == ["a", "b"])
        #expect(deliveries.takeRestoredDue(now: start.advanced(by: .seconds(6))).isEmpty)
    }

    @Test func nothingRestoredIsNeverDue() {
        var deliveries = Deliveries()
        deliveries.expectRestored([], until: .now)
        #expect(deliveries.takeRestoredDue(now: .now.advanced(by: .seconds(60))).isEmpty)
    }
}

/// The monitors' table: a monitor is sent at most its window beyond what it read; what it
/// misses is counted and reported with its next push.
@Suite("Monitor table")
struct MonitorTableTests {
    let peer = PeerID(Data([0x4D]))

    @Test func aMonitorIsSentNoMoreThanItsWindowAndEachDropIsReported() {
        var table = MonitorTable()
        let now = ContinuousClock.now
        table.renew(peer, MonitorRequest(window: 2), principal: nil, now: now)
        #expect(table.hasWindow(peer))
        table.pushed(peer)
        table.pushed(peer)
        #expect(!table.hasWindow(peer))
        table.drop(peer)
        table.drop(peer)
        #expect(table.monitors[peer]?.dropped == 2 && table.droppedTotal == 2)
        // It read what it was sent: its window opens, and the next push reports the drops.
        table.renew(peer, MonitorRequest(window: 2, read: 2), principal: nil, now: now)
        #expect(table.hasWindow(peer))
        table.failed(peer, reported: 2, hadEvent: true)
        #expect(table.monitors[peer]?.dropped == 3 && table.droppedTotal == 3)
        table.pushed(peer)
        #expect(table.monitors[peer]?.dropped == 0)
    }

    @Test func aMonitorNotRenewedWithinItsLeaseIsForgotten() {
        var table = MonitorTable()
        let now = ContinuousClock.now
        table.renew(peer, MonitorRequest(), principal: "ops", now: now)
        #expect(table.expire(now: now.advanced(by: MonitorTable.lease)) == 0)
        #expect(table.expire(now: now.advanced(by: MonitorTable.lease + .milliseconds(1))) == 1)
        #expect(table.isEmpty && !table.hasWindow(peer))
    }
}
