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

    @Test func refusesWrongFrameCounts() throws {
        let header = Data(try HeaderCodec.encode(EnvelopeHeader(kind: .heartbeat)))
        for frames in [[], [header], [header, Data(), Data()]] {
            let error = try? #require(throws: BusError.self) { try Envelope(frames: frames) }
            #expect(error?.code == .malformed)
        }
    }

    @Test func refusesAnOversizedPayload() throws {
        let header = Data(try HeaderCodec.encode(EnvelopeHeader(kind: .command)))
        let limits = BusLimits(maximumPayloadBytes: 1024)
        let error = try? #require(throws: BusError.self) { try Envelope(frames: [header, Data(count: 1025)], limits: limits) }
        #expect(error?.code == .tooLarge)
        #expect((try? Envelope(frames: [header, Data(count: 1024)], limits: limits)) != nil)
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
