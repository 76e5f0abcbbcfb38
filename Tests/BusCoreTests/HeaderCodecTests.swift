import BoardKitTesting
import Foundation
import Testing

@testable import BusCore

@Suite("Header codec")
struct HeaderCodecTests {
    let sample = EnvelopeHeader(
        kind: .command, flags: .replyExpected, correlationID: 0x0102_0304_0506_0708, timeoutMilliseconds: 25_000,
        source: "auth.login", target: "app.dashboard", scope: "root.checkout", typeName: "greet·ünïcode")

    @Test func roundTripsEveryField() throws {
        let bytes = HeaderCodec.encode(sample)
        #expect(try HeaderCodec.decode(Data(bytes)) == sample)
    }

    @Test func roundTripsEveryKind() throws {
        for kind in MessageKind.allCases {
            let header = EnvelopeHeader(kind: kind)
            #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))) == header)
        }
    }

    @Test func writesTheDocumentedLayout() {
        let bytes = HeaderCodec.encode(EnvelopeHeader(kind: .reply, correlationID: 5, timeoutMilliseconds: 1, source: "a"))
        #expect(Array(bytes[0..<4]) == [0x42, 0x42, 1, 16])
        #expect(Array(bytes[6..<14]) == [0, 0, 0, 0, 0, 0, 0, 5])
        #expect(Array(bytes[14..<18]) == [0, 0, 0, 1])
        #expect(Array(bytes[18...]) == [0, 1, 0x61, 0, 0, 0, 0, 0, 0])
    }

