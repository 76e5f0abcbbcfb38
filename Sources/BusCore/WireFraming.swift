import FoundationEssentials

/// How a message's header and payload sit in its frames (docs/PROTOCOL.md §3).
///
/// Version 4: **one frame**, the header, a 0 byte where the next optional field's tag would be,
/// then the payload to the end of the frame. Version 3 (still read for one release): **two
/// frames**, the header (its optional fields to the end of the frame), then the payload.
/// The version byte of the first frame says which; any other version is refused by the header's
/// reader, naming the versions this peer reads.
public enum WireFraming: Sendable, Hashable {
    /// Version 4: the header's bytes and the payload's, in the one frame.
    case one(header: Range<Int>, payload: Range<Int>)
    /// Version 3 (or a version this peer does not read, refused by the header's reader): the
    /// first frame is the header, the second the payload.
    case two

    /// The byte that ends a version-4 header (no optional field has tag 0).
    public static let endOfHeader: UInt8 = 0

    /// How the `frameCount` frames of one message, the first of which is `first`, are framed;
    /// `malformed` (or `tooLarge`, for a header over the limit) when the count does not fit the
    /// version or a version-4 header does not end.
    public static func of(first: UnsafeRawBufferPointer, frameCount: Int) -> Result<WireFraming, BusError> {
        if let framing = accepted(first: first, frameCount: frameCount) { return .success(framing) }
        switch version(of: first) {
        case EnvelopeHeader.currentVersion:
            guard frameCount == 1 else {
                return .failure(BusError(.malformed, "a version-4 message is one frame (header and payload), got \(frameCount)"))
            }
            if headerEnd(inFrame: first) == tooLong {
                return .failure(
                    BusError(
                        .tooLarge,
                        "header of over \(HeaderCodec.maximumHeaderBytes) bytes is over the limit of \(HeaderCodec.maximumHeaderBytes)"))
            }
            return .failure(BusError(.malformed, "a version-4 header ends with a 0 byte before the payload; the frame ends first"))
        case EnvelopeHeader.previousVersion:
            return .failure(BusError(.malformed, "a version-3 message is two frames (header, payload), got \(frameCount)"))
        default:
            // Not a header this peer reads: its reader says why (magic, version, size).
            switch frameCount {
            case 1: return .success(.one(header: 0..<first.count, payload: first.count..<first.count))
            case 2: return .success(.two)
            default: return .failure(BusError(.malformed, "expected 1 frame (header and payload), got \(frameCount)"))
            }
        }
    }

    /// The framing of a message that is well framed in version 4 or 3, found without building an
    /// error (a receiver asks it of every message); nil for anything else, which
    /// ``of(first:frameCount:)`` refuses, saying why.
    @inlinable
    public static func accepted(first: UnsafeRawBufferPointer, frameCount: Int) -> WireFraming? {
        switch (frameCount, version(of: first)) {
        case (1, EnvelopeHeader.currentVersion):
            let end = headerEnd(inFrame: first)
            return end >= 0 ? .one(header: 0..<end, payload: (end + 1)..<first.count) : nil
        case (2, EnvelopeHeader.previousVersion):
            return .two
        default:
            return nil
        }
    }

    /// The version byte of a first frame that starts with the magic, else nil.
    @inlinable
    public static func version(of first: UnsafeRawBufferPointer) -> UInt8? {
        first.count > 2 && first[0] == HeaderCodec.magic.0 && first[1] == HeaderCodec.magic.1 ? first[2] : nil
    }

    /// ``headerEnd(inFrame:)``'s answer for a header that runs past the limit.
    public static let tooLong = -2

    /// Where the 0 byte that ends the version-4 header at the start of `frame` is (the header's
    /// size): -1 when the frame ends first, ``tooLong`` past ``HeaderCodec/maximumHeaderBytes``.
    /// Reads only the lengths (every message goes through it); the header's reader checks the rest.
    @inlinable
    public static func headerEnd(inFrame frame: UnsafeRawBufferPointer) -> Int {
        let count = frame.count
        guard count >= HeaderCodec.fixedSize + 8, let base = frame.baseAddress else { return -1 }
        func length(at offset: Int) -> Int {
            Int(base.load(fromByteOffset: offset, as: UInt8.self)) << 8 | Int(base.load(fromByteOffset: offset + 1, as: UInt8.self))
        }
        var offset = HeaderCodec.fixedSize
        // The four names: a u16 length and the bytes, each.
        for _ in 0..<4 {
            guard count - offset >= 2 else { return -1 }
            offset += 2 + length(at: offset)
        }
        // Optional fields (a tag, a u16 length, the value) until the 0 byte.
        while offset < count {
            if offset > HeaderCodec.maximumHeaderBytes { return tooLong }
            if base.load(fromByteOffset: offset, as: UInt8.self) == endOfHeader { return offset }
            guard count - offset >= 3 else { return -1 }
            offset += 3 + length(at: offset + 1)
        }
        return offset > HeaderCodec.maximumHeaderBytes ? tooLong : -1
    }
}
