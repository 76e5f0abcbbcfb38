import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// The table of store watchers: bounded per peer and in all, freed whole when a peer leaves.
@Suite("Store subscriptions")
struct StoreSubscriptionsTests {
    static func peer(_ number: Int) -> PeerID { PeerID(withUnsafeBytes(of: UInt32(number).bigEndian) { Data($0) }) }
    static func store(_ number: Int) -> ScopedName { ScopedName(scope: .root, name: "store\(number)") }

    @Test func onePeerHoldsItsShareAtMostAndLeavesNothingBehind() {
        var table = StoreSubscriptions()
        let peer = Self.peer(1)
        for number in 0..<StoreSubscriptions.maximumPerPeer { #expect(table.add(peer, to: Self.store(number)) == .added) }
        #expect(table.add(peer, to: Self.store(0)) == .held)
        guard case .refused(let why) = table.add(peer, to: Self.store(-1)) else {
            Issue.record("taken past the share")
            return
        }
        #expect(why.contains("\(StoreSubscriptions.maximumPerPeer)"))
        // Another peer is not refused for it.
        #expect(table.add(Self.peer(2), to: Self.store(-1)) == .added)
        table.removeAll(of: peer)
        #expect(table.count == 1 && table.count(of: peer) == 0 && table.stores == 1)
        #expect(table.watchers(of: Self.store(0)).isEmpty)
        table.remove(Self.peer(2), from: Self.store(-1))
        #expect(table.count == 0 && table.stores == 0)
    }

    @Test func allPeersTogetherHoldTheBoundAtMost() {
        var table = StoreSubscriptions()
        let peers = StoreSubscriptions.maximum / StoreSubscriptions.maximumPerPeer
        for peer in 0..<peers {
            for store in 0..<StoreSubscriptions.maximumPerPeer { _ = table.add(Self.peer(peer), to: Self.store(store)) }
        }
        #expect(table.count == StoreSubscriptions.maximum)
        guard case .refused = table.add(Self.peer(peers), to: Self.store(0)) else {
            Issue.record("taken past the bound")
            return
        }
        table.removeAll(of: Self.peer(0))
        #expect(table.add(Self.peer(peers), to: Self.store(0)) == .added)
    }
}
