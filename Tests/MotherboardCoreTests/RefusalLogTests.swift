import BusCore
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// Issue: a child motherboard that lost a scope's board id to another child asked for it every
/// second for ever, and the parent logged every refusal. The parent says it once per id and
/// connection (and counts every one); the helper asks later and later.
@Suite("Refused registrations, said once")
struct RefusalLogTests {
    @Test func aRefusalRepeatedOnOneConnectionIsLoggedOnceAndCountedEachTime() throws {
        let log = RecordedLog()
        let harness = try Harness(logger: log.logger)
        let holder = PeerID(Data([0x21]))
        let other = PeerID(Data([0x22]))
        harness.register("edge.sensor", peer: holder, secret: "first child's")
        for _ in 0..<5 {
            #expect(harness.register("edge.sensor", peer: other, secret: "second child's").first?.carriedError?.code == .idInUse)
        }
        #expect(harness.motherboard.counters.refusedRegistrations == 5)
        #expect(log.count(of: "registration refused", atLeast: .warning) == 1)
        // Another connection asking is said again.
        harness.register("edge.sensor", peer: PeerID(Data([0x23])), secret: "third")
        #expect(log.count(of: "registration refused", atLeast: .warning) == 2)
    }
}
