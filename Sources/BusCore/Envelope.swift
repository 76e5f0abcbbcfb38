import Foundation

/// One bus message: a header the broker routes on and a payload it never decodes.
///
/// On the wire it is two ZeroMQ frames, the binary header (``HeaderCodec``) and the payload bytes.
/// It is also `Codable`, so tools can print it as JSON.
public struct Envelope: Sendable, Hashable, Codable {
    public var header: EnvelopeHeader
    /// JSON by default (see ``PayloadCodec``); opaque to the broker.
    public var payload: Data

    public init(header: EnvelopeHeader, payload: Data = Data()) {
        self.header = header
        self.payload = payload
    }

    /// The wire frames: the encoded header, then the payload. Throws `badArgument` when a header
    /// field is over its limit.
    public func frames() throws(BusError) -> [Data] {
        [Data(try HeaderCodec.encode(header)), payload]
    }

    /// Parses the frames of one message, checking count, sizes and the header.
    public init(frames: [Data], limits: BusLimits = .default) throws {
        self = try Envelope.parse(frames: frames, limits: limits).mapError(\.error).get()
    }

    /// Parses the frames of one message; a refusal keeps the header when it was readable.
    public static func parse(frames: [Data], limits: BusLimits = .default) -> Result<Envelope, MalformedMessage> {
        let header = frames.first.map { frame in Result { try HeaderCodec.decode(frame) }.mapError(BusError.init(wrapping:)) }
        return assemble(
            frameCount: frames.count, header: header,
            answerableCorrelationID: frames.first?.withUnsafeBytes { HeaderLayout.answerableCorrelationID($0) },
            payloadBytes: frames.count > 1 ? frames[1].count : 0,
            payload: frames.count > 1 ? frames[1] : Data(), limits: limits)
    }

    /// Checks the parts of one message, read by a transport frame by frame, in the order every
    /// receiver uses: frame count, payload size, header.
    /// - Parameters:
    ///   - frameCount: frames after the routing id.
    ///   - header: the first frame decoded, nil when there was none.
    ///   - answerableCorrelationID: ``HeaderLayout/answerableCorrelationID(_:)`` of the first frame,
    ///     evaluated only when the message is refused.
    ///   - payloadBytes: the size of the second frame.
    ///   - payload: the second frame (ignored when the message is refused).
    public static func assemble(
        frameCount: Int, header: Result<EnvelopeHeader, BusError>?, answerableCorrelationID: @autoclosure () -> UInt64?,
        payloadBytes: Int, payload: Data, limits: BusLimits
    ) -> Result<Envelope, MalformedMessage> {
        guard frameCount == 2 else {
            let error = BusError(.malformed, "expected 2 frames (header, payload), got \(frameCount)")
            return .failure(MalformedMessage(error, answerWith: answerableCorrelationID()))
        }
        guard payloadBytes <= limits.maximumPayloadBytes else {
            let error = BusError(.tooLarge, "payload of \(payloadBytes) bytes is over the limit of \(limits.maximumPayloadBytes)")
            return .failure(MalformedMessage(error, answerWith: answerableCorrelationID()))
        }
        switch header {
        case .success(let header): return .success(Envelope(header: header, payload: payload))
        case .failure(let error): return .failure(MalformedMessage(error, answerWith: answerableCorrelationID()))
        case nil: return .failure(MalformedMessage(BusError(.malformed, "no header frame"), answerWith: nil))
        }
    }

    /// A reply to this request, carrying its correlation id back. An answer names no target: it is
    /// routed by its correlation id alone (the broker would clear a target anyway), so that the
    /// broker can send it on in the frames it came in, whoever asked.
    public func reply(payload: Data = Data(), source: String = "") -> Envelope {
        var answer = Envelope(
            header: EnvelopeHeader(kind: .reply, correlationID: header.correlationID, source: source, trace: header.trace), payload: payload)
        if let state = header.traceState { answer.header.traceState = state }
        return answer
    }

    /// An error reply to this request (with no target, as ``reply(payload:source:)``).
    public func errorReply(_ error: BusError, source: String = "") -> Envelope {
        var answer = Envelope.error(error, correlationID: header.correlationID, source: source, trace: header.trace)
        if let state = header.traceState { answer.header.traceState = state }
        return answer
    }

    /// An `error` answer to the request the sender knows by `correlationID`: the code in the type
    /// name, `{"code", "message"}` as payload, no target.
    public static func error(_ error: BusError, correlationID: UInt64, source: String = "", trace: TraceContext? = nil) -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .error, correlationID: correlationID, source: source, typeName: error.code.name, trace: trace),
            payload: PayloadCodec.encodeOrEmpty(error)
        )
    }

    /// The error this envelope carries, when it is an `error` message.
    public var carriedError: BusError? {
        guard header.kind == .error else { return nil }
        if let error = try? PayloadCodec.decode(BusError.self, from: payload) { return error }
        return BusError(BusError.Code(name: header.typeName.isEmpty ? "malformed" : header.typeName), "error reply without a readable payload")
    }
}

/// Frames that are not a valid message: why, and the correlation id to answer the sender with
/// when it waits for an answer and the header's fixed part could be read
/// (``HeaderLayout/answerableCorrelationID(_:)``).
public struct MalformedMessage: Error, Sendable, Hashable {
    public var error: BusError
    /// The sender's correlation id, when it expects an answer; nil: nobody waits, drop it.
    public var answerWith: UInt64?

    public init(_ error: BusError, answerWith: UInt64?) {
        self.error = error
        self.answerWith = answerWith
    }
}

/// Size limits of the bus. Oversized messages are refused with ``BusError/Code/tooLarge``.
public struct BusLimits: Sendable, Hashable {
    /// Largest payload frame accepted, in bytes. Default 4 MiB.
    public var maximumPayloadBytes: Int
    /// Largest header frame accepted, in bytes. Default 4 KiB.
    public var maximumHeaderBytes: Int

    public init(maximumPayloadBytes: Int = 4 << 20, maximumHeaderBytes: Int = HeaderCodec.maximumHeaderBytes) {
        self.maximumPayloadBytes = maximumPayloadBytes
        self.maximumHeaderBytes = maximumHeaderBytes
    }

    public static let `default` = BusLimits()
}
