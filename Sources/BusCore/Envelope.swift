import FoundationEssentials

/// One bus message: a header the broker routes on and a payload it never decodes.
///
/// On the wire it is one ZeroMQ frame, the binary header (``HeaderCodec``), a 0 byte and the
/// payload bytes (version 4; version 3's two frames are still read, ``WireFraming``).
/// It is also `Codable`, so tools can print it as JSON.
public struct Envelope: Sendable, Hashable, Codable {
    public var header: EnvelopeHeader
    /// JSON by default (see ``PayloadCodec``); opaque to the broker.
    public var payload: Data

    public init(header: EnvelopeHeader, payload: Data = Data()) {
        self.header = header
        self.payload = payload
    }

    /// The wire frames: in the current version one frame (the encoded header, a 0 byte, the
    /// payload); in version 3 (`version: 3`, for a peer that speaks it) the encoded header, then the
    /// payload. Throws `badArgument` when a header field is over its limit.
    public func frames(version: UInt8 = EnvelopeHeader.currentVersion) throws(BusError) -> [Data] {
        guard version == EnvelopeHeader.currentVersion else { return [Data(try HeaderCodec.encode(header, version: version)), payload] }
        let headerBytes = try HeaderCodec.validatedSize(header)
        var frame = Data(count: headerBytes + 1 + payload.count)
        frame.withUnsafeMutableBytes { buffer in
            Self.write(header, headerBytes: headerBytes, payload: payload, into: buffer)
        }
        return [frame]
    }

    /// Writes the one frame of the current version into `buffer`, of exactly `headerBytes` (the
    /// header's ``HeaderCodec/validatedSize(_:)``) + 1 + the payload's size.
    package static func write(_ header: EnvelopeHeader, headerBytes: Int, payload: Data, into buffer: UnsafeMutableRawBufferPointer) {
        _ = HeaderCodec.write(header, into: buffer)
        buffer[headerBytes] = WireFraming.endOfHeader
        guard !payload.isEmpty else { return }
        payload.withUnsafeBytes { bytes in
            (buffer.baseAddress! + headerBytes + 1).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
    }

    /// Parses the frames of one message, checking count, sizes and the header.
    public init(frames: [Data], limits: BusLimits = .default) throws {
        self = try Envelope.parse(frames: frames, limits: limits).mapError(\.error).get()
    }

    /// Parses the frames of one message (either version); a refusal keeps the sender's correlation
    /// id when it can be answered.
    public static func parse(frames: [Data], limits: BusLimits = .default) -> Result<Envelope, MalformedMessage> {
        var names = HeaderCodec.RecentNames()
        guard let first = frames.first else {
            return assemble(
                first: UnsafeRawBufferPointer(start: nil, count: 0), frameCount: 0, secondFrameBytes: 0, limits: limits, recentNames: &names
            ) { _ in Data() }
        }
        return first.withUnsafeBytes { bytes in
            assemble(
                first: bytes, frameCount: frames.count, secondFrameBytes: frames.count > 1 ? frames[1].count : 0, limits: limits,
                recentNames: &names
            ) { range in
                guard let range else { return frames[1] }
                return range.isEmpty ? Data() : Data(bytes: bytes.baseAddress! + range.lowerBound, count: range.count)
            }
        }
    }

    /// Checks and reads one message, read by a transport frame by frame, in the order every
    /// receiver uses: framing (frame count for the version, the end of a version-4 header),
    /// payload size, header.
    /// - Parameters:
    ///   - first: the first frame's bytes (after the routing id).
    ///   - frameCount: frames after the routing id.
    ///   - secondFrameBytes: the size of the second frame (the payload, in version 3).
    ///   - framing: ``WireFraming/accepted(first:frameCount:)`` of these frames when the caller
    ///     found it already; nil: found here.
    ///   - recentNames: the names of the last header this receiver decoded
    ///     (``HeaderCodec/RecentNames``), kept up to date.
    ///   - payload: the payload, given where it is: a range of the first frame (version 4), or nil
    ///     for the second frame (version 3); asked only for a message that is accepted.
    package static func assemble(
        first: UnsafeRawBufferPointer, frameCount: Int, secondFrameBytes: Int, limits: BusLimits, framing: WireFraming? = nil,
        recentNames: inout HeaderCodec.RecentNames, payload: (_ inFirstFrame: Range<Int>?) -> Data
    ) -> Result<Envelope, MalformedMessage> {
        guard frameCount > 0 else { return .failure(MalformedMessage(BusError(.malformed, "no header frame"), answerWith: nil)) }
        let header: Range<Int>
        let payloadRange: Range<Int>?
        switch framing.map(Result.success) ?? WireFraming.of(first: first, frameCount: frameCount) {
        case .success(.one(let headerRange, let inFrame)): (header, payloadRange) = (headerRange, inFrame)
        case .success(.two): (header, payloadRange) = (0..<first.count, nil)
        case .failure(let error): return .failure(MalformedMessage(error, answerWith: HeaderLayout.answerableCorrelationID(first)))
        }
        let payloadBytes = payloadRange?.count ?? secondFrameBytes
        guard payloadBytes <= limits.maximumPayloadBytes else {
            let error = BusError(.tooLarge, "payload of \(payloadBytes) bytes is over the limit of \(limits.maximumPayloadBytes)")
            return .failure(MalformedMessage(error, answerWith: HeaderLayout.answerableCorrelationID(first)))
        }
        do {
            let decoded = try HeaderCodec.decode(UnsafeRawBufferPointer(rebasing: first[header]), recent: &recentNames)
            return .success(Envelope(header: decoded, payload: payload(payloadRange)))
        } catch {
            return .failure(MalformedMessage(BusError(wrapping: error), answerWith: HeaderLayout.answerableCorrelationID(first)))
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
    /// Bytes of answers that may wait unread toward one peer before its requests are answered
    /// `busy` (the broker's socket and the Majordomo endpoint's): 32 MiB.
    public static let defaultMaximumUnreadBytesPerPeer = 32 << 20
    /// Largest payload accepted, in bytes. Default 4 MiB.
    public var maximumPayloadBytes: Int
    /// Largest header accepted, in bytes. Default 8 KiB.
    public var maximumHeaderBytes: Int

    public init(maximumPayloadBytes: Int = 4 << 20, maximumHeaderBytes: Int = HeaderCodec.maximumHeaderBytes) {
        self.maximumPayloadBytes = maximumPayloadBytes
        self.maximumHeaderBytes = maximumHeaderBytes
    }

    public static let `default` = BusLimits()
}
