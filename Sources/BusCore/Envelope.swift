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

    /// The wire frames: the encoded header, then the payload.
    public func frames() -> [Data] {
        [Data(HeaderCodec.encode(header)), payload]
    }

    /// Parses the frames of one message, checking count, sizes and the header.
    public init(frames: [Data], limits: BusLimits = .default) throws {
        guard frames.count == 2 else {
            throw BusError(.malformed, "expected 2 frames (header, payload), got \(frames.count)")
        }
        guard frames[1].count <= limits.maximumPayloadBytes else {
            throw BusError(.tooLarge, "payload of \(frames[1].count) bytes is over the limit of \(limits.maximumPayloadBytes)")
        }
        self.header = try HeaderCodec.decode(frames[0])
        self.payload = frames[1]
    }

    /// A reply to this request, carrying its correlation id back.
    public func reply(payload: Data = Data(), source: String = "") -> Envelope {
        Envelope(
            header: EnvelopeHeader(kind: .reply, correlationID: header.correlationID, source: source, target: header.source),
            payload: payload
        )
    }

    /// An error reply to this request.
    public func errorReply(_ error: BusError, source: String = "") -> Envelope {
        Envelope(
            header: EnvelopeHeader(
                kind: .error, correlationID: header.correlationID, source: source, target: header.source,
                typeName: error.code.name
            ),
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
