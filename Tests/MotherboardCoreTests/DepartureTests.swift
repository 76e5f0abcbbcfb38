import BusCore
import Foundation
import MotherboardDaemon
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// What the broker keeps for a peer that is not a board — the stores it watches, the answers it
/// waits for — is bounded per peer, and goes when its connection closes.
@Suite("Peers that leave, and the tables they fill")
struct DepartureTests {
    let sink = PeerID(Data([0x5A]))
    let greedy = PeerID(Data([0xE1]))
    let other = PeerID(Data([0xE2]))

    /// `subscribe.renew` for names nobody owns: past the peer's share each is refused and counted
    /// (the peer is told when it waits); gone with the peer, while a board's stay.
    @Test func renewalsOfStoresNobodyOwnsAreBoundedAndGoWithThePeer() throws {
        let harness = try Harness(metrics: BrokerMetrics(series: PrometheusSeries()))
        harness.register("far.sink", peer: sink)
        func renew(_ name: String, from peer: PeerID, waits: Bool = false) -> [Envelope] {
            let header = EnvelopeHeader(
                kind: .store, flags: waits ? .replyExpected : [], correlationID: waits ? 5 : 0, target: name, typeName: StoreOperation.renew)
            harness.deliver(Envelope(header: header), from: peer)
            return harness.transport.take(for: peer)
        }
        for number in 0..<(StoreSubscriptions.maximumPerPeer + 50) { _ = renew("nobody.\(number)", from: greedy) }
        #expect(harness.motherboard.subscriptions.count(of: greedy) == StoreSubscriptions.maximumPerPeer)
        #expect(harness.motherboard.counters.refusedSubscriptions == 50)
        #expect(renew("nobody.more", from: greedy, waits: true).first?.carriedError?.code == .busy)
        #expect(renew("nobody.1", from: sink).first?.header.typeName == StoreOperation.restored)
        harness.motherboard.peersLeft([greedy, sink])
        #expect(harness.motherboard.subscriptions.count(of: greedy) == 0)
        // The registered board is left to its own liveness.
        #expect(harness.motherboard.subscriptions.count == 1 && harness.motherboard.counters.peersLeft == 1)
        harness.motherboard.refreshMetrics()
        #expect(harness.motherboard.metrics.exposition().contains("boardbus_store_subscriptions 1"))
    }

    /// Commands with a 49-day deadline to a board that never answers: past the first pending,
    /// the client's share holds on either routing path (in place, declined, the parsed path
    /// answers `busy`); others still get through; all of it goes when the client leaves.
    @Test func requestsThatAreNeverAnsweredAreBoundedPerSenderAndGoWhenItLeaves() throws {
        let harness = try Harness()
        harness.register("far.sink", peer: sink)
        var busy = 0
        let total = ReplyRegistry.countedAbove + ReplyRegistry.maximumPerClient + 20
        for number in 0..<total {
            let header = EnvelopeHeader(
                kind: .command, flags: .replyExpected, correlationID: UInt64(number + 1), timeoutMilliseconds: .max, target: "far.sink",
                typeName: "greet")
            var frame = try HeaderCodec.encode(header)
            let routed = frame.withUnsafeMutableBytes { harness.motherboard.routeInPlace($0, from: greedy, now: harness.now) }
            if routed == nil { harness.deliver(Envelope(header: header, payload: Data("{}".utf8)), from: greedy) }
            if let answer = harness.transport.take(for: greedy).first {
                #expect(answer.carriedError?.code == .busy && answer.header.correlationID == UInt64(number + 1))
                busy += 1
            }
        }
        #expect(busy == 20)
        #expect(harness.motherboard.replies.count == total - 20)
        #expect(harness.motherboard.counters.refusedPending == 20)
        harness.request(EnvelopeHeader(kind: .command, target: "far.sink", typeName: "greet"), from: other)
        #expect(harness.transport.take(for: other).isEmpty)
        harness.motherboard.peersLeft([greedy])
        #expect(harness.motherboard.replies.count == 1)
        #expect(harness.motherboard.replies.counted(client: greedy) == 0)
    }
}
