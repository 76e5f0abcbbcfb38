import BusCore
import Foundation
import InMemoryTracing
import Testing

@testable import BoardKit

/// Handlers run under the trace of the message they handle: with a tracer, inside a `server`
/// span of it; without one, with a span id of BoardBus's own.
@Suite("Handler spans")
struct HandlerSpanTests {
    let trace = TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")!

    @Test func withATracerAHandlerRunsInAServerSpanAndSendsUnderTheMessagesTrace() async {
        let tracer = InMemoryTracer()
        let header = EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet", trace: trace)
        let seen = await HandlerSpan.run(header, tracer: tracer) { BusTrace.current }
        let now = HandlerSpan.runNow(header, tracer: tracer) { BusTrace.current }
        let spans = tracer.finishedSpans
        #expect(spans.map(\.operationName) == ["command greet", "command greet"])
        for current in [seen, now] {
            #expect(current?.traceID == trace.traceID && current?.spanID != trace.spanID)
        }
    }

    /// The tracestate that came with the message is what the handler sends under, with a tracer
    /// (which writes none of its own here) and without one.
    @Test func theTraceStateIsCarriedOnWithOrWithoutATracer() async {
        var header = EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet", trace: trace)
        header.traceState = "vendor=a1"
        #expect(await HandlerSpan.run(header, tracer: InMemoryTracer()) { BusTrace.currentState } == "vendor=a1")
        #expect(HandlerSpan.runNow(header, tracer: InMemoryTracer()) { BusTrace.currentState } == "vendor=a1")
        #expect(await HandlerSpan.run(header, tracer: nil) { BusTrace.currentState } == "vendor=a1")
        #expect(await HandlerSpan.run(EnvelopeHeader(kind: .command, trace: trace), tracer: nil) { BusTrace.currentState } == nil)
    }

    @Test func withoutATracerTheHandlerKeepsTheTraceWithASpanOfItsOwn() async {
        let seen = await HandlerSpan.run(EnvelopeHeader(kind: .activate, trace: trace), tracer: nil) { BusTrace.current }
        #expect(seen?.traceID == trace.traceID && seen?.spanID != trace.spanID && seen?.flags == trace.flags)
        let untraced = await HandlerSpan.run(EnvelopeHeader(kind: .activate), tracer: nil) { BusTrace.current }
        #expect(untraced == nil)
        let untracedNow = HandlerSpan.runNow(EnvelopeHeader(kind: .store), tracer: InMemoryTracer()) { BusTrace.current }
        #expect(untracedNow == nil)
    }
}
