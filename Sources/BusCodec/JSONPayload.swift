import FoundationEssentials
import Glibc

/// The fast path of JSON payloads: the same bytes and values as Foundation's `JSONEncoder`
/// (with `.sortedKeys`) and `JSONDecoder`, in a fraction of their time, or nil where it cannot
/// promise that — and ``PayloadCodec`` then asks Foundation.
///
/// - **Encoding** builds the CBOR encoder's tree of the value (``CBOREncoding``, which allows
///   all of Codable) and writes it as JSON text the way Foundation's writer does: keys sorted
///   by their UTF-8, `"`, `\`, `/` and control characters escaped as it escapes them, integers
///   in decimal, floats as their `description` without a trailing `.0`, `Data` as base64 text.
///   It leaves to Foundation: what ``JSONTreeNotes`` notes (`URL`, `Decimal`, 128-bit
///   integers, super encoders, containers of two kinds), a float that is `nan` or infinite, a
///   map with a key that is not ASCII (Foundation merges keys that are canonically equal, as
///   `String`'s `==` does), a value that encoded nothing, nesting deeper than 256, and any error.
/// - **Decoding** checks the text against RFC 8259 as it transcodes it into CBOR, then decodes
///   that with ``CBORDecoder``, which refuses a key twice and text that is not UTF-8, reads a
///   whole float into an integer type, and otherwise types values as Foundation's decoder does.
///   It leaves to Foundation: anything the transcoder refuses, a key in the text that is not
///   ASCII, an integer beyond 64 bits, a number that does not fit a `Double` or rounds to zero,
///   a zero with an exponent, what ``CBORInput/json`` lists, and any decode that raised an error
///   — even one the value's own code caught — so every error, and its message, is Foundation's.
///
/// Where it declines, the value is encoded or decoded again by Foundation: its `encode(to:)` or
/// `init(from:)` runs twice, so it must give the same result both times (as one reading a
/// single-pass sequence would not). A value's code that keeps an encoder or container and writes
/// to it after its `encode(to:)` returned (which Foundation drops) finds those writes in the
/// fast path's text.
///
/// Where Foundation's own result is not one value — a `[Int: V]` whose text has two spellings of
/// one number as keys (`"1"` and `"01"`) gets either value, by the order of its hashed keys —
/// the fast path gives one of Foundation's results (the last in the text).
///
/// `JSONPayloadTests` compares both with Foundation on values, texts and the edges above.
@usableFromInline
package enum JSONPayload {
    /// Thrown where the fast path cannot promise Foundation's result.
    struct FoundationNeeded: Error {}

    /// Nesting past which encoding is left to Foundation (which refuses 512).
    static let maximumDepth = 256

    /// `value` as Foundation's `JSONEncoder` with `.sortedKeys` would write it, or nil.
    @usableFromInline
    package static func encode<T: Encodable>(_ value: T) -> Data? {
        let notes = JSONTreeNotes()
        // Nil also for a value that encoded nothing: Foundation refuses it at the top level.
        guard let tree = try? CBOREncoding.encodeNode(value, parentPath: [], key: nil, json: notes), !notes.needsFoundation else {
            return nil
        }
        var writer = JSONTextWriter()
        do {
            try writer.write(tree, depth: 0)
        } catch {
            writer.discard()
            return nil
        }
        return writer.take()
    }

    /// `data` decoded as Foundation's `JSONDecoder` would decode it, or nil (also when
    /// Foundation would refuse it).
    @usableFromInline
    package static func decode<T: Decodable>(_: T.Type, from data: Data) -> T? {
        data.withUnsafeBytes { text -> T? in
            var transcoder = JSONTranscoder(text: text)
            defer { transcoder.discard() }
            guard let cbor = transcoder.transcode() else { return nil }
            return try? CBORDecoder.decode(T.self, from: cbor, json: true)
        }
    }

    /// Whether `narrowed`, a `Float` from the float64 a JSON number was parsed into, is what
    /// Foundation reads from the text with `strtof`: not when the number rounds to zero or past
    /// the largest `Float` (Foundation refuses both), nor when it lies exactly halfway between
    /// two floats (a number parsed to a double lies on the same side of every such midpoint as
    /// its text does, unless it lands on one).
    static func narrowsAsText(_ number: Double, to narrowed: Float) -> Bool {
        guard narrowed.isFinite, narrowed != 0 || number == 0 else { return false }
        let exact = Double(narrowed)
        guard exact != number else { return true }
        let neighbour = Double(number > exact ? narrowed.nextUp : narrowed.nextDown)
        return number != (exact + neighbour) / 2
    }
}

