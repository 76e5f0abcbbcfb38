/// The name of a board, e.g. `auth.login`: dot-separated segments of letters, digits, `_` and `-`.
///
/// Board ids are unique within a motherboard scope. They travel on the wire as UTF-8 in the
/// envelope header, so they are short (at most ``BoardID/maximumLength`` bytes).
public struct BoardID: Hashable, Sendable, Codable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The longest id the header accepts, in UTF-8 bytes.
    public static let maximumLength = 255

    /// The id as written, e.g. `auth.login`.
    public let rawValue: String

    /// Makes an id, checking its syntax; throws ``BusError/Code/badArgument`` when it is not valid.
    public init(validating rawValue: String) throws {
        if let problem = BoardID.problem(with: rawValue) {
            throw BusError(.badArgument, "invalid board id '\(rawValue.escapedForDisplay())': \(problem)")
        }
        self.rawValue = rawValue
    }

    /// Makes an id from a literal written in code; an invalid literal is a programming error.
    public init(stringLiteral value: String) {
        precondition(BoardID.isValid(value), "invalid board id literal '\(value)'")
        self.rawValue = value
    }

    /// Wraps a string that is already known to be valid (e.g. decoded from a checked header).
    init(unchecked rawValue: String) {
        self.rawValue = rawValue
    }

    /// Whether `text` is a well-formed board id. One pass over the bytes: it runs on every
    /// routed message.
    public static func isValid(_ text: String) -> Bool {
        var length = 0
        var previousWasDot = true  // a leading dot is as bad as two in a row
        for byte in text.utf8 {
            length += 1
            if byte == 0x2E {
                if previousWasDot { return false }
                previousWasDot = true
                continue
            }
            guard isSegmentByte(byte) else { return false }
            previousWasDot = false
        }
        return length > 0 && length <= maximumLength && !previousWasDot
    }

    /// Whether a byte may stand in a segment: an ASCII letter or digit, `_` or `-`.
    @inline(__always)
    static func isSegmentByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F || byte == 0x2D
    }

    /// Why `text` is not a valid id, for a person; nil when it is valid.
    public static func problem(with text: String) -> String? {
        guard !isValid(text) else { return nil }
        let length = text.utf8.count
        if length == 0 { return "an id cannot be empty" }
        if length > maximumLength { return "an id is at most \(maximumLength) bytes of UTF-8, this one has \(length)" }
        if let bad = text.unicodeScalars.first(where: { !($0 == "." || ($0.isASCII && isSegmentByte(UInt8($0.value)))) }) {
            return "'\(String(bad).escapedForDisplay())' is not allowed: use dot-separated segments of letters, digits, '_' and '-'"
        }
        return "a segment is empty (a leading, trailing or doubled '.'): use dot-separated segments of letters, digits, '_' and '-'"
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        if let problem = BoardID.problem(with: text) {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath, debugDescription: "invalid board id '\(text.escapedForDisplay())': \(problem)"))
        }
        self.rawValue = text
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    public static func < (lhs: BoardID, rhs: BoardID) -> Bool { lhs.rawValue < rhs.rawValue }
}

extension BoardID: PayloadSchemaProviding {
    public static var payloadSchema: PayloadSchema { PayloadSchema(type: "string", title: "BoardID") }
    public static var schemaPlaceholder: BoardID { BoardID("board") }
}
