import Foundation
import Testing

@testable import BusCore

@Suite("Envelope, errors and payloads")
struct EnvelopeTests {
    @Test func framesRoundTrip() throws {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .output, source: "auth.login", typeName: "LoginSucceeded"), payload: Data(#"{"a":1}"#.utf8))
        #expect(try Envelope(frames: try envelope.frames()) == envelope)
    }

    /// The optional fields live in a shared box: a copy that changes them never changes the
    /// original, equal headers hash alike however they were built, and a header whose optional
    /// fields were all cleared equals one that never had any.
    @Test func optionalFieldsAreValuesThroughCopies() throws {
        let trace = try #require(TraceContext(traceIDHigh: 1, traceIDLow: 2, spanID: 3))
        let original = EnvelopeHeader(
            kind: .dispatch, target: "comments", typeName: "add", dispatchID: "d-1", flowID: FlowID(7), trace: trace,
            contentType: "application/cbor", unknownFields: Data([9, 0, 1, 0x61]))
        var copy = original
        copy.dispatchID = "d-2"
        copy.trace = nil
        copy.unknownFields = Data()
        #expect(original.dispatchID == "d-1" && original.trace == trace && original.unknownFields == Data([9, 0, 1, 0x61]))
        #expect(copy.dispatchID == "d-2" && copy.flowID == FlowID(7) && copy.contentType == "application/cbor")
        copy.dispatchID = nil
        copy.flowID = nil
        copy.contentType = nil
        let plain = EnvelopeHeader(kind: .dispatch, target: "comments", typeName: "add")
        #expect(copy == plain && copy.hashValue == plain.hashValue)
        var rebuilt = plain
        (rebuilt.dispatchID, rebuilt.flowID, rebuilt.trace) = ("d-1", FlowID(7), trace)
        (rebuilt.contentType, rebuilt.unknownFields) = ("application/cbor", Data([9, 0, 1, 0x61]))
        #expect(rebuilt == original && rebuilt.hashValue == original.hashValue && rebuilt != plain)
        // On the wire and as JSON, every field survives.
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(original))) == original)
        #expect(try JSONDecoder().decode(EnvelopeHeader.self, from: JSONEncoder().encode(original)) == original)
    }

    /// `application/cbor`, on every typed CBOR message, is kept apart from the other optional
    /// fields: switching between it, another content type and none reads back what was set,
    /// through copies, equality and the wire.
    @Test func theCBORContentTypeReadsBackAsSetBesideTheOtherFields() throws {
        var header = EnvelopeHeader(kind: .command, typeName: "echo", contentType: PayloadFormat.cborContentType)
        let cbor = header
        header.contentType = "text/plain"
        #expect(header.contentType == "text/plain" && cbor.contentType == PayloadFormat.cborContentType && header != cbor)
        header.dispatchID = "d-1"
        header.contentType = PayloadFormat.cborContentType
        #expect(header.contentType == PayloadFormat.cborContentType && header.dispatchID == "d-1")
        header.dispatchID = nil
        #expect(header == cbor && header.hashValue == cbor.hashValue)
        for value in [cbor, header] {
            #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(value))) == value)
        }
        header.contentType = nil
        #expect(header.contentType == nil && header == EnvelopeHeader(kind: .command, typeName: "echo"))
    }

    @Test func refusesWrongFrameCounts() throws {
        let header = EnvelopeHeader(kind: .heartbeat)
        let one = try Envelope(header: header).frames()
        let previous = Data(try HeaderCodec.encode(header, version: EnvelopeHeader.previousVersion))
        // Version 4 is one frame, version 3 two; anything else (or nothing) is malformed.
        for frames in [[], one + [Data()], [previous], [previous, Data(), Data()], [Data(try HeaderCodec.encode(header)), Data()]] {
            let error = try? #require(throws: BusError.self) { try Envelope(frames: frames) }
            #expect(error?.code == .malformed, "\(frames)")
        }
    }

    @Test(arguments: [EnvelopeHeader.currentVersion, EnvelopeHeader.previousVersion])
    func refusesAnOversizedPayload(version: UInt8) throws {
        let header = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 5)
        let limits = BusLimits(maximumPayloadBytes: 1024)
        let refused = Envelope.parse(frames: try Envelope(header: header, payload: Data(count: 1025)).frames(version: version), limits: limits)
        #expect(refused == .failure(MalformedMessage(BusError(.tooLarge, "payload of 1025 bytes is over the limit of 1024"), answerWith: 5)))
        #expect((try? Envelope(frames: try Envelope(header: header, payload: Data(count: 1024)).frames(version: version), limits: limits)) != nil)
    }

    /// Version 4's frame is the header's bytes, a 0 byte, the payload; version 3's two frames are
    /// the same header bytes (but the version byte) and the payload. Both read back the same.
    @Test func oneFrameInVersionFourTwoInVersionThree() throws {
        let header = EnvelopeHeader(
            kind: .command, flags: .replyExpected, correlationID: 7, target: "a.b", typeName: "x", dispatchID: "d", contentType: "application/cbor")
        // A payload that starts with the byte that ends a header, and one with nothing.
        for payload in [Data([0, 0, 1]), Data(), Data("{}".utf8)] {
            let envelope = Envelope(header: header, payload: payload)
            let bytes = try HeaderCodec.encode(header)
            #expect(bytes[2] == 4)
            #expect(try envelope.frames() == [Data(bytes) + Data([0]) + payload])
            var previous = bytes
            previous[2] = 3
            #expect(try envelope.frames(version: 3) == [Data(previous), payload])
            #expect(try Envelope(frames: envelope.frames()) == envelope)
            #expect(try Envelope(frames: envelope.frames(version: 3)) == envelope)
        }
    }

    /// A version-4 header must end (with its 0 byte) within the header limit: a frame that ends
    /// first is malformed, one whose header runs past the limit is too large, and a header of
    /// exactly the limit is read. The sender's correlation id is kept to answer it.
    @Test func aVersionFourHeaderEndsWithinTheLimit() throws {
        let base = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 11, target: "a.b")
        let bytes = try HeaderCodec.encode(base)
        let unended = Envelope.parse(frames: [Data(bytes)])
        #expect(unended.failure?.error.code == .malformed)
        #expect(unended.failure?.answerWith == 11)
        // Unknown optional fields (tag 200) of `bytes` bytes in all.
        func unknownFields(_ bytes: Int) -> Data {
            let count = (bytes + 2 + HeaderCodec.maximumOptionalFieldBytes) / (3 + HeaderCodec.maximumOptionalFieldBytes)
            let values = bytes - 3 * count
            return (0..<count).reduce(into: Data()) { fields, index in
                let length = values / count + (index < values % count ? 1 : 0)
                fields += Data([200, UInt8(length >> 8), UInt8(length & 0xFF)]) + Data(repeating: 0xAA, count: length)
            }
        }
        // Filled to exactly the limit: read; one byte past it: too large.
        let room = HeaderCodec.maximumHeaderBytes - bytes.count
        let atLimit = Data(bytes) + unknownFields(room) + Data([0]) + Data("p".utf8)
        #expect(atLimit.count == HeaderCodec.maximumHeaderBytes + 2)
        var full = base
        full.unknownFields = unknownFields(room)
        #expect(try Envelope(frames: [atLimit]) == Envelope(header: full, payload: Data("p".utf8)))
        let refused = Envelope.parse(frames: [Data(bytes) + unknownFields(room + 1) + Data([0]) + Data("p".utf8)])
        #expect(refused.failure?.error.code == .tooLarge, "\(String(describing: refused.failure))")
        #expect(refused.failure?.answerWith == 11)
        // A payload of any size after a header that ends is not read as header.
        #expect(try Envelope(frames: Envelope(header: base, payload: Data(repeating: 1, count: 70_000)).frames()).payload.count == 70_000)
    }

    @Test func errorRepliesCarryTheirCode() throws {
        let request = Envelope(header: EnvelopeHeader(kind: .command, correlationID: 9, source: "x.y"))
        let reply = request.errorReply(BusError(.typeMismatch, "expected A, received B"))
        #expect(reply.header.kind == .error)
        #expect(reply.header.correlationID == 9)
        #expect(reply.carriedError == BusError(.typeMismatch, "expected A, received B"))
    }

    @Test func unknownErrorCodesKeepTheirName() throws {
        let error = try PayloadCodec.decode(BusError.self, from: Data(#"{"code":"quotaExceeded","message":"m"}"#.utf8))
        #expect(error.code.name == "quotaExceeded")
    }

    @Test func wrongPayloadTypesAreTypeMismatches() throws {
        struct Greet: BusPayload { var name: String }
        let error = try #require(throws: BusError.self) { try PayloadCodec.decode(Greet.self, from: Data(#"{"nom":"x"}"#.utf8)) }
        #expect(error.code == .typeMismatch)
        #expect(error.message.contains("name"))
        #expect(Greet.busTypeName == "Greet")
    }

    @Test func boardIDsAreChecked() throws {
        #expect(BoardID.isValid("auth.login"))
        #expect(BoardID.isValid("a-b_c.d1"))
        for bad in ["", ".a", "a.", "a..b", "a b", "é", String(repeating: "a", count: 256)] {
            #expect(!BoardID.isValid(bad), "\(bad)")
        }
        #expect(throws: BusError.self) { try BoardID(validating: "no spaces") }
    }

    @Test func addressesFollowTheEnvironment() throws {
        let explicit = BusAddress.resolve(environment: ["BOARDBUS_RUNTIME_DIR": "/r"], userID: 5)
        #expect(explicit.endpoint == "ipc:///r/motherboard.sock")
        #expect(explicit.ipcPath == "/r/motherboard.sock")
        #expect(BusAddress.resolve(environment: ["XDG_RUNTIME_DIR": "/run/user/5"], userID: 5).runtimeDirectory == "/run/user/5/boardbus")
        #expect(BusAddress.resolve(environment: [:], userID: 5).runtimeDirectory == "/tmp/boardbus-5")
        #expect(
            BusAddress.resolve(explicitEndpoint: "tcp://127.0.0.1:5555", environment: ["BOARDBUS_ADDRESS": "ipc:///x"], userID: 5).endpoint
                == "tcp://127.0.0.1:5555")
        #expect(BusAddress.resolve(environment: ["BOARDBUS_ADDRESS": "ipc:///x"], userID: 5).endpoint == "ipc:///x")
    }
}

extension Result {
    /// The error, when this is a failure.
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
