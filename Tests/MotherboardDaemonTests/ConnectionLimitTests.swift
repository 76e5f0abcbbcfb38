import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon

@Suite("Connection limit")
struct ConnectionLimitTests {
    @Test func theCapLeavesAReserveOfTheFreeDescriptors() {
        // 256 descriptors, 30 open: 226 free, a reserve of 64 (a quarter would be 56).
        let small = ConnectionLimit.plan(descriptorLimit: 256, inUse: 30, configuredMaximum: 8192)
        #expect(small.ceiling == 192 && small.maximum == 162)
        // A large limit: the configured maximum holds, the guard's ceiling keeps a quarter free.
        let large = ConnectionLimit.plan(descriptorLimit: 1_048_576, inUse: 40, configuredMaximum: 8192)
        #expect(large.maximum == 8192 && large.ceiling == 1_048_576 - (1_048_576 - 40) / 4)
        // Nothing free: nothing accepted.
        #expect(ConnectionLimit.plan(descriptorLimit: 50, inUse: 60, configuredMaximum: 10).maximum == 0)
    }

    @Test func refusedConnectionsCountUntilTheyAreClosedAndTCPNeverTakesAllTheRoom() {
        var limit = ConnectionLimit(maximum: 8)
        #expect(limit.networkMaximum == 6)
        func accept(_ descriptor: Int32, _ endpoint: String) -> Bool { limit.accepted(descriptor, on: endpoint) }
        for descriptor in Int32(10)..<16 { #expect(accept(descriptor, "tcp://127.0.0.1:7400")) }
        // The seventh tcp connection is refused; ipc still has room.
        #expect(!accept(16, "tcp://127.0.0.1:7400"))
        #expect(accept(17, "ipc:///run/bus.sock"))
        // The refused one holds its descriptor until it is closed.
        #expect(!accept(18, "ipc:///run/bus.sock"))
        limit.closed(16)
        limit.closed(18)
        #expect(limit.count == 7)
        #expect(accept(19, "ipc:///run/bus.sock"))
        // A descriptor reused without its end reported is counted once.
        #expect(accept(19, "ipc:///run/bus.sock"))
        #expect(limit.count == 8)
        // An end for a descriptor never accepted changes nothing.
        limit.closed(99)
        #expect(limit.count == 8)
    }

    /// Issue: a tcp peer without a key could make the broker hold a large first frame per
    /// connection, for as many connections as the tcp share allows. At most 16 tcp connections
    /// may be in their handshake at once: one is through it when a message came on it, or once
    /// it has lived longer than libzmq lets a handshake take.
    @Test func atMostSixteenTCPConnectionsAreInTheirHandshakeAtOnce() {
        var limit = ConnectionLimit(maximum: 8192)
        let start = ContinuousClock.now
        func accept(_ descriptor: Int32, after milliseconds: Int64 = 0, on endpoint: String = "tcp://127.0.0.1:7400") -> Bool {
            limit.accepted(descriptor, on: endpoint, now: start.advanced(by: .milliseconds(milliseconds)))
        }
        for descriptor in Int32(10)..<26 { #expect(accept(descriptor)) }
        #expect(!accept(26))
        // ipc is not held back.
        #expect(accept(27, on: "ipc:///run/bus.sock"))
        // A message with a key: through; there is room again.
        limit.closed(26)
        limit.noteKey("ops", descriptor: 10)
        #expect(accept(28))
        #expect(!accept(29))
        limit.closed(29)
        // Open past the handshake's 5 s without a message: through all the same.
        #expect(accept(30, after: 5_600))
        #expect(limit.handshaking.count == 1)
    }

    /// The connection watch reports accepts from its own thread, and may report one after the
    /// routing loop saw the connection's first message (the one that notes its key): the key
    /// waits for the accept, so that removing it from the allow-list still closes the
    /// connection, and the connection does not count as one in its handshake.
    @Test func aKeyNotedBeforeItsAcceptIsReportedStaysWithTheConnection() {
        var limit = ConnectionLimit(maximum: 8192)
        limit.noteKey("ops", descriptor: 12)
        #expect(limit.descriptors(ofKeys: ["ops"]).isEmpty)
        let first = limit.accepted(12, on: "tcp://127.0.0.1:7400")
        #expect(first)
        #expect(limit.descriptors(ofKeys: ["ops"]) == [12])
        #expect(limit.handshaking.isEmpty && limit.keysBeforeAccept.isEmpty)
        // Its end forgets it; the descriptor given again to a connection without a key has none.
        limit.closed(12)
        let second = limit.accepted(12, on: "tcp://127.0.0.1:7400")
        #expect(second)
        #expect(limit.descriptors(ofKeys: ["ops"]).isEmpty)
        #expect(limit.handshaking.keys.sorted() == [12])
    }

    /// Found on review: a connection's first message read after its end was reported (its key
    /// noted for a descriptor with no connection) left its key waiting, and the next connection
    /// accepted on the same descriptor took it: not counted as one in its handshake, and closed
    /// if that key was removed. A key for a descriptor whose connection ended is not kept.
    @Test func aKeyReadAfterItsConnectionEndedIsNotGivenToTheNextOnItsDescriptor() {
        var limit = ConnectionLimit(maximum: 8192)
        let first = limit.accepted(12, on: "tcp://127.0.0.1:7400")
        limit.closed(12)
        limit.noteKey("ops", descriptor: 12)
        #expect(limit.keysBeforeAccept.isEmpty)
        let second = limit.accepted(12, on: "tcp://127.0.0.1:7400")
        #expect(first && second)
        #expect(limit.descriptors(ofKeys: ["ops"]).isEmpty)
        #expect(limit.handshaking.keys.sorted() == [12])
        // Its own first message then gives it its key.
        limit.noteKey("edge-b", descriptor: 12)
        #expect(limit.descriptors(ofKeys: ["edge-b"]) == [12] && limit.handshaking.isEmpty)
    }

    /// A message of a removed key closes the connection it came on only while that descriptor is
    /// not known to be another connection's; a name can have several keys, and a key removed
    /// under a name that stays closes only its own connections.
    @Test func aRemovedKeyClosesOnlyTheConnectionItIsKnownOn() {
        var limit = ConnectionLimit(maximum: 8192)
        let old = ConnectionKey(name: "ops", curveKey: "K1")
        let new = ConnectionKey(name: "ops", curveKey: "K2")
        #expect(!limit.mayClose(12, revokedKey: old))
        let accepted = limit.accepted(12, on: "tcp://127.0.0.1:7400")
        #expect(accepted && limit.mayClose(12, revokedKey: old))
        limit.noteKey("ops", curveKey: "K2", descriptor: 12)
        #expect(!limit.mayClose(12, revokedKey: old) && limit.mayClose(12, revokedKey: new))
        limit.noteKey("ops", curveKey: "K1", descriptor: 12)
        #expect(limit.mayClose(12, revokedKey: old))
        let second = limit.accepted(13, on: "tcp://127.0.0.1:7400")
        limit.noteKey("ops", curveKey: "K2", descriptor: 13)
        #expect(second && limit.descriptors(ofKeys: [], curveKeys: ["K1"]) == [12])
        #expect(limit.descriptors(ofKeys: ["ops"]) == [12, 13])
    }
}
