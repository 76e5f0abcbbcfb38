import BusCore
import Tracing

/// Runs board handlers inside a span (swift-distributed-tracing) and under the trace of the
/// message they handle, so that every message a handler sends carries that trace.
///
/// With no tracer bootstrapped (the default), no span is made: the handler runs under the
/// message's trace with a new span id of BoardBus's own, and an untraced message costs one check.
/// When the process has bootstrapped a tracer (e.g. swift-otel's), each handler runs in a
/// `server` span whose parent is the sender's span (read from the message's W3C `traceparent`),
/// and what the handler sends carries that span's context: the spans of one user action, across
/// processes, form one trace in the exporter.
enum HandlerSpan {
    /// The tracer the process bootstrapped, nil for the no-op one (read once: bootstrapping
    /// happens before a board runs).
    static let bootstrapped: (any Tracer)? = {
        let tracer = InstrumentationSystem.tracer
        return tracer is NoOpTracer ? nil : tracer
    }()

    /// Runs `body` for the message `header` under its trace, in a span of `tracer` when there is one.
    static func run<T>(_ header: EnvelopeHeader, tracer: (any Tracer)? = bootstrapped, _ body: () async throws -> T) async rethrows -> T {
        guard let tracer else {
            guard let trace = header.trace else { return try await body() }
            return try await BusTrace.$current.withValue(trace.childSpan()) {
                try await BusTrace.$currentState.withValue(header.traceState) { try await body() }
            }
        }
        return try await inSpan(of: tracer, header, body)
    }

    /// The same for a handler that runs synchronously (store messages, immediate commands).
    static func runNow<T>(_ header: EnvelopeHeader, tracer: (any Tracer)? = bootstrapped, _ body: () throws -> T) rethrows -> T {
        guard let tracer else {
            guard let trace = header.trace else { return try body() }
            return try BusTrace.$current.withValue(trace.childSpan()) { try BusTrace.$currentState.withValue(header.traceState) { try body() } }
        }
        return try inSpanNow(of: tracer, header, body)
    }

    private static func inSpan<Tracer: Tracing.Tracer, T>(of tracer: Tracer, _ header: EnvelopeHeader, _ body: () async throws -> T) async rethrows
        -> T
    {
        try await tracer.withSpan(name(of: header), context: context(of: header, tracer), ofKind: .server) { span in
            span.attributes["boardbus.board"] = header.target
            span.attributes["boardbus.kind"] = "\(header.kind)"
            let (trace, state) = trace(of: span, tracer, else: header)
            return try await BusTrace.$current.withValue(trace) { try await BusTrace.$currentState.withValue(state) { try await body() } }
        }
    }

    private static func inSpanNow<Tracer: Tracing.Tracer, T>(of tracer: Tracer, _ header: EnvelopeHeader, _ body: () throws -> T) rethrows -> T {
        try tracer.withSpan(name(of: header), context: context(of: header, tracer), ofKind: .server) { span in
            span.attributes["boardbus.board"] = header.target
            span.attributes["boardbus.kind"] = "\(header.kind)"
            let (trace, state) = trace(of: span, tracer, else: header)
            return try BusTrace.$current.withValue(trace) { try BusTrace.$currentState.withValue(state) { try body() } }
        }
    }

    /// "command greet", "activate LoginIO.Session", …
    static func name(of header: EnvelopeHeader) -> String {
        "\(header.kind) \(header.typeName)"
    }

    /// The tracer's context with the sender's span as parent, read from the W3C `traceparent` (and
    /// `tracestate`).
    private static func context(of header: EnvelopeHeader, _ tracer: some Tracing.Tracer) -> InstrumentationContext {
        var context = InstrumentationContext.topLevel
        if let trace = header.trace {
            var carrier = ["traceparent": trace.traceparent]
            carrier["tracestate"] = header.traceState
            tracer.extract(carrier, into: &context, using: TraceparentCarrier())
        }
        return context
    }

    /// The span's own context as the tracer writes it (`traceparent`), or, when the tracer writes
    /// none, the message's trace with a new span id.
    private static func trace(of span: some Span, _ tracer: some Tracing.Tracer, else incoming: EnvelopeHeader) -> (TraceContext?, String?) {
        var carrier: [String: String] = [:]
        tracer.inject(span.context, into: &carrier, using: TraceparentCarrier())
        if let text = carrier["traceparent"], let trace = TraceContext(traceparent: text) {
            // The tracer's own tracestate if it writes one, else the one that came.
            return (trace, carrier["tracestate"].flatMap { TraceContext.isValidState($0.utf8) ? $0 : nil } ?? incoming.traceState)
        }
        return (incoming.trace?.childSpan(), incoming.trace == nil ? nil : incoming.traceState)
    }
}

/// Reads and writes W3C headers in a dictionary, for a tracer's propagator.
private struct TraceparentCarrier: Extractor, Injector {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}