/// Scanning text sixteen bytes at a time (SSE2 on x86-64, NEON on arm64) for the bytes JSON
/// escapes.
enum ByteScan {
    /// The index of the first byte of `bytes` at or after `start` that is below 0x20 or equal to
    /// `"` or `\` (or `/` when `slash`), or `bytes.count`.
    @inline(__always)
    static func firstSpecial(in bytes: UnsafeRawBufferPointer, from start: Int, slash: Bool) -> Int {
        var index = start
        let count = bytes.count
        let space = SIMD16<UInt8>(repeating: 0x20)
        let quote = SIMD16<UInt8>(repeating: 0x22)
        let backslash = SIMD16<UInt8>(repeating: 0x5C)
        // Without `slash`, a second quote stands in for it.
        let solidus = SIMD16<UInt8>(repeating: slash ? 0x2F : 0x22)
        while index + 16 <= count {
            let chunk = bytes.loadUnaligned(fromByteOffset: index, as: SIMD16<UInt8>.self)
            let special = (chunk .< space) .| (chunk .== quote) .| (chunk .== backslash) .| (chunk .== solidus)
            if any(special) { break }
            index += 16
        }
        while index < count {
            let byte = bytes[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C || (slash && byte == 0x2F) { return index }
            index += 1
        }
        return count
    }
}

/// Writes a ``CBORNode`` tree as JSON text, as Foundation's `JSONWriter` does without
/// `.prettyPrinted` and with `.sortedKeys`.
struct JSONTextWriter {
    private var output = CBORWriter(capacity: 64)

    /// The text written, as a `Data` that owns the buffer.
    func take() -> Data { output.take() }
    func discard() { output.discard() }

    mutating func write(_ node: CBORNode, depth: Int) throws {
        switch node {
        case .value(let value): try write(value)
        case .array(let array):
            guard depth < JSONPayload.maximumDepth else { throw JSONPayload.FoundationNeeded() }
            ascii(0x5B)
            for (index, item) in array.items.enumerated() {
                if index > 0 { ascii(0x2C) }
                try write(item, depth: depth + 1)
            }
            ascii(0x5D)
        case .map(let map):
            guard depth < JSONPayload.maximumDepth else { throw JSONPayload.FoundationNeeded() }
            let keys = map.keys
            for key in keys where !key.isASCII { throw JSONPayload.FoundationNeeded() }
            ascii(0x7B)
            if keys.count == 1 {
                try entry(keys[0], map.values[0], depth: depth)
            } else {
                let order = keys.indices.sorted { keys[$0].utf8.lexicographicallyPrecedes(keys[$1].utf8) }
                for (position, index) in order.enumerated() {
                    if position > 0 { ascii(0x2C) }
                    try entry(keys[index], map.values[index], depth: depth)
                }
            }
            ascii(0x7D)
        case .deferred(let encoder):
            try write(encoder.result, depth: depth)
        }
    }

    private mutating func entry(_ key: String, _ value: CBORNode, depth: Int) throws {
        string(key)
        ascii(0x3A)
        try write(value, depth: depth + 1)
    }

    private mutating func write(_ value: CBORValue) throws {
        switch value {
        case .unsigned(let number): decimal(number, negative: false)
        case .negative(let number): decimal(number + 1, negative: true)
        case .text(let text): string(text)
        case .bytes(let data): string(data.base64EncodedString())
        case .bool(let flag): literal(flag ? "true" : "false")
        case .null: literal("null")
        case .double(let number): try float(number)
        case .float(let number): try float(number)
        case .array, .map:
            // The tree encoder makes containers nodes, never values.
            throw JSONPayload.FoundationNeeded()
        }
    }

    private mutating func float<F: BinaryFloatingPoint & CustomStringConvertible>(_ number: F) throws {
        guard number.isFinite else { throw JSONPayload.FoundationNeeded() }
        var text = number.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
    }

    private mutating func decimal(_ magnitude: UInt64, negative: Bool) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits and a sign
        withUnsafeMutableBytes(of: &digits) { buffer in
            var end = buffer.count
            var rest = magnitude
            repeat {
                end -= 1
                buffer[end] = 0x30 + UInt8(rest % 10)
                rest /= 10
            } while rest > 0
            if negative {
                end -= 1
                buffer[end] = 0x2D
            }
            raw(UnsafeRawBufferPointer(rebasing: buffer[end...]))
        }
    }

