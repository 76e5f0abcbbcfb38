import BoardBusTestSupport
import Foundation
import Testing

@testable import BusCore

@Suite("Header codec")
struct HeaderCodecTests {
    let sample = EnvelopeHeader(
        kind: .command, flags: .replyExpected, correlationID: 0x0102_0304_0506_0708, timeoutMilliseconds: 25_000,
        source: "auth.login", target: "app.dashboard", scope: "root.checkout", typeName: "greet·ünïcode")

    @Test func roundTripsEveryField() throws {
        let bytes = try HeaderCodec.encode(sample)
        #expect(try HeaderCodec.decode(Data(bytes)) == sample)
    }

    @Test func roundTripsEveryKind() throws {
        for kind in MessageKind.allCases {
            let header = EnvelopeHeader(kind: kind)
            #expect(try HeaderCodec.decode(Data(try HeaderCodec.encode(header))) == header)
        }
    }

    @Test func writesTheDocumentedLayout() throws {
        let bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .reply, correlationID: 5, timeoutMilliseconds: 1, source: "a"))
        #expect(Array(bytes[0..<4]) == [0x42, 0x42, 4, 16])
        #expect(try HeaderCodec.encode(EnvelopeHeader(kind: .reply), version: 3)[2] == 3)
        #expect(Array(bytes[6..<14]) == [0, 0, 0, 0, 0, 0, 0, 5])
        #expect(Array(bytes[14..<18]) == [0, 0, 0, 1])
        #expect(Array(bytes[18...]) == [0, 1, 0x61, 0, 0, 0, 0, 0, 0])
    }

    @Test func refusesEveryTruncation() throws {
        let bytes = try HeaderCodec.encode(sample)
        for length in 0..<bytes.count {
            #expect(throws: BusError.self) { try HeaderCodec.decode(Data(bytes[0..<length])) }
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes[0..<length])) }
            #expect(error?.code == .malformed)
        }
    }

    @Test func refusesAnotherVersion() throws {
        var bytes = try HeaderCodec.encode(sample)
        for version: UInt8 in [0, 2, 5, 7, 255] {
            bytes[2] = version
            let error = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
            #expect(error.code == .unsupportedVersion)
            #expect(error.message.contains("version \(version)"))
        }
    }

    @Test func refusesBadMagicUnknownKindAndTrailingBytes() throws {
        var badMagic = try HeaderCodec.encode(sample)
        badMagic[0] = 0x00
        var badKind = try HeaderCodec.encode(sample)
        badKind[3] = 200
        let trailing = try HeaderCodec.encode(sample) + [0]
        for bytes in [badMagic, badKind, trailing] {
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
            #expect(error?.code == .malformed)
        }
    }

    @Test func refusesInvalidUTF8() throws {
        var bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .command, source: "ab"))
        bytes[20] = 0xFF
        let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
        #expect(error?.code == .malformed)
    }

    @Test func refusesEveryKindOfInvalidUTF8() throws {
        // A lone continuation byte, an overlong '/', a truncated 3-byte sequence, a surrogate.
        for bad: [UInt8] in [[0x80], [0xC0, 0xAF], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0x61, 0xF8, 0x61]] {
            var bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .command))
            bytes.replaceSubrange(18..<20, with: [0, UInt8(bad.count)] + bad)
            let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
            #expect(error?.code == .malformed, "\(bad)")
            #expect(error?.message.contains("UTF-8") == true)
        }
    }

    @Test func encodesIntoABufferOfTheAnnouncedSize() throws {
        let long = String(repeating: "é", count: 512)  // 1024 bytes: at the field limit
        for header in [sample, EnvelopeHeader(kind: .reply), EnvelopeHeader(kind: .command, source: long, typeName: "x", dispatchID: "ïd")] {
            let size = HeaderCodec.encodedSize(header)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
            defer { buffer.deallocate() }
            #expect(try HeaderCodec.encode(header, into: buffer) == size)
            let encoded = try HeaderCodec.encode(header)
            #expect(Array(buffer) == encoded)
        }
    }

    /// Nothing is ever cut (a 1 018-byte common prefix made two dispatch ids one, and 300 emoji
    /// were cut inside a character): a field over its limit is refused with `badArgument`, at one
    /// byte past it and with a multi-byte character across the limit.
    @Test func aFieldOverItsLimitIsRefusedNotCut() throws {
        let limit = HeaderCodec.maximumFieldBytes
        let atLimit = String(repeating: "a", count: limit)
        let emojiAcrossLimit = String(repeating: "a", count: limit - 2) + "😀"  // 1 026 bytes
        #expect(try HeaderCodec.decode(Data(try HeaderCodec.encode(EnvelopeHeader(kind: .command, typeName: atLimit)))).typeName == atLimit)
        let overLimit: [EnvelopeHeader] = [
            EnvelopeHeader(kind: .command, source: atLimit + "b"), EnvelopeHeader(kind: .command, target: emojiAcrossLimit),
            EnvelopeHeader(kind: .command, scope: Scope(atLimit + "é")), EnvelopeHeader(kind: .command, typeName: String(repeating: "😀", count: 300)),
            EnvelopeHeader(kind: .dispatch, dispatchID: String(repeating: "😀", count: 300)),
            EnvelopeHeader(kind: .dispatch, dispatchID: String(repeating: "x", count: HeaderCodec.maximumDispatchIDBytes + 1)),
            EnvelopeHeader(kind: .dispatch, dispatchID: ""),
            EnvelopeHeader(kind: .dispatch, unknownFields: Data([9, 0, 5, 1])),
        ]
        for header in overLimit {
            let error = try #require(throws: BusError.self) { try HeaderCodec.encode(header) }
            #expect(error.code == .badArgument)
            #expect(throws: BusError.self) { try Envelope(header: header).frames() }
        }
        let longestID = String(repeating: "x", count: HeaderCodec.maximumDispatchIDBytes)
        #expect(try HeaderCodec.decode(Data(try HeaderCodec.encode(EnvelopeHeader(kind: .dispatch, dispatchID: longestID)))).dispatchID == longestID)
    }

    /// Optional fields: the dispatch id has its own; a tag this version does not know is kept and
    /// encoded again unchanged; a broken or doubled field is `malformed`.
    @Test func optionalFieldsRoundTripAndUnknownOnesAreKept() throws {
        let unknown: [UInt8] = [9, 0, 3, 0x61, 0x62, 0x63]
        let header = EnvelopeHeader(kind: .dispatch, target: "comments", typeName: "reply", dispatchID: "imm1", unknownFields: Data(unknown))
        let bytes = try HeaderCodec.encode(header)
        #expect(try HeaderCodec.decode(Data(bytes)) == header)
        #expect(Array(bytes.suffix(7 + unknown.count)) == [1, 0, 4, 0x69, 0x6D, 0x6D, 0x31] + unknown)
        let plain = try HeaderCodec.encode(EnvelopeHeader(kind: .dispatch))
        for broken: [UInt8] in [[1], [1, 0], [1, 0, 5, 0x61], [0, 0, 0], [1, 0, 0], [1, 0, 1, 0x61, 1, 0, 1, 0x62], [1, 0, 1, 0xFF]] {
            let error = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(plain + broken)) }
            #expect(error.code == .malformed, "\(broken)")
        }
    }

    /// Fields this version knows are set by name: smuggled in among the unknown ones they would
    /// make a header every receiver refuses ("two dispatch ids"), so the sender refuses it first.
    @Test func aKnownFieldAmongTheUnknownOnesIsRefusedBeforeSending() throws {
        for smuggled: [UInt8] in [[1, 0, 1, 0x61], [4, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]] {
            let header = EnvelopeHeader(kind: .dispatch, dispatchID: "d", flowID: 2, unknownFields: Data([9, 0, 0] + smuggled))
            let error = try #require(throws: BusError.self) { try HeaderCodec.encode(header) }
            #expect(error.code == .badArgument && error.message.contains("known field"), "\(smuggled)")
        }
    }

    /// The W3C tracestate travels as field 8 beside the trace context: kept as written, refused
    /// past 512 bytes, outside printable ASCII, or without a trace context.
    @Test func theTraceStateIsFieldEightWithItsTrace() throws {
        var header = EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet", trace: TraceContext.newTrace())
        header.traceState = "vendor=a1,other=b2"
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))) == header)
        for (state, accepted) in [
            (String(repeating: "k", count: 512), true), (String(repeating: "k", count: 513), false), ("caf\u{E9}=1", false), ("a\nb", false),
            ("", false),
        ] {
            var sent = header
            sent.traceState = state
            #expect(((try? HeaderCodec.encode(sent)) != nil) == accepted, "\(state.prefix(20)) (\(state.utf8.count) bytes)")
        }
        var alone = EnvelopeHeader(kind: .command)
        alone.traceState = "a=b"
        #expect(throws: BusError.self) { try HeaderCodec.encode(alone) }
        let plain = try HeaderCodec.encode(EnvelopeHeader(kind: .command))
        let refused = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(plain + [8, 0, 3, 0x61, 0x3D, 0x62])) }
        #expect(refused.code == .malformed && refused.message.contains("without a trace context"))
        let withTrace = try HeaderCodec.encode(EnvelopeHeader(kind: .command, trace: TraceContext.newTrace()))
        #expect(try HeaderCodec.decode(Data(withTrace + [8, 0, 3, 0x61, 0x3D, 0x62])).traceState == "a=b")
        #expect((try? HeaderCodec.decode(Data(withTrace + [8, 0, 2, 0xC3, 0xA9]))) == nil)
        #expect((try? HeaderCodec.decode(Data(withTrace + [8, 0, 1, 0x61, 8, 0, 1, 0x62]))) == nil)
        // An answer carries the request's trace state as it carries its trace context.
        let request = Envelope(header: header)
        #expect(request.reply().header.traceState == "vendor=a1,other=b2")
        #expect(request.errorReply(BusError(.busy, "x")).header.traceState == "vendor=a1,other=b2")
    }

    /// A flow event names its flow in field 4 (8 bytes, big-endian), not in the correlation id.
    @Test func theFlowIDIsAFieldOfItsOwn() throws {
        let header = EnvelopeHeader(kind: .flowEvent, source: "src", target: "owner", typeName: "Paid", flowID: FlowID(UInt64.max - 1))
        let bytes = try HeaderCodec.encode(header)
        #expect(try HeaderCodec.decode(Data(bytes)) == header)
        #expect(bytes.count == HeaderCodec.encodedSize(header))
        #expect(Array(bytes.suffix(11)) == [4, 0, 8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE])
        #expect(bytes.withUnsafeBytes { HeaderLayout.correlationID(in: $0) } == 0)
        // With a dispatch id and an unknown field around it, each is where it belongs.
        let both = EnvelopeHeader(kind: .flowEvent, dispatchID: "d", flowID: 9, unknownFields: Data([9, 0, 1, 0x7A]))
        #expect(try HeaderCodec.decode(Data(try HeaderCodec.encode(both))) == both)
        let plain = try HeaderCodec.encode(EnvelopeHeader(kind: .flowEvent))
        for broken: [UInt8] in [
            [4, 0, 7, 1, 2, 3, 4, 5, 6, 7], [4, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 0, 0],
            [4, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 4, 0, 8, 0, 0, 0, 0, 0, 0, 0, 2],
        ] {
            let error = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(plain + broken)) }
            #expect(error.code == .malformed, "\(broken)")
        }
    }

    /// A bad header whose fixed part can be read is answered when its sender waits.
    @Test func aBadHeaderIsAnswerableWhenItsFixedPartIsReadable() throws {
        var bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 77, typeName: "x"))
        bytes[2] = 9  // another version
        #expect(bytes.withUnsafeBytes { HeaderLayout.answerableCorrelationID($0) } == 77)
        let noReply = try HeaderCodec.encode(EnvelopeHeader(kind: .command, correlationID: 77))
        #expect(noReply.withUnsafeBytes { HeaderLayout.answerableCorrelationID($0) } == nil)
        let answer = try HeaderCodec.encode(EnvelopeHeader(kind: .error, flags: .replyExpected, correlationID: 77))
        #expect(answer.withUnsafeBytes { HeaderLayout.answerableCorrelationID($0) } == nil)
        #expect(Array(bytes.prefix(17)).withUnsafeBytes { HeaderLayout.answerableCorrelationID($0) } == nil)
    }

    @Test func refusesAnOversizedHeader() throws {
        let bytes = [UInt8](repeating: 0x42, count: HeaderCodec.maximumHeaderBytes + 1)
        let error = try? #require(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
        #expect(error?.code == .tooLarge)
    }

    /// Random and mutated frames: each is either refused with a `BusError` or decoded into a
    /// header that encodes back to the same header, in as many bytes.
    /// Inputs start with the magic, the current version and a real kind, or are real headers with
    /// a few bytes changed, so the field parsing is reached.
    @Test func survivesRandomGarbage() throws {
        var generator = SeededRandom(seed: 42)
        let kinds = MessageKind.allCases.map(\.rawValue)
        var real = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 7, timeoutMilliseconds: 500, source: "a.b", target: "c.d", scope: "s",
            typeName: "greet", contentType: "application/cbor")
        real.trace = TraceContext.newTrace()
        let sample = try HeaderCodec.encode(real)
        var (decoded, refused) = (0, 0)
        for round in 0..<20_000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int(4 + generator.next() % 60)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                bytes[0] = 0x42
                bytes[1] = 0x42
                bytes[2] = EnvelopeHeader.currentVersion
                bytes[3] = kinds[Int(generator.next() % UInt64(kinds.count))]
            } else {
                bytes = [UInt8](sample)
                for _ in 0..<Int(1 + generator.next() % 3) {
                    bytes[Int(4 + generator.next() % UInt64(bytes.count - 4))] = UInt8(truncatingIfNeeded: generator.next())
                }
            }
            do {
                let header = try HeaderCodec.decode(Data(bytes))
                // The same header again, and a fixed point from then on; only the order of the
                // optional fields may differ from the input (known ones are written first).
                let again = try HeaderCodec.encode(header)
                #expect(try HeaderCodec.decode(Data(again)) == header, "round \(round)")
                #expect(try HeaderCodec.encode(HeaderCodec.decode(Data(again))) == again, "round \(round)")
                #expect(again.count == bytes.count, "round \(round)")
                decoded += 1
            } catch is BusError {
                refused += 1
            } catch {
                Issue.record("round \(round): \(error) is not a BusError")
            }
        }
        #expect(decoded > 100 && refused > 100, "decoded \(decoded), refused \(refused)")
    }

    /// What a router reads in place agrees with the decoder: the same fields for every header the
    /// decoder accepts, the same error for every frame it refuses but for invalid UTF-8, which
    /// the layout leaves to whoever reads the strings (and reports as not ASCII).
    @Test func theLayoutAgreesWithTheDecoder() throws {
        var generator = SeededRandom(seed: 7)
        // Strings of 128 bytes or more have a length byte at 0x80 or over (200, and 129 with a
        // two-byte character at the end): the ASCII check of all four at once must fall back.
        let names = [
            "", "a", "bench.echo", "root.checkout", "ünï", String(repeating: "x", count: 300), String(repeating: "y", count: 200),
            String(repeating: "z", count: 127) + "é",
        ]
        var compared = 0
        for round in 0..<5_000 {
            let header = EnvelopeHeader(
                kind: MessageKind.allCases[Int(generator.next() % UInt64(MessageKind.allCases.count))],
                flags: MessageFlags(rawValue: UInt16(truncatingIfNeeded: generator.next())), correlationID: generator.next(),
                timeoutMilliseconds: UInt32(truncatingIfNeeded: generator.next()),
                source: names[Int(generator.next() % 8)], target: names[Int(generator.next() % 8)],
                scope: Scope(names[Int(generator.next() % 8)]), typeName: names[Int(generator.next() % 8)],
                dispatchID: [nil, "d", "ïd"][Int(generator.next() % 3)])
            var bytes = try HeaderCodec.encode(header)
            // Most rounds damage the frame: a byte changed, or the frame cut or lengthened.
            switch round % 4 {
            case 1: bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: generator.next())
            case 2: bytes.removeLast(Int(generator.next() % UInt64(bytes.count)))
            case 3: bytes.append(UInt8(truncatingIfNeeded: generator.next()))
            default: break
            }
            bytes.withUnsafeBytes { buffer in
                let decoded = Result { try HeaderCodec.decode(buffer) }
                let layout = Result { try HeaderLayout(buffer) }
                switch (decoded, layout) {
                case (.success(let decoded), .success(let layout)):
                    compared += 1
                    #expect(layout.kind == decoded.kind && layout.flags == decoded.flags)
                    #expect(layout.correlationID == decoded.correlationID && layout.timeoutMilliseconds == decoded.timeoutMilliseconds)
                    for (range, text) in [
                        (layout.source, decoded.source), (layout.target, decoded.target), (layout.scope, decoded.scope.name),
                        (layout.typeName, decoded.typeName),
                    ] {
                        #expect(Array(buffer[range]) == Array(text.utf8))
                    }
                    #expect(
                        layout.stringsAreASCII(in: buffer)
                            == [decoded.source, decoded.target, decoded.scope.name, decoded.typeName, decoded.dispatchID ?? ""].allSatisfy {
                                $0.utf8.allSatisfy { $0 < 0x80 }
                            })
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

    /// A field cut short or too long is refused naming the field: each of the four strings, and
    /// an optional field by its tag.
    @Test func aFieldCutShortOrTooLongIsNamedInTheRefusal() throws {
        let header = EnvelopeHeader(kind: .command, source: "src", target: "tgt", scope: "scp", typeName: "type")
        let bytes = [UInt8](try HeaderCodec.encode(header))
        func refusal(_ frame: [UInt8]) -> String? {
            frame.withUnsafeBytes { buffer -> String? in
                do throws(BusError) {
                    _ = try HeaderLayout(buffer)
                    return nil
                } catch { return error.message }
            }
        }
        // Offsets of each length: 18, then after each 2-byte length and its 3 or 4 bytes.
        for (name, lengthAt) in [("source", 18), ("target", 23), ("scope", 28), ("type name", 33)] {
            #expect(refusal(Array(bytes[..<(lengthAt + 1)])) == "header truncated before the \(name) length")
            #expect(refusal(Array(bytes[..<(lengthAt + 3)])) == "header truncated inside the \(name) field")
            var long = bytes
            long[lengthAt] = 0x04
            long[lengthAt + 1] = 0x01
            #expect(refusal(long) == "\(name) field of 1025 bytes is over the limit of 1024")
        }
        #expect(refusal(bytes + [9, 0]) == "header has 2 trailing bytes (an optional field needs a tag and a length)")
        #expect(refusal(bytes + [9, 0, 4, 1]) == "header truncated inside the optional field 9 field")
        #expect(refusal(bytes + [9, 0x04, 0x01]) == "optional field 9 field of 1025 bytes is over the limit of 1024")
    }

    @Test func theCorrelationIDIsRewrittenInPlace() throws {
        var bytes = try HeaderCodec.encode(sample)
        bytes.withUnsafeMutableBytes { HeaderLayout.setCorrelationID(0xAABB, in: $0) }
        var expected = sample
        expected.correlationID = 0xAABB
        #expect(try HeaderCodec.decode(Data(bytes)) == expected)
    }
}

/// What the type-name field names, by kind.
@Suite("Header subject")
struct HeaderSubjectTests {
    @Test func eachKindSaysWhatItsTypeNameIs() {
        let cases: [(MessageKind, EnvelopeHeader.Subject)] = [
            (.activate, .payloadType("T")), (.output, .payloadType("T")), (.flowEvent, .payloadType("T")),
            (.command, .command("T")), (.action, .action("T")), (.dispatch, .storeAction("T")), (.store, .storeOperation("T")),
            (.control, .control("T")), (.error, .error(BusError.Code(name: "T"))),
            (.reply, .none), (.register, .none), (.unregister, .none), (.heartbeat, .none), (.complete, .none),
        ]
        #expect(Set(cases.map(\.0)) == Set(MessageKind.allCases), "every kind is listed")
        for (kind, subject) in cases {
            #expect(EnvelopeHeader(kind: kind, typeName: "T").subject == subject, "\(kind)")
        }
        #expect(Envelope.error(BusError(.timeout, "late"), correlationID: 3).header.subject == .error(.timeout))
    }

    /// The link trail (optional field 5): 1 to 16 ids of 8 bytes, read back as written; anything
    /// else is refused, never cut.
    @Test func aLinkTrailIsReadAsWrittenAndRefusedPastItsLimit() throws {
        var header = EnvelopeHeader(kind: .action, typeName: "app.announce")
        header.linkTrail = [1, .max, 0x0102_0304_0506_0708]
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))) == header)
        header.linkTrail = Array(1...UInt64(HeaderCodec.maximumLinkHops + 1))
        #expect(throws: BusError.self) { try HeaderCodec.encode(header) }
        header.linkTrail = []
        #expect(throws: BusError.self) { try HeaderCodec.encode(header) }
        // On the wire: 7 bytes, or 17 ids, are malformed.
        header.linkTrail = nil
        var bytes = try HeaderCodec.encode(header)
        bytes += [5, 0, 7] + [UInt8](repeating: 1, count: 7)
        #expect(throws: BusError.self) { try HeaderCodec.decode(Data(bytes)) }
    }

    /// A receiver's recent names (`HeaderCodec.RecentNames`) change nothing it reads: a header
    /// that repeats the last one's names, one that changes them (to the same length, by one byte
    /// of a multi-byte character, or to empty), and one whose name is invalid UTF-8 of the last
    /// name's length all decode as on their own, and the invalid one is refused.
    @Test func recentNamesChangeNothingThatIsRead() throws {
        func decode(_ header: EnvelopeHeader, _ recent: inout HeaderCodec.RecentNames) throws -> EnvelopeHeader {
            try HeaderCodec.encode(header).withUnsafeBytes { try HeaderCodec.decode($0, recent: &recent) }
        }
        let sample = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 7, source: "auth.login", target: "app.dashboard", scope: "root.checkout",
            typeName: "greet·ünïcode")
        var recent = HeaderCodec.RecentNames()
        var other = sample
        other.source = "auth.logon"
        other.target = ""
        other.typeName = "greet·ünïcodf"
        for header in [sample, sample, other, sample, EnvelopeHeader(kind: .reply), sample] {
            #expect(try decode(header, &recent) == header)
        }
        // The last name's length, not valid UTF-8: refused, not taken for the last name.
        var bytes = try HeaderCodec.encode(sample)
        let layout = try bytes.withUnsafeBytes { try HeaderLayout(UnsafeRawBufferPointer($0)) }
        bytes[layout.typeName.lowerBound + 6] = 0xFF
        let error = try? #require(throws: BusError.self) { try bytes.withUnsafeBytes { try HeaderCodec.decode($0, recent: &recent) } }
        #expect(error?.code == .malformed)
        #expect(try decode(sample, &recent) == sample)
        // A header refused at its type name after a new source and target: none of its names is
        // kept, so the next header with the names before reads them, not the refused one's.
        var refused = try HeaderCodec.encode(other)
        let otherLayout = try refused.withUnsafeBytes { try HeaderLayout(UnsafeRawBufferPointer($0)) }
        refused[otherLayout.typeName.lowerBound + 6] = 0xFF
        #expect(throws: BusError.self) { try refused.withUnsafeBytes { try HeaderCodec.decode($0, recent: &recent) } }
        #expect(try decode(sample, &recent) == sample)
        // Names whose bytes run together as the last header's, cut at another place: read as
        // written (their lengths differ).
        var shifted = sample
        shifted.source = "auth.logi"
        shifted.target = "napp.dashboard"
        #expect(try decode(shifted, &recent) == shifted)
        #expect(try decode(sample, &recent) == sample)
    }
}
