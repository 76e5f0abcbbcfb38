import Synchronization

/// A W3C trace context (https://www.w3.org/TR/trace-context/): the trace a message belongs to,
/// the span that caused it, and the trace flags. It travels in the header as optional field 2
/// (25 bytes: 16 of trace id, 8 of parent span id, 1 of flags), and as text in the W3C
/// `traceparent` form `00-<32 hex>-<16 hex>-<2 hex>`.
public struct TraceContext: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The 16-byte trace id, as two big-endian halves. Never all zero.
    public var traceIDHigh: UInt64
    public var traceIDLow: UInt64
    /// The span that sent the message (the receiver's parent span). Never zero.
    public var spanID: UInt64
    /// W3C trace flags; bit 0 is "sampled".
    public var flags: UInt8
    /// The longest `tracestate` carried (``EnvelopeHeader/traceState``) (the W3C recommendation: 512 characters).
    public static let maximumStateBytes = 512

    /// Whether `state` can be carried as header field 8.
    public static func isValidState<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        (1...maximumStateBytes).contains(bytes.count) && bytes.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }
    }

    /// Size of the field's value in the header.
    public static let encodedSize = 25

    public init?(traceIDHigh: UInt64, traceIDLow: UInt64, spanID: UInt64, flags: UInt8 = 1) {
        guard traceIDHigh | traceIDLow != 0, spanID != 0 else { return nil }
        self.traceIDHigh = traceIDHigh
        self.traceIDLow = traceIDLow
        self.spanID = spanID
        self.flags = flags
    }

    /// A new trace: a random trace id and root span id, sampled.
    public static func newTrace() -> TraceContext {
        TraceContext(traceIDHigh: TraceIDs.next(), traceIDLow: TraceIDs.next() | 1, spanID: TraceIDs.next() | 1, flags: 1)!
    }

    /// The same trace, caused by a new span (a random span id): what a handler sends under.
    public func childSpan() -> TraceContext {
        var child = self
        child.spanID = TraceIDs.next() | 1
        return child
    }

    /// The trace id as 32 lowercase hex digits.
    public var traceID: String { Self.hex(traceIDHigh) + Self.hex(traceIDLow) }

    /// The span id as 16 lowercase hex digits.
    public var spanIDText: String { Self.hex(spanID) }

    /// The W3C `traceparent` text.
    public var traceparent: String {
        "00-\(traceID)-\(spanIDText)-\(String(flags >> 4, radix: 16))\(String(flags & 0xF, radix: 16))"
    }

    public var description: String { traceparent }

    /// Reads a `traceparent` (version 00; a later version's first four fields, as W3C asks).
    public init?(traceparent text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[0] != "ff", UInt8(parts[0], radix: 16) != nil,
            parts[0] != "00" || parts.count == 4,
            parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
            let high = Self.parseHex(parts[1].prefix(16)), let low = Self.parseHex(parts[1].suffix(16)),
            let span = Self.parseHex(parts[2]), let flags = Self.parseHex(parts[3])
        else { return nil }
        self.init(traceIDHigh: high, traceIDLow: low, spanID: span, flags: UInt8(flags))
    }

    /// Whether `text` is a trace id: 32 lowercase hex digits, not all zero.
    public static func isTraceID(_ text: String) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
            && text.utf8.contains { $0 != 0x30 }
    }

    /// The field's 25 bytes.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.encodedSize)
        for value in [traceIDHigh, traceIDLow, spanID] {
            withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
        }
        out.append(flags)
        return out
    }

    /// Reads the field's value; nil when it is not 25 bytes or an id is zero.
    public init?(bytes: UnsafeRawBufferPointer) {
        guard bytes.count == Self.encodedSize else { return nil }
        func word(_ offset: Int) -> UInt64 { UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        self.init(traceIDHigh: word(0), traceIDLow: word(8), spanID: word(16), flags: bytes[24])
    }

    private static func hex(_ value: UInt64) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: 16 - text.count) + text
    }

    /// Lowercase hex only (W3C forbids upper case), at most 16 digits.
    private static func parseHex(_ text: Substring) -> UInt64? {
        guard !text.isEmpty, text.count <= 16, text.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            return nil
        }
        return UInt64(text, radix: 16)
    }
}

/// Random 64-bit ids for traces and spans, as W3C asks (unpredictable enough to be unique, not a
/// secret): SplitMix64 over a counter whose start the system's generator picks once per process.
/// A few nanoseconds and no system call per id (a `getrandom` per handled message cost ~20 µs
/// of round trip on a virtual machine).
enum TraceIDs {
    private static let state = Atomic<UInt64>(SystemRandomNumberGenerator().nextValue())

    static func next() -> UInt64 {
        var z = state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension SystemRandomNumberGenerator {
    fileprivate func nextValue() -> UInt64 {
        var generator = self
        return generator.next()
    }
}

/// The trace the current task works for. A board's handler runs with the trace of the message it
/// handles (with a span id of its own), and every message the bus client sends from it carries
/// that trace unless the message names one already; `busctl --trace` starts one.
public enum BusTrace {
    @TaskLocal public static var current: TraceContext?
    /// The W3C `tracestate` that goes with ``current`` (header field 8), read only when there is a
    /// current trace. Kept apart from it so that a trace context stays a plain value, free to copy.
    @TaskLocal public static var currentState: String?
}