    private mutating func literal(_ text: StaticString) {
        raw(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func ascii(_ byte: UInt8) {
        output.reserve(1)
        output.byte(byte)
    }

    private mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        output.reserve(bytes.count)
        output.copy(bytes)
    }

    /// `text` quoted, escaped as Foundation escapes it: `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`, and `\u00xx` (lower-case hex) for the other control characters.
    private mutating func string(_ text: String) {
        var text = text
        text.withUTF8 { utf8 in
            let bytes = UnsafeRawBufferPointer(utf8)
            output.reserve(bytes.count + 2)
            output.byte(0x22)
            var start = 0
            while true {
                let special = ByteScan.firstSpecial(in: bytes, from: start, slash: true)
                raw(UnsafeRawBufferPointer(rebasing: bytes[start..<special]))
                guard special < bytes.count else { break }
                escape(bytes[special])
                start = special + 1
            }
            ascii(0x22)
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private mutating func escape(_ byte: UInt8) {
        output.reserve(6)
        output.byte(0x5C)
        switch byte {
        case 0x22, 0x5C, 0x2F: output.byte(byte)
        case 0x08: output.byte(UInt8(ascii: "b"))
        case 0x0C: output.byte(UInt8(ascii: "f"))
        case 0x0A: output.byte(UInt8(ascii: "n"))
        case 0x0D: output.byte(UInt8(ascii: "r"))
        case 0x09: output.byte(UInt8(ascii: "t"))
        default:
            for digit in [UInt8(ascii: "u"), 0x30, 0x30, Self.hexDigits[Int(byte >> 4)], Self.hexDigits[Int(byte & 0xF)]] { output.byte(digit) }
        }
    }
}

/// Checks JSON text (RFC 8259) and writes the same value as CBOR of the profile
/// ``CBORDecoder`` reads, or gives up (nil) on anything ``JSONPayload`` leaves to Foundation.
///
/// Text is copied as it is, unescaped where it has escapes; the decoder checks it is UTF-8.
/// Arrays and maps get a head with a four-byte count, filled in at their end. A number whose
/// value is a whole number becomes a CBOR integer when it fits 64 bits (spelled with a fraction
/// or an exponent, when it is below 2^53); `-0` becomes a float, so that a `Double` reads it as
/// `-0.0`, as Foundation does. Other numbers become float64, parsed with Swift's `Double(_:)`,
/// correctly rounded as Foundation's `strtod` is.
struct JSONTranscoder {
    private let text: UnsafeRawBufferPointer
    private var position = 0
    private var output: CBORWriter

    init(text: UnsafeRawBufferPointer) {
        self.text = text
        output = CBORWriter(capacity: text.count + 16)
    }

    /// The CBOR of the whole text, valid until ``discard()``; nil when the fast path gives up.
    mutating func transcode() -> UnsafeRawBufferPointer? {
        do {
            try value(depth: 0)
            skipWhitespace()
            guard position == text.count else { throw JSONPayload.FoundationNeeded() }
        } catch {
            return nil
        }
        return UnsafeRawBufferPointer(start: output.buffer, count: output.offset)
    }

    /// Frees the CBOR; the transcoder must not be used after.
    func discard() { output.discard() }

    private mutating func skipWhitespace() {
        while position < text.count {
            switch text[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func next() throws -> UInt8 {
        skipWhitespace()
        guard position < text.count else { throw JSONPayload.FoundationNeeded() }
        return text[position]
    }

    private mutating func expect(_ literal: StaticString) throws {
        let count = literal.utf8CodeUnitCount
        guard text.count - position >= count,
            memcmp(text.baseAddress! + position, literal.utf8Start, count) == 0
        else { throw JSONPayload.FoundationNeeded() }
        position += count
    }

    private mutating func value(depth: Int) throws {
        output.reserve(9)
        switch try next() {
        case 0x7B: try object(depth: depth)
        case 0x5B: try array(depth: depth)
        case 0x22: try string(key: false)
        case 0x74:
            try expect("true")
            output.byte(0xF5)
        case 0x66:
            try expect("false")
            output.byte(0xF4)
        case 0x6E:
            try expect("null")
            output.byte(0xF6)
        default: try number()
        }
    }

    /// A container's head with room for a four-byte count; where it is.
    private mutating func openContainer(major: UInt8, depth: Int) throws -> Int {
        guard depth < CBORDecoder.maximumDepth else { throw JSONPayload.FoundationNeeded() }
        position += 1
        let start = output.offset
        output.reserve(5)
        output.byte(major << 5 | 26)
        output.offset += 4
        return start
    }

    private func closeContainer(at start: Int, count: Int) throws {
        guard let count = UInt32(exactly: count) else { throw JSONPayload.FoundationNeeded() }
        output.buffer.storeBytes(of: count.bigEndian, toByteOffset: start + 1, as: UInt32.self)
    }

    private mutating func array(depth: Int) throws {
        try container(major: 4, close: 0x5D, depth: depth) { transcoder in try transcoder.value(depth: depth + 1) }
    }

    private mutating func object(depth: Int) throws {
        try container(major: 5, close: 0x7D, depth: depth) { transcoder in
            guard try transcoder.next() == 0x22 else { throw JSONPayload.FoundationNeeded() }
            try transcoder.string(key: true)
            guard try transcoder.next() == 0x3A else { throw JSONPayload.FoundationNeeded() }
            transcoder.position += 1
            try transcoder.value(depth: depth + 1)
        }
    }

    /// An array or an object: items (`item` reads one) separated by commas, up to `close`.
    private mutating func container(major: UInt8, close: UInt8, depth: Int, item: (inout JSONTranscoder) throws -> Void) throws {
        let start = try openContainer(major: major, depth: depth)
        var count = 0
        if try next() == close {
            position += 1
        } else {
            while true {
                try item(&self)
                count += 1
                let separator = try next()
                position += 1
                if separator == close { break }
                guard separator == 0x2C else { throw JSONPayload.FoundationNeeded() }
            }
        }
        try closeContainer(at: start, count: count)
    }

    /// The string that starts at `position` (its opening quote), as a CBOR text string. A key
    /// must be ASCII (see ``JSONPayload``).
    private mutating func string(key: Bool) throws {
        position += 1
        let start = position
        var end = ByteScan.firstSpecial(in: text, from: start, slash: false)
        guard end < text.count else { throw JSONPayload.FoundationNeeded() }
        if text[end] == 0x22 {
            // No escapes: the bytes as they are.
            let content = UnsafeRawBufferPointer(rebasing: text[start..<end])
            if key, !content.isASCII { throw JSONPayload.FoundationNeeded() }
            output.reserve(9 + content.count)
            output.head(3, UInt64(content.count))
            output.copy(content)
            position = end + 1
            return
        }
        // Escapes: unescaped into a scratch buffer first, since the head needs the length.
        var unescaped: [UInt8] = []
        unescaped.reserveCapacity(end - start + 16)
        var run = start
        while true {
            unescaped.append(contentsOf: UnsafeRawBufferPointer(rebasing: text[run..<end]))
            guard end < text.count else { throw JSONPayload.FoundationNeeded() }
            let byte = text[end]
            if byte == 0x22 { break }
            // An unescaped control character: Foundation refuses it.
            guard byte == 0x5C, end + 1 < text.count else { throw JSONPayload.FoundationNeeded() }
            end += 1
            switch text[end] {
            case 0x22, 0x5C, 0x2F: unescaped.append(text[end])
            case UInt8(ascii: "b"): unescaped.append(0x08)
            case UInt8(ascii: "f"): unescaped.append(0x0C)
            case UInt8(ascii: "n"): unescaped.append(0x0A)
            case UInt8(ascii: "r"): unescaped.append(0x0D)
            case UInt8(ascii: "t"): unescaped.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4(at: end + 1)
                end += 4
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate must be followed by an escaped low one.
                    guard end + 6 < text.count, text[end + 1] == 0x5C, text[end + 2] == UInt8(ascii: "u") else {
                        throw JSONPayload.FoundationNeeded()
                    }
                    let low = try hex4(at: end + 3)
                    guard (0xDC00..<0xE000).contains(low) else { throw JSONPayload.FoundationNeeded() }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    end += 6
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw JSONPayload.FoundationNeeded()
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw JSONPayload.FoundationNeeded() }
                unescaped.append(contentsOf: UTF8.encode(unicode)!)
            default: throw JSONPayload.FoundationNeeded()
            }
            run = end + 1
            end = ByteScan.firstSpecial(in: text, from: run, slash: false)
        }
        if key, !unescaped.withUnsafeBytes({ $0.isASCII }) { throw JSONPayload.FoundationNeeded() }
        output.reserve(9 + unescaped.count)
        output.head(3, UInt64(unescaped.count))
        unescaped.withUnsafeBytes { output.copy($0) }
        position = end + 1
    }

    /// The four hex digits at `offset`.
    private func hex4(at offset: Int) throws -> UInt32 {
        guard text.count - offset >= 4 else { throw JSONPayload.FoundationNeeded() }
        var result: UInt32 = 0
        for index in offset..<offset + 4 {
            let byte = text[index]
            let digit: UInt8
            switch byte {
            case 0x30...0x39: digit = byte - 0x30
            case 0x41...0x46: digit = byte - 0x41 + 10
            case 0x61...0x66: digit = byte - 0x61 + 10
            default: throw JSONPayload.FoundationNeeded()
            }
            result = result << 4 | UInt32(digit)
        }
        return result
    }

    /// A number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`. One whose value is a
    /// whole number that fits 64 bits is written as a CBOR integer, however it is spelled
    /// (`1.5e1`, `7.100984e+08`): read into any type, an integer is rounded once, as Foundation
    /// rounds the text.
    private mutating func number() throws {
        let start = position
        let negative = text[position] == 0x2D
        if negative { position += 1 }
        guard position < text.count, isDigit(text[position]) else { throw JSONPayload.FoundationNeeded() }
        // The digits as a whole number without its trailing zeros, times ten to `power`.
        var mantissa: UInt64 = 0
        var power = 0
        var pendingZeros = 0
        var fits = true
        func digit(_ byte: UInt8) {
            guard byte != 0x30 else {
                pendingZeros += 1
                return
            }
            for _ in 0...pendingZeros {
                let (times10, overflow) = mantissa.multipliedReportingOverflow(by: 10)
                fits = fits && !overflow
                mantissa = times10
            }
            let (sum, overflow) = mantissa.addingReportingOverflow(UInt64(byte - 0x30))
            fits = fits && !overflow
            mantissa = sum
            pendingZeros = 0
        }
        if text[position] == 0x30 {
            position += 1
        } else {
            while position < text.count, isDigit(text[position]) {
                digit(text[position])
                position += 1
            }
        }
        if position < text.count, text[position] == 0x2E {
            position += 1
            let fractionStart = position
            while position < text.count, isDigit(text[position]) {
                digit(text[position])
                power -= 1
                position += 1
            }
            guard position > fractionStart else { throw JSONPayload.FoundationNeeded() }
        }
        var hasExponent = false
        // Every digit of a fraction took one off the power.
        let hasFraction = power < 0
        if position < text.count, text[position] | 0x20 == UInt8(ascii: "e") {
            hasExponent = true
            position += 1
            var exponentSign = 1
            if position < text.count, text[position] == 0x2B || text[position] == 0x2D {
                if text[position] == 0x2D { exponentSign = -1 }
                position += 1
            }
            let exponentStart = position
            var exponent = 0
            while position < text.count, isDigit(text[position]) {
                exponent = exponent * 10 + Int(text[position] - 0x30)
                // Past any double's range: `strtod` reads the text below.
                if exponent > 100_000 {
                    exponent = 100_000
                    fits = false
                }
                position += 1
            }
            guard position > exponentStart else { throw JSONPayload.FoundationNeeded() }
            power += exponentSign * exponent
        }
        power += pendingZeros
        let spelledAsFloat = hasFraction || hasExponent
        if mantissa == 0 && fits {
            // Foundation takes some zeros with an exponent for numbers that round to zero
            // (`0e5`, not `0e55`): those are left to it.
            guard !hasExponent else { throw JSONPayload.FoundationNeeded() }
            if negative {
                float64(-0.0)
            } else {
                output.head(0, 0)
            }
            return
        }
        if fits, (0...19).contains(power) {
            var magnitude = mantissa
            for _ in 0..<power {
                let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
                fits = fits && !overflow
                magnitude = times10
            }
            // Spelled with a fraction or an exponent, Foundation reads an integer type from the
            // text's double, and refuses it when that does not fit: from 2^53 on, the double is
            // written (and left to Foundation for an integer type; see CBORInput.json).
            if spelledAsFloat, magnitude >= 1 << 53 { fits = false }
            if fits, !negative {
                output.head(0, magnitude)
                return
            }
            if fits, magnitude <= UInt64(Int64.max) + 1 {
                output.head(1, magnitude - 1)
                return
            }
        }
        let parsed = Double(Substring(decoding: UnsafeRawBufferPointer(rebasing: text[start..<position]), as: UTF8.self))
        // Foundation refuses what overflows, and what rounds to zero from digits that are not
        // all zeros.
        guard let parsed, parsed.isFinite, parsed != 0 else { throw JSONPayload.FoundationNeeded() }
        float64(parsed)
    }

    private mutating func float64(_ number: Double) {
        output.byte(0xFB)
        output.buffer.storeBytes(of: number.bitPattern.bigEndian, toByteOffset: output.offset, as: UInt64.self)
        output.offset += 8
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte &- 0x30 < 10 }
}
