import BusCore
import Foundation
import Testing

@Suite("Trace context")
struct TraceContextTests {
    static let w3cExample = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func readsAndWritesTheW3CTraceparent() throws {
        let trace = try #require(TraceContext(traceparent: Self.w3cExample))
        #expect(trace.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(trace.spanIDText == "00f067aa0ba902b7")
        #expect(trace.flags == 1)
        #expect(trace.traceparent == Self.w3cExample)
        // A later version's first four fields are read, as W3C asks.
        #expect(TraceContext(traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")?.flags == 0)
    }

    @Test func refusesWhatW3CRefuses() {
        for text in [
            "", "00", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // 31 digits
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // version 00 has four fields
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            #expect(TraceContext(traceparent: text) == nil, "\(text)")
        }
        #expect(!TraceContext.isTraceID("00000000000000000000000000000000"))
        #expect(!TraceContext.isTraceID("4bf92f3577b34da6a3ce929d0e0e473"))
        #expect(TraceContext.isTraceID("4bf92f3577b34da6a3ce929d0e0e4736"))
    }

    @Test func newTracesAndChildSpansAreValid() {
        let trace = TraceContext.newTrace()
        let child = trace.childSpan()
        #expect(child.traceID == trace.traceID && child.spanID != trace.spanID && child.spanID != 0)
        #expect(TraceContext(traceparent: trace.traceparent) == trace)
    }

    /// Field 2 round-trips; a field of the wrong size, with a zero id, or twice is refused.
    @Test func travelsAsOptionalFieldTwo() throws {
        let trace = try #require(TraceContext(traceparent: Self.w3cExample))
        let header = EnvelopeHeader(kind: .command, correlationID: 9, target: "a", typeName: "b", dispatchID: "d", trace: trace)
        let bytes = try HeaderCodec.encode(header)
        #expect(bytes.count == HeaderCodec.encodedSize(header))
        #expect(try HeaderCodec.decode(Data(bytes)) == header)
        let plain = try HeaderCodec.encode(EnvelopeHeader(kind: .command, target: "a"))
        func field(_ value: [UInt8]) -> [UInt8] { [HeaderCodec.OptionalField.trace, 0, UInt8(value.count)] + value }
        for bad in [
            plain + field(Array(trace.bytes.prefix(24))), plain + field(Array(repeating: 0, count: 25)),
            plain + field(trace.bytes) + field(trace.bytes),
        ] {
            let error = try #require(throws: BusError.self) { try HeaderCodec.decode(Data(bad)) }
            #expect(error.code == .malformed)
        }
        // Set by name only: smuggled among the unknown fields it is refused before sending.
        var smuggled = EnvelopeHeader(kind: .command)
        smuggled.unknownFields = Data(field(trace.bytes))
        #expect(throws: BusError.self) { try HeaderCodec.encode(smuggled) }
    }
}
