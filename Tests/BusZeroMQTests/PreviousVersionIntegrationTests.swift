import BoardKitTesting
import BusCore
@testable import BusZeroMQ
import Foundation
import Testing

/// A ROUTER answers each peer in the version it last spoke: a version-3 peer (two frames) gets
/// two frames back, whether the envelope is sent, forwarded in place from a version-4 peer or
/// parsed and re-encoded; once the peer speaks version 4 it gets one frame. Over real `ipc://`.
@Suite("Version-3 peers", .timeLimit(.minutes(1)))
struct PreviousVersionIntegrationTests {
    /// A ROUTER and two DEALERs: `current` speaks version 4, `previous` version 3 (raw frames).
    struct Trio {
        let router: ZMQSocket
        let current: ZMQSocket
        let previous: ZMQSocket
        let currentID: Data
        let previousID: Data

        /// What the router receives next, waiting up to 5 s.
        func routerReceives(_ intercept: (Data?, UnsafeMutableRawBufferPointer, Int) -> Bool = { _, _, _ in false }) throws
            -> ZMQSocket.ReceiveOutcome
        {
            guard router.waitReadable(timeoutMilliseconds: 5_000) else { throw BusError(.timeout, "the router received nothing") }
            return try router.receive(limits: .default, intercept: intercept)
        }

        /// The raw frames a dealer receives next.
        static func frames(on dealer: ZMQSocket) throws -> [Data] {
            guard dealer.waitReadable(timeoutMilliseconds: 5_000), let frames = try dealer.receive() else {
                throw BusError(.timeout, "the dealer received nothing")
            }
            return frames
        }
    }

    func withTrio<T: Sendable>(_ body: @escaping @Sendable (Trio) throws -> T) async throws -> T {
        try await withRouterAndDealers("v3", hellos: [try heartbeatFrames(), try heartbeatFrames(version: 3)]) { router, dealers in
            try body(
                Trio(router: router, current: dealers[0].socket, previous: dealers[1].socket, currentID: dealers[0].id, previousID: dealers[1].id))
        }
    }

    static func command(_ correlationID: UInt64, payload: Data) -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: correlationID, target: "a.b", typeName: "echo"),
            payload: payload)
    }

    static let payload = Data((0..<100).map { UInt8($0) })

    /// Sent, parsed and forwarded in place: the version-3 peer always gets two frames with the
    /// version byte 3, the version-4 peer one frame.
    @Test func eachPeerIsAnsweredInItsVersion() async throws {
        let (sentToPrevious, sentToCurrent, forwardedToPrevious, parsedForwarded) = try await withTrio { trio in
            try trio.router.send(Self.command(1, payload: Self.payload), routingID: trio.previousID)
            let sentToPrevious = try Trio.frames(on: trio.previous)
            try trio.router.send(Self.command(2, payload: Self.payload), routingID: trio.currentID)
            let sentToCurrent = try Trio.frames(on: trio.current)
            // A version-4 message routed in place to the version-3 peer.
            try trio.current.send(Self.command(3, payload: Self.payload))
            let outcome = try trio.routerReceives { routingID, header, _ in
                HeaderLayout.setCorrelationID(33, in: header)
                // Through the broker's form (a `PeerID`), which must fall back to the two frames.
                return (try? trio.router.forwardReceived(to: PeerID(trio.previousID))) == .sent
            }
            guard case .intercepted = outcome else { throw BusError(.malformed, "a version-4 message was not offered in place") }
            trio.router.releaseReceivedFrames()
            let forwardedToPrevious = try Trio.frames(on: trio.previous)
            // A version-3 message is never offered in place; parsed, it goes on to the version-4 peer in one frame.
            try trio.previous.send(try Self.command(4, payload: Self.payload).frames(version: 3))
            guard
                case .message(let message) = try trio.routerReceives({ _, _, _ in
                    Issue.record("a version-3 message was offered in place")
                    return false
                })
            else { throw BusError(.malformed, "nothing parsed") }
            try trio.router.send(try message.content.get(), routingID: trio.currentID)
            trio.router.releaseReceivedFrames()
            return (sentToPrevious, sentToCurrent, forwardedToPrevious, try Trio.frames(on: trio.current))
        }
        #expect(sentToPrevious.count == 2 && sentToPrevious[0][2] == 3 && sentToPrevious[1] == Self.payload)
        #expect(try Envelope(frames: sentToPrevious) == Self.command(1, payload: Self.payload))
        #expect(sentToCurrent.count == 1 && sentToCurrent[0][2] == 4)
        #expect(try Envelope(frames: sentToCurrent) == Self.command(2, payload: Self.payload))
        #expect(forwardedToPrevious.count == 2 && forwardedToPrevious[0][2] == 3)
        #expect(try Envelope(frames: forwardedToPrevious) == Self.command(33, payload: Self.payload))
        #expect(parsedForwarded.count == 1)
        #expect(try Envelope(frames: parsedForwarded) == Self.command(4, payload: Self.payload))
    }

    /// A peer that moves to version 4 (on the same connection) is answered in it from then on.
    @Test func aPeerThatSpeaksVersionFourIsAnsweredInIt() async throws {
        let frames = try await withTrio { trio in
            try trio.previous.send(try Envelope(header: EnvelopeHeader(kind: .heartbeat)).frames())
            _ = try trio.routerReceives()
            trio.router.releaseReceivedFrames()
            try trio.router.send(Self.command(5, payload: Self.payload), routingID: trio.previousID)
            return try Trio.frames(on: trio.previous)
        }
        #expect(frames.count == 1)
        #expect(try Envelope(frames: frames) == Self.command(5, payload: Self.payload))
    }

    /// Large payloads (lent without a copy) take the same ways.
    @Test func largePayloadsCrossVersions() async throws {
        let large = Data((0..<70_000).map { UInt8($0 % 251) })
        let (toPrevious, toCurrent) = try await withTrio { trio in
            try trio.current.send(Self.command(6, payload: large))
            guard case .message(let message) = try trio.routerReceives() else { throw BusError(.malformed, "nothing parsed") }
            try trio.router.send(try message.content.get(), routingID: trio.previousID)
            try trio.router.send(try message.content.get(), routingID: trio.currentID)
            trio.router.releaseReceivedFrames()
            return (try Trio.frames(on: trio.previous), try Trio.frames(on: trio.current))
        }
        #expect(toPrevious.count == 2 && toPrevious[1] == large)
        #expect(toCurrent.count == 1)
        #expect(try Envelope(frames: toCurrent).payload == large)
    }

    /// The set of version-3 peers a ROUTER remembers is bounded: past two generations the least
    /// recently heard are forgotten, and a peer heard again stays.
    @Test func theVersionThreePeersRememberedAreBounded() {
        var peers = RecentPeers(generation: 3)
        let kept = Data([0])
        for index in 1...20 {
            peers.insert(Data([UInt8(index)]))
            if index % 2 == 0 { peers.insert(kept) }
            #expect(peers.count <= 6)
        }
        #expect(peers.contains(kept))
        #expect(peers.contains(Data([20])))
        #expect(!peers.contains(Data([1])))
        peers.remove(kept)
        #expect(!peers.contains(kept))
    }
}
