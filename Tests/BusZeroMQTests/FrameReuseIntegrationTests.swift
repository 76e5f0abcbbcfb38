import BoardKitTesting
import BusCore
@testable import BusZeroMQ
import Foundation
import Testing

/// A socket sends an envelope it forwards in the frame it received it in (no new allocation or
/// copy), and only when that is the same content: over a real `ipc://` ROUTER and DEALER. A
/// header of another size makes a new frame.
@Suite("Frame reuse", .timeLimit(.minutes(1)))
struct FrameReuseIntegrationTests {
    /// A ROUTER and a DEALER connected to it over `ipc://`, used from one thread of their own.
    struct Pair {
        let router: ZMQSocket
        let dealer: ZMQSocket
        let dealerID: Data

        /// Sends from the dealer and returns what the router received.
        func routerReceives(_ envelope: Envelope) throws -> Envelope {
            guard try dealer.send(envelope) == .sent else { throw BusError(.busy, "the dealer could not send") }
            guard router.waitReadable(timeoutMilliseconds: 5_000), let message = try router.receiveEnvelope(limits: .default) else {
                throw BusError(.timeout, "the router received nothing")
            }
            guard message.routingID == dealerID else { throw BusError(.malformed, "message from another peer") }
            return try message.content.get()
        }

        /// Sends from the router and returns what the dealer received.
        func dealerReceives(_ envelope: Envelope) throws -> Envelope {
            guard try router.send(envelope, routingID: dealerID) == .sent else { throw BusError(.busy, "the router could not send") }
            guard dealer.waitReadable(timeoutMilliseconds: 5_000), let frames = try dealer.receive() else {
                throw BusError(.timeout, "the dealer received nothing")
            }
            return try Envelope(frames: frames)
        }
    }

    func withPair<T: Sendable>(_ body: @escaping @Sendable (Pair) throws -> T) async throws -> T {
        try await withRouterAndDealers("reuse", hellos: [try heartbeatFrames()]) { router, dealers in
            try body(Pair(router: router, dealer: dealers[0].socket, dealerID: dealers[0].id))
        }
    }

