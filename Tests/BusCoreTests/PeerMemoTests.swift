import Foundation
import Testing

@testable import BusCore

/// The memo in front of the broker's per-peer dictionaries: it may forget a peer (another took
/// its slot), but never answers for a peer with what was noted for another.
@Suite struct PeerMemoTests {
    /// libzmq's own ids: a 0 byte, then a counter of four bytes, big-endian.
    static func libzmqID(_ counter: UInt32) -> PeerID {
        PeerID(Data([0] + withUnsafeBytes(of: counter.bigEndian) { Array($0) }))
    }

    @Test func aNotedValueIsFoundForItsPeerOnly() {
        var memo = PeerMemo<Int32>()
        let peer = PeerID(Data("chosen".utf8))
        memo.note(7, for: peer)
        #expect(memo.value(for: peer) == 7)
        // The same bytes with a zero byte added, one byte changed, and nothing.
        #expect(memo.value(for: PeerID(Data("chosen".utf8) + [0])) == nil)
        #expect(memo.value(for: PeerID(Data("chosex".utf8))) == nil)
        #expect(memo.value(for: PeerID(Data())) == nil)
        memo.removeAll()
        #expect(memo.value(for: peer) == nil)
    }

    /// Ids longer than the two words a `PeerID` holds inline are left to the dictionary.
    @Test func idsLongerThanSixteenBytesAreNotKept() {
        var memo = PeerMemo<Int32>()
        let long = PeerID(Data(repeating: 0xab, count: 17))
        memo.note(1, for: long)
        #expect(memo.value(for: long) == nil)
        let sixteen = PeerID(Data(repeating: 0xab, count: 16))
        memo.note(2, for: sixteen)
        #expect(memo.value(for: sixteen) == 2)
        #expect(memo.value(for: long) == nil)
    }

    /// Peers that connected one after the other (libzmq counts their ids up, from wherever it
    /// started) each keep their own slot: any 64 of them whose counters differ only in their
    /// last six bits (two runs on either side of a carry may share slots).
    @Test(arguments: [0, 0x1234_5640, 0xffff_ffc0, 0x0100])
    func consecutiveLibzmqIDsDoNotPushEachOtherOut(start: UInt32) {
        var memo = PeerMemo<UInt32>()
        let counters = (0..<UInt32(PeerMemo<UInt32>.slotCount)).map { start &+ $0 }
        for counter in counters { memo.note(counter, for: Self.libzmqID(counter)) }
        for counter in counters { #expect(memo.value(for: Self.libzmqID(counter)) == counter) }
    }

    /// Peers that choose ids folding to one slot, and random ids of every length: whatever
    /// pushed out whom, every answer is nil or what was noted for that very peer.
    @Test func peersSharingASlotNeverGetEachOthersValues() {
        var memo = PeerMemo<Int>()
        // Each id's words fold to the same bits: the same byte at two places cancels out.
        let colliding = (0..<8).map { index -> PeerID in
            var bytes = [UInt8](repeating: 0, count: 16)
            bytes[index] = 0x5a
            bytes[index + 8] = 0x5a
            return PeerID(Data(bytes))
        }
        #expect(Set(colliding.map(PeerMemo<Int>.slot(of:))).count == 1)
        for (value, peer) in colliding.enumerated() { memo.note(value, for: peer) }
        for (value, peer) in colliding.enumerated() {
            #expect(memo.value(for: peer) == (value == colliding.count - 1 ? value : nil))
        }
        var generator = SystemRandomNumberGenerator()
        var noted: [PeerID: Int] = [:]
        for value in 0..<5_000 {
            let bytes = (0..<Int.random(in: 0...16, using: &generator)).map { _ in UInt8.random(in: 0...3, using: &generator) }
            let peer = PeerID(Data(bytes))
            memo.note(value, for: peer)
            noted[peer] = value
        }
        for (peer, value) in noted {
            let found = memo.value(for: peer)
            #expect(found == nil || found == value, "\(peer) answered \(String(describing: found)), noted \(value)")
        }
    }
}
