import BusCore
import Foundation
import Testing

/// A routing id is held in two words up to 16 bytes and whole beyond: every length, at and
/// around that edge, must compare, hash and come back out byte for byte as the id it was made of.
@Suite struct PeerIDTests {
    static let lengths = [0, 1, 5, 7, 8, 9, 15, 16, 17, 31, 255]

    static func id(_ count: Int, last: UInt8 = 0xee) -> Data {
        var bytes = Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 1) })
        if count > 0 { bytes[count - 1] = last }
        return bytes
    }

    @Test(arguments: lengths)
    func theBytesComeBackAsTheyWent(count: Int) {
        let bytes = Self.id(count)
        let peer = PeerID(bytes)
        #expect(peer.bytes == bytes)
        #expect(peer.withUnsafeBytes { Data($0) } == bytes)
        #expect(peer == PeerID(bytes))
        #expect(peer.hashValue == PeerID(bytes).hashValue)
        #expect(peer.description == bytes.map { String(format: "%02x", $0) }.joined())
    }

    /// The last byte is the only difference: past 16 bytes it lies outside the two words.
    @Test(arguments: lengths.filter { $0 > 0 })
    func idsThatDifferOnlyInTheirLastByteDiffer(count: Int) {
        #expect(PeerID(Self.id(count, last: 1)) != PeerID(Self.id(count, last: 2)))
        #expect(Set([PeerID(Self.id(count, last: 1)), PeerID(Self.id(count, last: 2))]).count == 2)
    }

    /// Zero bytes fill the words past an id's end: an id and the same id with zero bytes added are
    /// still two ids.
    @Test func trailingZeroBytesMakeAnotherID() {
        let short = PeerID(Data([0, 1, 2]))
        let padded = [
            Data([0, 1, 2, 0]), Data([0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Data([0, 1, 2] + [UInt8](repeating: 0, count: 14)),
        ]
        for bytes in padded {
            #expect(PeerID(bytes) != short)
            #expect(PeerID(bytes).bytes == bytes)
        }
        #expect(PeerID(Data()) != PeerID(Data([0])))
        #expect(Set([short] + padded.map(PeerID.init)).count == 4)
    }

    /// Every byte goes into the hash: ids that differ in one byte, in either word or past them,
    /// hash apart (the hasher's seed is random; two 64-bit hashes agree by chance once in 2⁶⁴).
    @Test(arguments: [(5, 0), (5, 4), (16, 8), (16, 15), (40, 3), (40, 20), (255, 254)])
    func idsThatDifferInOneByteHashApart(count: Int, position: Int) {
        var other = Self.id(count)
        other[position] ^= 0x5a
        #expect(PeerID(Self.id(count)).hashValue != PeerID(other).hashValue)
    }

    @Test func anIDFromABufferEqualsOneFromData() {
        let bytes = Self.id(40)
        #expect(bytes.withUnsafeBytes { PeerID($0) } == PeerID(bytes))
    }
}