    @Test func refusesEveryTruncation() {
        let bytes = HeaderCodec.encode(sample)
        for length in 0..<bytes.count {
            #expect(throws: BusError.self) { try HeaderCodec.decode(Data(bytes[0..<length])) }
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes[0..<length])) }
            #expect(error?.code == .malformed)
        }
    }

    @Test func refusesAnotherVersion() throws {
        var bytes = HeaderCodec.encode(sample)
        bytes[2] = 7
        let error = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
        #expect(error.code == .malformed)
        #expect(error.message.contains("version 7"))
    }

    @Test func refusesBadMagicUnknownKindAndTrailingBytes() {
        var badMagic = HeaderCodec.encode(sample)
        badMagic[0] = 0x00
        var badKind = HeaderCodec.encode(sample)
        badKind[3] = 200
        let trailing = HeaderCodec.encode(sample) + [0]
        for bytes in [badMagic, badKind, trailing] {
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
            #expect(error?.code == .malformed)
        }
    }

    @Test func refusesInvalidUTF8() {
        var bytes = HeaderCodec.encode(EnvelopeHeader(kind: .command, source: "ab"))
        bytes[20] = 0xFF
        let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
        #expect(error?.code == .malformed)
    }

    @Test func refusesEveryKindOfInvalidUTF8() {
        // A lone continuation byte, an overlong '/', a truncated 3-byte sequence, a surrogate.
        for bad: [UInt8] in [[0x80], [0xC0, 0xAF], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0x61, 0xF8, 0x61]] {
            var bytes = HeaderCodec.encode(EnvelopeHeader(kind: .command))
            bytes.replaceSubrange(18..<20, with: [0, UInt8(bad.count)] + bad)
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
            #expect(error?.code == .malformed, "\(bad)")
            #expect(error?.message.contains("UTF-8") == true)
        }
    }

    @Test func encodesIntoABufferOfTheAnnouncedSize() throws {
        let long = String(repeating: "é", count: 600)  // 1200 bytes: cut to the 1 KiB field limit
        for header in [sample, EnvelopeHeader(kind: .reply), EnvelopeHeader(kind: .command, source: long, typeName: "x")] {
            let size = HeaderCodec.encodedSize(header)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
            defer { buffer.deallocate() }
            #expect(HeaderCodec.encode(header, into: buffer) == size)
            #expect(Array(buffer) == HeaderCodec.encode(header))
        }
        let cut = HeaderCodec.encode(EnvelopeHeader(kind: .command, source: String(repeating: "a", count: 2000)))
        #expect(try HeaderCodec.decode(Data(cut)).source.utf8.count == HeaderCodec.maximumFieldBytes)
    }

    @Test func refusesAnOversizedHeader() {
        let bytes = [UInt8](repeating: 0x42, count: HeaderCodec.maximumHeaderBytes + 1)
        let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
        #expect(error?.code == .tooLarge)
    }

    @Test func survivesRandomGarbage() {
        var generator = SeededRandom(seed: 42)
        var decoded = 0
        for _ in 0..<20_000 {
            let length = Int(generator.next() % 64)
            var bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            // Half the inputs start like a real header, so the decoder gets past the magic.
            if generator.next() % 2 == 0 && bytes.count >= 4 {
                bytes[0] = 0x42; bytes[1] = 0x42; bytes[2] = 1; bytes[3] = UInt8(1 + generator.next() % 9)
            }
            if (try? HeaderCodec.decode(Data(bytes))) != nil { decoded += 1 }
        }
        #expect(decoded < 20_000)
    }

    /// What a router reads in place agrees with the decoder: the same fields for every header the
    /// decoder accepts, the same error for every frame it refuses but for invalid UTF-8, which
    /// the layout leaves to whoever reads the strings (and reports as not ASCII).
    @Test func theLayoutAgreesWithTheDecoder() throws {
        var generator = SeededRandom(seed: 7)
        let names = ["", "a", "bench.echo", "root.checkout", "ünï", String(repeating: "x", count: 300)]
        var compared = 0
        for round in 0..<5_000 {
            let header = EnvelopeHeader(
                kind: MessageKind.allCases[Int(generator.next() % UInt64(MessageKind.allCases.count))],
                flags: MessageFlags(rawValue: UInt16(truncatingIfNeeded: generator.next())), correlationID: generator.next(),
                timeoutMilliseconds: UInt32(truncatingIfNeeded: generator.next()),
                source: names[Int(generator.next() % 6)], target: names[Int(generator.next() % 6)],
                scope: names[Int(generator.next() % 6)], typeName: names[Int(generator.next() % 6)])
            var bytes = HeaderCodec.encode(header)
            // Most rounds damage the frame: a byte changed, or the frame cut or lengthened.
            switch round % 4 {
            case 1: bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: generator.next())
            case 2: bytes.removeLast(Int(generator.next() % UInt64(bytes.count)))
            case 3: bytes.append(UInt8(truncatingIfNeeded: generator.next()))
            default: break
            }
            try bytes.withUnsafeBytes { buffer in
                let decoded = Result { try HeaderCodec.decode(buffer) }
                let layout = Result { try HeaderLayout(buffer) }
                switch (decoded, layout) {
                case (.success(let decoded), .success(let layout)):
                    compared += 1
                    #expect(layout.kind == decoded.kind && layout.flags == decoded.flags)
                    #expect(layout.correlationID == decoded.correlationID && layout.timeoutMilliseconds == decoded.timeoutMilliseconds)
                    for (range, text) in [(layout.source, decoded.source), (layout.target, decoded.target), (layout.scope, decoded.scope), (layout.typeName, decoded.typeName)] {
                        #expect(Array(buffer[range]) == Array(text.utf8))
                    }
                    #expect(layout.stringsAreASCII(in: buffer) == [decoded.source, decoded.target, decoded.scope, decoded.typeName].allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } })
                case (.failure(let decodeError), .failure(let layoutError)):
                    #expect((decodeError as? BusError) == (layoutError as? BusError))
                case (.failure(let decodeError), .success(let layout)):
                    // Only the strings' UTF-8 is left to the reader; such a frame is not ASCII.
                    #expect((decodeError as? BusError)?.message.contains("UTF-8") == true)
                    #expect(!layout.stringsAreASCII(in: buffer))
                case (.success, .failure(let error)):
                    Issue.record("the layout refused a header the decoder accepts: \(error)")
                }
            }
        }
        #expect(compared > 1_000)
    }

    @Test func theCorrelationIDIsRewrittenInPlace() throws {
        var bytes = HeaderCodec.encode(sample)
        bytes.withUnsafeMutableBytes { HeaderLayout.setCorrelationID(0xAABB, in: $0) }
        var expected = sample
        expected.correlationID = 0xAABB
        #expect(try HeaderCodec.decode(Data(bytes)) == expected)
    }
}