    static func command(_ correlationID: UInt64, target: String = "bench.echo", payload: Data) -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: correlationID, target: target, typeName: "echo"),
            payload: payload)
    }

    static let payload = Data((0..<100).map { UInt8($0) })

    /// An interceptor sees the frames before they are parsed, rewrites the header in place and
    /// sends the frames on (to a routing id as `Data`, or as the broker's `PeerID`); what it
    /// declines is parsed as usual, and oversized payloads never reach it.
    @Test(arguments: [false, true])
    func anInterceptedMessageGoesOnInItsFramesWithTheHeaderRewritten(toPeerID: Bool) async throws {
        let limits = BusLimits(maximumPayloadBytes: 1_000)
        let (received, declined, oversized, reused) = try await withPair { pair in
            func receive(_ envelope: Envelope, intercept: (Data?, UnsafeMutableRawBufferPointer, Int) -> Bool) throws -> ZMQSocket.ReceiveOutcome {
                guard try pair.dealer.send(envelope) == .sent, pair.router.waitReadable(timeoutMilliseconds: 5_000) else {
                    throw BusError(.timeout, "the router received nothing")
                }
                return try pair.router.receive(limits: limits, intercept: intercept)
            }
            let forwardIt = { (routingID: Data?, header: UnsafeMutableRawBufferPointer, payloadBytes: Int) -> Bool in
                guard routingID == pair.dealerID, payloadBytes == Self.payload.count else { return false }
                HeaderLayout.setCorrelationID(4242, in: header)
                let sent = toPeerID ? try? pair.router.forwardReceived(to: PeerID(routingID!)) : try? pair.router.forwardReceived(to: routingID)
                return sent == .sent
            }
            guard case .intercepted = try receive(Self.command(7, payload: Self.payload), intercept: forwardIt),
                pair.dealer.waitReadable(timeoutMilliseconds: 5_000), let frames = try pair.dealer.receive()
            else { throw BusError(.timeout, "nothing forwarded") }
            let received = try Envelope(frames: frames)
            pair.router.releaseReceivedFrames()
            let declined = try receive(Self.command(8, payload: Self.payload)) { _, _, _ in false }
            pair.router.releaseReceivedFrames()
            let oversized = try receive(Self.command(9, payload: Data(count: 1_001))) { _, _, _ in
                Issue.record("an oversized payload was offered")
                return true
            }
            return (received, declined, oversized, pair.router.framesReused)
        }
        #expect(received.header.correlationID == 4242)
        #expect(received.header.target == "bench.echo" && received.header.typeName == "echo")
        #expect(received.payload == Self.payload)
        #expect(reused == 1)
        guard case .message(let message) = declined, case .success(let envelope) = message.content else {
            Issue.record("a declined message was not parsed: \(declined)")
            return
        }
        #expect(envelope.header.correlationID == 8 && envelope.payload == Self.payload)
        guard case .message(let refused) = oversized, case .failure(let malformed) = refused.content else {
            Issue.record("an oversized message was not refused: \(oversized)")
            return
        }
        #expect(malformed.error.code == .tooLarge)
    }

    @Test func aForwardedEnvelopeGoesOutInTheFramesItCameIn() async throws {
        let (reused, received) = try await withPair { pair in
            let request = try pair.routerReceives(Self.command(7, payload: Self.payload))
            var forwarded = request
            forwarded.header.correlationID = 99
            let received = try pair.dealerReceives(forwarded)
            return (pair.router.framesReused, received)
        }
        #expect(reused == 1)
        #expect(received.header.correlationID == 99)
        #expect(received.header.target == "bench.echo")
        #expect(received.payload == Self.payload)
    }

    @Test func aPayloadSentTwiceIsCopiedTheSecondTime() async throws {
        let (reused, first, second) = try await withPair { pair in
            let request = try pair.routerReceives(Self.command(7, payload: Self.payload))
            let first = try pair.dealerReceives(request)
            let second = try pair.dealerReceives(request)
            return (pair.router.framesReused, first, second)
        }
        #expect(reused == 1)
        #expect(first.payload == Self.payload)
        #expect(second.payload == Self.payload)
        #expect(second.header == first.header)
    }

    @Test func aHeaderOfAnotherSizeIsEncodedAfresh() async throws {
        let (reused, received) = try await withPair { pair in
            let request = try pair.routerReceives(Self.command(7, payload: Self.payload))
            var forwarded = request
            forwarded.header.source = "a.longer.source"
            let received = try pair.dealerReceives(forwarded)
            return (pair.router.framesReused, received)
        }
        #expect(reused == 0)
        #expect(received.header.source == "a.longer.source")
        #expect(received.header.target == "bench.echo")
        #expect(received.payload == Self.payload)
    }

    /// Once another message has arrived, an earlier payload is sent as a copy of its own bytes,
    /// whatever the size of the later one.
    @Test(arguments: [0, 5, 32, 33, 100, 20_000])
    func anEarlierPayloadIsNeverTakenForTheLast(laterSize: Int) async throws {
        let (reused, received) = try await withPair { pair in
            let earlier = try pair.routerReceives(Self.command(1, payload: Self.payload))
            _ = try pair.routerReceives(Self.command(2, payload: Data(repeating: 0xee, count: laterSize)))
            let before = pair.router.framesReused
            let received = try pair.dealerReceives(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: 1), payload: earlier.payload))
            return (pair.router.framesReused - before, received)
        }
        #expect(reused == 0)
        #expect(received.payload == Self.payload)
    }

    /// Small payloads (33 bytes and less fit in libzmq's message itself) are copied, as are
    /// payloads the caller made itself with the same bytes.
    @Test func onlyTheReceivedPayloadItselfIsReused() async throws {
        let (small, equal) = try await withPair { pair in
            let shortRequest = try pair.routerReceives(Self.command(1, payload: Data(repeating: 1, count: 32)))
            let before = pair.router.framesReused
            let short = try pair.dealerReceives(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: 1), payload: shortRequest.payload))
            let small = pair.router.framesReused - before
            _ = try pair.routerReceives(Self.command(2, payload: Self.payload))
            let beforeEqual = pair.router.framesReused
            let copy = try pair.dealerReceives(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: 2), payload: Data(Array(Self.payload))))
            return ((small, short.payload), (pair.router.framesReused - beforeEqual, copy.payload))
        }
        #expect(small.0 == 0)
        #expect(small.1 == Data(repeating: 1, count: 32))
        #expect(equal.0 == 0)
        #expect(equal.1 == Self.payload)
    }

    /// Once the message has been handled the socket lets its frames go (libzmq's receive buffer
    /// can then be reused); the payload is still sent intact, as a copy.
    @Test func releasedFramesAreNotReused() async throws {
        let (reused, received) = try await withPair { pair in
            let request = try pair.routerReceives(Self.command(7, payload: Self.payload))
            pair.router.releaseReceivedFrames()
            let received = try pair.dealerReceives(request)
            return (pair.router.framesReused, received)
        }
        #expect(reused == 0)
        #expect(received.header.correlationID == 7)
        #expect(received.payload == Self.payload)
    }

    /// A header size the caller has validated (a client checks it before queueing) is used as is:
    /// the message arrives whole, multi-byte names and optional fields included.
    @Test func aSizeValidatedByTheSenderGivesTheSameMessage() async throws {
        var header = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 5, source: "lò.vi", target: "bếp.ga", typeName: "nấu")
        header.contentType = "application/cbor"
        header.dispatchID = "d-7"
        let envelope = Envelope(header: header, payload: Self.payload)
        let received = try await withPair { pair in
            let size = try HeaderCodec.validatedSize(envelope.header)
            guard try pair.dealer.send(envelope, validatedHeaderBytes: size) == .sent,
                pair.router.waitReadable(timeoutMilliseconds: 5_000), let message = try pair.router.receiveEnvelope(limits: .default)
            else { throw BusError(.timeout, "the router received nothing") }
            return try message.content.get()
        }
        #expect(received == envelope)
    }

    /// Payloads are received into storage the socket reuses once nothing holds the last one: a
    /// payload a handler keeps, or changes, is never changed by the messages after it, whatever
    /// their sizes (inline, shorter, the same, longer, lent).
    @Test func aPayloadKeptOrChangedIsNeverOverwrittenByLaterOnes() async throws {
        let sizes = [100, 100, 15, 14, 0, 40, 200, 16 * 1024, 99]
        let (kept, changed, received) = try await withPair { pair in
            var kept: [Data] = []
            var received: [Data] = []
            var changed = try pair.routerReceives(Self.command(1, payload: Data(repeating: 0xaa, count: 64))).payload
            changed[0] = 0x01
            for (index, size) in sizes.enumerated() {
                let payload = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &+ index) })
                let envelope = try pair.routerReceives(Self.command(UInt64(index + 2), payload: payload))
                received.append(payload)
                // Every other one is let go before the next arrives, so that its storage is reused.
                if index % 2 == 0 { kept.append(envelope.payload) }
                #expect(envelope.payload == payload, "payload \(index) of \(size) bytes")
            }
            return (kept, changed, received)
        }
        #expect(kept == stride(from: 0, to: received.count, by: 2).map { received[$0] })
        var expected = Data(repeating: 0xaa, count: 64)
        expected[0] = 0x01
        #expect(changed == expected)
    }

    /// Once a payload is let go, the next of a like size is received into its storage, and
    /// sent on from there in the frame it came in.
    @Test func aPayloadInReusedStorageIsStillSentOnInItsFrame() async throws {
        let (sameStorage, reused, received) = try await withPair { pair in
            let first = try pair.routerReceives(Self.command(1, payload: Data(repeating: 1, count: 100)))
            let firstAddress = first.payload.withUnsafeBytes { Int(bitPattern: $0.baseAddress) }
            _ = consume first
            let request = try pair.routerReceives(Self.command(2, payload: Self.payload))
            let sameStorage = request.payload.withUnsafeBytes { Int(bitPattern: $0.baseAddress) } == firstAddress
            var forwarded = request
            forwarded.header.correlationID = 99
            let received = try pair.dealerReceives(forwarded)
            return (sameStorage, pair.router.framesReused, received)
        }
        #expect(sameStorage)
        #expect(reused == 1)
        #expect(received.header.correlationID == 99 && received.payload == Self.payload)
    }

    /// A payload received after a much longer one gets storage of its own size, not the longer
    /// one's: what a broker queues holds about what it counts.
    @Test func aShortPayloadAfterALongOneHoldsStorageOfAboutItsSize() async throws {
        let held = try await withPair { pair in
            _ = try pair.routerReceives(Self.command(1, payload: Data(repeating: 7, count: 16_000)))
            let short = try pair.routerReceives(Self.command(2, payload: Self.payload)).payload
            return short.withUnsafeBytes { mallocUsableSize(UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
        }
        #expect(held >= Self.payload.count && held < 4 * Self.payload.count)
    }
}

/// glibc's size of the allocation `pointer` starts (not in Swift's Glibc module).
@_silgen_name("malloc_usable_size")
private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int
