import FoundationEssentials

/// Decodes `Decodable` values from CBOR (RFC 8949) of the profile ``CBOREncoder`` writes.
///
/// It reads what any CBOR library writes for the JSON data model: integers, half, single and
/// double floats, text and byte strings, arrays, maps with text keys, booleans, null (and
/// undefined, read as null). It refuses, with `DecodingError.dataCorrupted` and never by
/// trapping: indefinite lengths, tags, other simple values, a length past the end of the input,
/// text that is not UTF-8, a map with a key twice or a key that is not text, nesting deeper than
/// ``maximumDepth``, and bytes after the item. A number is read into an integer type only when
/// it is an integer that fits (`1e20`, `nan`, `inf` and `1.5` do not; `-0.0` is 0).
///
/// The whole input is checked first, in one pass that allocates nothing (so a malformed field
/// is refused even when the type never reads it); then values are read where they lie, without
/// building a tree of the items first. Text longer than 256 bytes is checked as UTF-8 once:
/// while it is read, or after decoding when the type did not read it. Where each array or map
/// of more than 64 bytes ends is noted while checking, so that moving past a value never walks
/// it again (else a deep input would be walked once per level). Map keys are compared as bytes,
/// as RFC 8949 compares them (two spellings of "é" are two keys).
public struct CBORDecoder: Sendable {
    /// Deepest nesting of arrays and maps accepted (as Foundation's JSON decoder).
    public static let maximumDepth = 512

    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try data.withUnsafeBytes { bytes in try Self.decode(T.self, from: bytes, json: false) }
    }

    /// Decodes `bytes`; `json` when they were transcoded from JSON text (see ``CBORInput/json``).
    static func decode<T: Decodable>(_: T.Type, from bytes: UnsafeRawBufferPointer, json: Bool) throws -> T {
        var reader = CBORReader(bytes: bytes)
        var found = CBORReader.Found()
        try reader.check(depth: 0, found: &found)
        guard reader.offset == bytes.count else {
            throw reader.corrupted("\(bytes.count - reader.offset) bytes after the CBOR item")
        }
        var input = CBORInput.take(bytes, found: found, json: json)
        // The bytes are valid only during this call: a decoder a type kept reads nothing after it.
        defer { CBORInput.giveBack(&input) }
        let decoder = CBORDecoding(input: input, offset: 0, path: nil)
        // Returned straight from the decode when there is no long text (a generic value kept
        // in a local costs value-witness calls on every payload).
        guard !found.longText.isEmpty || json else { return try decoder.decodeValue(T.self, errorPath: [], nestedPath: nil) }
        let value = try decoder.decodeValue(T.self, errorPath: [], nestedPath: nil)
        try input.checkUnreadLongText()
        // An error the value's own code caught (`try?`) may have hidden what Foundation reads.
        if json && input.failed { throw JSONPayload.FoundationNeeded() }
        return value
    }
}

/// The head of a data item: its major type, the low five bits, and their argument (a count, a
/// length, an integer, or a float's bits).
struct CBORHead {
    let major: UInt8
    let info: UInt8
    let argument: UInt64

    var isNull: Bool { major == 7 && (info == 22 || info == 23) }

    /// What the item is, for errors.
    var kindName: String {
        switch major {
        case 0, 1: "an integer"
        case 2: "a byte string"
        case 3: "a text string"
        case 4: "an array"
        case 5: "a map"
        default:
            switch info {
            case 20, 21: "a boolean"
            case 22, 23: "null"
            default: "a float"
            }
        }
    }

    /// An integer item as `F`, rounded once (as text is): -1 - n as n + 1 rounded, then negated.
    func integer<F: BinaryFloatingPoint>(as _: F.Type) -> F? {
        switch major {
        case 0: F(argument)
        case 1: argument == .max ? -0x1p64 : -F(argument + 1)
        default: nil
        }
    }

    /// The item as a `Double` when it is a number (floats as they are, integers rounded).
    var number: Double? {
        switch (major, info) {
        case (0, _), (1, _): integer(as: Double.self)
        case (7, 25): Double(Float16(bitPattern: UInt16(truncatingIfNeeded: argument)))
        case (7, 26): Double(Float(bitPattern: UInt32(truncatingIfNeeded: argument)))
        case (7, 27): Double(bitPattern: argument)
        default: nil
        }
    }

    /// A number as text, for errors.
    var numberText: String {
        switch major {
        case 0: "\(argument)"
        case 1: "-\(argument)-1"
        default: number.map { "\($0)" } ?? kindName
        }
    }
}

/// Reads data items, checking every length against what is left before it allocates.
struct CBORReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    func corrupted(_ what: String) -> DecodingError {
        DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "at byte \(offset): \(what)"))
    }

    private mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw corrupted("truncated") }
        defer { offset += 1 }
        return bytes[offset]
    }

    private mutating func bigEndian(size: Int) throws -> UInt64 {
        guard bytes.count - offset >= size else { throw corrupted("truncated") }
        var value: UInt64 = 0
        for index in 0..<size { value = value << 8 | UInt64(bytes[offset + index]) }
        offset += size
        return value
    }

    /// The next head. Indefinite lengths and reserved additional information are refused here.
    mutating func head() throws -> CBORHead {
        let initial = try byte()
        let info = initial & 0x1F
        let argument: UInt64
        switch info {
        case 0..<24: argument = UInt64(info)
        case 24: argument = UInt64(try byte())
        case 25: argument = try bigEndian(size: 2)
        case 26: argument = try bigEndian(size: 4)
        case 27: argument = try bigEndian(size: 8)
        case 31 where initial == 0xFF: throw corrupted("a break outside an indefinite-length item")
        case 31: throw corrupted("indefinite lengths are not used (send definite lengths)")
        default: throw corrupted("reserved additional information \(info)")
        }
        return CBORHead(major: initial >> 5, info: info, argument: argument)
    }

    /// The count of a head's array or map, or the length of its string, when at least
    /// `minimumBytesEach` bytes per element still follow.
    func length(_ head: CBORHead, minimumBytesEach: Int = 1) throws -> Int {
        guard head.argument <= UInt64(bytes.count - offset) / UInt64(minimumBytesEach) else {
            throw corrupted("a length of \(head.argument) runs past the end of the input")
        }
        return Int(head.argument)
    }

    /// The bytes of a string whose head was just read.
    mutating func content(_ head: CBORHead) throws -> UnsafeRawBufferPointer {
        let count = try length(head)
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    /// Text values longer than this are checked as UTF-8 when read (see ``CBORDecoder``).
    static let longText = 256
    /// Arrays and maps longer than this (in bytes) have their end noted while checking.
    static let notedContainer = 64

    /// What checking found besides errors (both empty for the usual small payload, so nothing
    /// is allocated for it).
    struct Found {
        /// The offsets of text values longer than ``longText``, not checked as UTF-8 yet.
        var longText: [Int] = []
        /// Where each nested array or map longer than ``notedContainer`` starts and ends, in
        /// order of their starts.
        var containers: [(start: Int, end: Int)] = []

        /// Notes a nested container's start, before its items are checked; its index.
        mutating func begin(_ start: Int) -> Int {
            containers.append((start, start))
            return containers.count - 1
        }

        /// Notes where the container `begin` returned `index` for ends, or forgets it when it is
        /// short (then so is everything in it, already forgotten: it is the last noted).
        mutating func end(_ index: Int, at end: Int) {
            if end - containers[index].start > CBORReader.notedContainer {
                containers[index].end = end
            } else {
                containers.removeLast()
            }
        }
    }

    /// Checks one whole item and moves past it: the profile's major types and simple values,
    /// lengths within the input, UTF-8 text, text keys each once, nesting within the limit.
    mutating func check(depth: Int, found: inout Found) throws {
        let start = offset
        let head = try head()
        switch head.major {
        case 0, 1: return
        case 2: _ = try content(head)
        case 3:
            let text = try content(head)
            if text.count > Self.longText {
                found.longText.append(start)
            } else {
                guard text.isValidUTF8 else { throw corrupted("text string is not valid UTF-8") }
            }
        case 4:
            guard depth < CBORDecoder.maximumDepth else { throw corrupted("nested deeper than \(CBORDecoder.maximumDepth)") }
            // The outermost item is never moved past.
            let noted = depth > 0 ? found.begin(start) : nil
            for _ in 0..<(try length(head)) { try check(depth: depth + 1, found: &found) }
            if let noted { found.end(noted, at: offset) }
        case 5:
            guard depth < CBORDecoder.maximumDepth else { throw corrupted("nested deeper than \(CBORDecoder.maximumDepth)") }
            let noted = depth > 0 ? found.begin(start) : nil
            try checkMap(count: try length(head, minimumBytesEach: 2), depth: depth, found: &found)
            if let noted { found.end(noted, at: offset) }
        case 6: throw corrupted("tags are not used (tag \(head.argument))")
        default:
            switch head.info {
            case 20...23, 25...27: return
            default: throw corrupted("simple value \(head.info) is not used")
            }
        }
    }

    /// A map's entries: each key text, and no key twice (compared as bytes; a set past 16 keys).
    private mutating func checkMap(count: Int, depth: Int, found: inout Found) throws {
        // Not sized by the count the input claims (at every level of nesting).
        var seen = count > 16 ? Set<CBORKeyBytes>(minimumCapacity: 32) : nil
        // Up to 16 keys: where each is, to compare the next ones with.
        var earlier = InlineArray<16, (start: Int, count: Int)>(repeating: (0, 0))
        for index in 0..<count {
            let head = try head()
            guard head.major == 3 else { throw corrupted("map key of major type \(head.major) (keys are text strings)") }
            let key = try content(head)
            guard key.isValidUTF8 else { throw corrupted("text string is not valid UTF-8") }
            let repeated: Bool
            if seen != nil {
                repeated = !seen!.insert(CBORKeyBytes(key)).inserted
            } else {
                let start = key.baseAddress.map { $0 - bytes.baseAddress! } ?? 0
                repeated = (0..<index).contains { other in
                    UnsafeRawBufferPointer(rebasing: bytes[earlier[other].start..<earlier[other].start + earlier[other].count]).hasSameBytes(as: key)
                }
                earlier[index] = (start, key.count)
            }
            guard !repeated else { throw corrupted("map has the key '\(String(decoding: key, as: UTF8.self))' twice") }
            try check(depth: depth + 1, found: &found)
        }
    }

    /// Moves past one item that ``check(depth:found:)`` accepted, walking it (see
    /// ``CBORInput/end(of:)``, which does not walk long ones).
    mutating func skip() throws {
        let head = try head()
        switch head.major {
        case 2, 3: _ = try content(head)
        case 4: for _ in 0..<(try length(head)) { try skip() }
        case 5: for _ in 0..<(try length(head, minimumBytesEach: 2)) * 2 { try skip() }
        default: return
        }
    }
}

/// The input of one `decode` call, shared by its decoders and containers. Its bytes live only
/// during the call; ``close()`` empties them, so a decoder kept past it (which `Decodable` does
/// not forbid) finds nothing to read — every read is bounds-checked — rather than freed memory.
final class CBORInput {
    /// Read on every item; one `decode` call on one thread uses it, so without run-time
    /// exclusivity checks.
    @exclusivity(unchecked) private(set) var bytes: UnsafeRawBufferPointer
    /// Bytes the input allocated itself (``null()``), freed with it.
    private let owned: UnsafeMutableRawBufferPointer?
    /// What checking found, or nil when it found nothing (the usual case).
    @exclusivity(unchecked) private var found: Found?
    /// Whether the bytes were transcoded from JSON text (``JSONPayload``). Decoding then
    /// refuses, with ``JSONPayload/FoundationNeeded``, what Foundation's JSONDecoder would read
    /// differently from the number or text it was given: `URL` and `Decimal` (which it reads
    /// from a string and a number), base64 text `Data(base64Encoded:)` refuses, 128-bit
    /// integers, an integer type from a
    /// float of 2^53 or more (which it reads through the text's double, then as a `Decimal`), a
    /// `Float` whose text a double rounding could move (which it reads with `strtof`), a key that
    /// is not ASCII and not found (it compares keys as `String`s), a super decoder of a key that
    /// is absent, and `decodeNil()` past an array's end (where it throws).
    @exclusivity(unchecked) private(set) var json: Bool
    /// Whether decoding raised an error (``failing(_:)``), even one the value's code caught.
    @exclusivity(unchecked) private(set) var failed = false

    /// Long text values and long containers (see ``CBORReader/Found``), and which of the long
    /// text values have been read (and checked).
    private final class Found {
        let longText: [Int]
        @exclusivity(unchecked) var read: [Bool]
        /// Sorted by start.
        let containers: [(start: Int, end: Int)]

        init(_ found: CBORReader.Found) {
            longText = found.longText
            read = Array(repeating: false, count: found.longText.count)
            containers = found.containers
        }

        /// What checking found, or nil when it found nothing.
        static func noting(_ found: CBORReader.Found) -> Found? {
            found.longText.isEmpty && found.containers.isEmpty ? nil : Found(found)
        }
    }

    init(_ bytes: UnsafeRawBufferPointer, found: CBORReader.Found = .init(), json: Bool = false) {
        self.bytes = bytes
        self.json = json
        owned = nil
        self.found = Found.noting(found)
    }

    /// One null item, for a super decoder whose key is absent.
    static func null() -> CBORInput {
        let byte = UnsafeMutableRawBufferPointer.allocate(byteCount: 1, alignment: 1)
        byte[0] = 0xF6
        return CBORInput(owning: byte)
    }

    private init(owning bytes: UnsafeMutableRawBufferPointer) {
        self.bytes = UnsafeRawBufferPointer(bytes)
        json = false
        owned = bytes
        found = nil
    }

    /// The offset just past the item at `offset`: a long array or map from the ends noted while
    /// checking, anything else by walking it (at most ``CBORReader/notedContainer`` bytes).
    func end(of offset: Int) throws -> Int {
        if let containers = found?.containers, !containers.isEmpty {
            let index = Self.firstIndex(in: containers.count) { containers[$0].start >= offset }
            if index < containers.count && containers[index].start == offset { return containers[index].end }
        }
        var reader = reader(at: offset)
        try reader.skip()
        return reader.offset
    }

    /// The first index below `count` for which `isAtOrPast` holds (it holds for all after it).
    private static func firstIndex(in count: Int, where isAtOrPast: (Int) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if isAtOrPast(middle) { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// Notes that decoding raised `error`, and returns it to be thrown. With ``json``, a decode
    /// that raised one is left to Foundation even when the value's own code caught it: a type
    /// that tries `URL` with `try?` must not get nil where Foundation reads a URL.
    func failing<E: Error>(_ error: E) -> E {
        failed = true
        return error
    }

    /// The error for a 128-bit integer, which the profile does not carry (Foundation's JSON does).
    func unsupported(_ type: Any.Type, _ path: [any CodingKey]) -> any Error {
        if json { return failing(JSONPayload.FoundationNeeded()) }
        return failing(DecodingError.typeMismatch(type, .init(codingPath: path, debugDescription: "\(type) is not supported")))
    }

    /// The text of the long text value at `offset`, `content` its bytes: checked as UTF-8 here.
    func readLongText(_ content: UnsafeRawBufferPointer, at offset: Int) throws -> String {
        guard let text = String(validUTF8: content) else {
            throw failing(CBORReader(bytes: bytes, offset: offset).corrupted("text string is not valid UTF-8"))
        }
        guard let found else { return text }
        let index = Self.firstIndex(in: found.longText.count) { found.longText[$0] >= offset }
        if index < found.longText.count && found.longText[index] == offset { found.read[index] = true }
        return text
    }

    /// Checks the long text values decoding did not read.
    func checkUnreadLongText() throws {
        guard let found else { return }
        for (index, offset) in found.longText.enumerated() where !found.read[index] {
            var reader = reader(at: offset)
            let text = try reader.content(try reader.head())
            guard text.isValidUTF8 else {
                throw CBORReader(bytes: bytes, offset: offset).corrupted("text string is not valid UTF-8")
            }
        }
    }

    deinit { owned?.deallocate() }

    func close() { bytes = UnsafeRawBufferPointer(start: nil, count: 0) }

    /// The thread's kept input (see ``ThreadKept``), or a new one, reading `bytes`.
    static func take(_ bytes: UnsafeRawBufferPointer, found: CBORReader.Found, json: Bool) -> CBORInput {
        guard let input = kept.take() else { return CBORInput(bytes, found: found, json: json) }
        input.bytes = bytes
        input.found = Found.noting(found)
        input.json = json
        input.failed = false
        return input
    }

    /// Closes `input` and keeps it for the thread's next decoding, unless a decoder a value kept
    /// still holds it (which must then go on finding nothing to read).
    static func giveBack(_ input: inout CBORInput) {
        input.close()
        kept.giveBack(&input) { $0.found = nil }
    }

    private static let kept = ThreadKept<CBORInput>()

    func reader(at offset: Int) -> CBORReader { CBORReader(bytes: bytes, offset: offset) }

    /// The head of the item at `offset`, and the offset just past that head.
    func head(at offset: Int) throws -> (CBORHead, Int) {
        var reader = reader(at: offset)
        let head = try reader.head()
        return (head, reader.offset)
    }
}

/// A coding path as a chain from the innermost key outwards: a field's path is built only when
/// asked for (an error, `codingPath`), and a nested value adds one link, not a copy of the array.
/// An array index is kept as a number and named only when the path is built.
final class CBORPath {
    let parent: CBORPath?
    private let key: (any CodingKey)?
    private let index: Int

    init(_ parent: CBORPath?, _ key: any CodingKey) {
        self.parent = parent
        self.key = key
        index = 0
    }

    init(_ parent: CBORPath?, index: Int) {
        self.parent = parent
        key = nil
        self.index = index
    }

    static func keys(_ path: CBORPath?) -> [any CodingKey] {
        var keys: [any CodingKey] = []
        var link = path
        while let current = link {
            keys.append(current.key ?? CBORKey(index: current.index))
            link = current.parent
        }
        return keys.reversed()
    }
}

/// The `Decoder` handed to `init(from:)`: the item at `offset`. Three words, so that passing it
/// as `any Decoder` boxes nothing.
struct CBORDecoding: Decoder {
    let input: CBORInput
    let offset: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        let (head, entries) = try input.head(at: offset)
        guard head.major == 5 else { throw input.failing(mismatch([String: Int].self, head, codingPath)) }
        return KeyedDecodingContainer(try CBORKeyedDecoding<Key>(input: input, entries: entries, count: Int(head.argument), path: path))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (head, items) = try input.head(at: offset)
        guard head.major == 4 else { throw input.failing(mismatch([Int].self, head, codingPath)) }
        return CBORUnkeyedDecoding(input: input, path: path, count: Int(head.argument), offset: items)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    /// Decodes `T` from this item: primitives directly, anything else through its `init(from:)`
    /// with a decoder whose path is `nestedPath` (built only then); errors name `errorPath`
    /// (built only for an error).
    func decodeValue<T: Decodable>(
        _: T.Type, errorPath: @autoclosure () -> [any CodingKey], nestedPath: @autoclosure () -> CBORPath?
    ) throws -> T {
        // Metatype comparisons, folded away when specialised (see CBOREncoding.primitive).
        if T.self == String.self { return try text(errorPath()) as! T }
        if T.self == Int.self { return try integer(Int.self, errorPath()) as! T }
        if T.self == Double.self { return try double(errorPath()) as! T }
        if T.self == Bool.self { return try bool(errorPath()) as! T }
        if T.self == Data.self {
            if input.json {
                // Foundation reads base64 text, with `Data(base64Encoded:)` when its own faster
                // reader refuses it: what that refuses too is Foundation's to report.
                guard let data = Data(base64Encoded: try text(errorPath())) else { throw input.failing(JSONPayload.FoundationNeeded()) }
                return data as! T
            }
            let (head, start) = try input.head(at: offset)
            guard head.major == 2 else { throw input.failing(mismatch(Data.self, head, errorPath())) }
            var reader = input.reader(at: start)
            return Data(try reader.content(head)) as! T
        }
        if T.self == Float.self { return try float(errorPath()) as! T }
        if T.self == Int64.self { return try integer(Int64.self, errorPath()) as! T }
        if T.self == UInt64.self { return try integer(UInt64.self, errorPath()) as! T }
        if T.self == Int32.self { return try integer(Int32.self, errorPath()) as! T }
        if T.self == UInt32.self { return try integer(UInt32.self, errorPath()) as! T }
        if T.self == Int16.self { return try integer(Int16.self, errorPath()) as! T }
        if T.self == UInt16.self { return try integer(UInt16.self, errorPath()) as! T }
        if T.self == Int8.self { return try integer(Int8.self, errorPath()) as! T }
        if T.self == UInt8.self { return try integer(UInt8.self, errorPath()) as! T }
        if T.self == UInt.self { return try integer(UInt.self, errorPath()) as! T }
        if input.json, T.self == URL.self || T.self == Decimal.self { throw input.failing(JSONPayload.FoundationNeeded()) }
        return try T(from: CBORDecoding(input: input, offset: offset, path: nestedPath()))
    }

    func isNull() throws -> Bool { try input.head(at: offset).0.isNull }

    func bool(_ errorPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        let (head, _) = try input.head(at: offset)
        guard head.major == 7, head.info == 20 || head.info == 21 else { throw input.failing(mismatch(Bool.self, head, errorPath())) }
        return head.info == 21
    }

    func text(_ errorPath: @autoclosure () -> [any CodingKey]) throws -> String {
        let (head, start) = try input.head(at: offset)
        guard head.major == 3 else { throw input.failing(mismatch(String.self, head, errorPath())) }
        var reader = input.reader(at: start)
        let content = try reader.content(head)
        if content.count > CBORReader.longText { return try input.readLongText(content, at: offset) }
        // Checked as UTF-8 before decoding began.
        return String(decoding: content, as: UTF8.self)
    }

    func double(_ errorPath: @autoclosure () -> [any CodingKey]) throws -> Double {
        let (head, _) = try input.head(at: offset)
        guard let number = head.number else { throw input.failing(mismatch(Double.self, head, errorPath())) }
        return number
    }

    func float(_ errorPath: @autoclosure () -> [any CodingKey]) throws -> Float {
        let (head, _) = try input.head(at: offset)
        if head.major == 7 && head.info == 26 { return Float(bitPattern: UInt32(truncatingIfNeeded: head.argument)) }
        // Integers rounded once, straight to Float.
        if let integer = head.integer(as: Float.self) { return integer }
        guard let number = head.number else { throw input.failing(mismatch(Float.self, head, errorPath())) }
        let narrowed = Float(number)
        if input.json, !JSONPayload.narrowsAsText(number, to: narrowed) { throw input.failing(JSONPayload.FoundationNeeded()) }
        guard narrowed.isFinite || !number.isFinite else {
            throw input.failing(DecodingError.dataCorrupted(.init(codingPath: errorPath(), debugDescription: "\(number) does not fit in Float")))
        }
        return narrowed
    }

    /// An integer that fits `T`: from an integer item, or from a float that is a whole number
    /// in range (never by trapping on `nan`, `inf` or `1e20`).
    func integer<T: FixedWidthInteger>(_: T.Type, _ errorPath: @autoclosure () -> [any CodingKey]) throws -> T {
        let (head, _) = try input.head(at: offset)
        let result: T?
        switch head.major {
        case 0: result = T(exactly: head.argument)
        case 1: result = head.argument <= UInt64(Int64.max) ? T(exactly: -1 - Int64(head.argument)) : nil
        default:
            guard head.major == 7, let number = head.number else { throw input.failing(mismatch(T.self, head, errorPath())) }
            if input.json, !(number.magnitude < 0x1p53) { throw input.failing(JSONPayload.FoundationNeeded()) }
            result = T(exactly: number)
        }
        guard let result else {
            throw input.failing(
                DecodingError.dataCorrupted(.init(codingPath: errorPath(), debugDescription: "\(head.numberText) does not fit in \(T.self)")))
        }
        return result
    }
}

extension CBORDecoding: SingleValueDecodingContainer {
    func decodeNil() -> Bool { (try? isNull()) ?? false }
    func decode(_ type: Bool.Type) throws -> Bool { try bool(codingPath) }
    func decode(_ type: String.Type) throws -> String { try text(codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try double(codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try float(codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try integer(Int.self, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self, codingPath) }
    func decode(_ type: Int128.Type) throws -> Int128 { throw input.unsupported(Int128.self, codingPath) }
    func decode(_ type: UInt128.Type) throws -> UInt128 { throw input.unsupported(UInt128.self, codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self, errorPath: codingPath, nestedPath: path) }
}

private func mismatch(_ type: Any.Type, _ head: CBORHead, _ path: [any CodingKey]) -> DecodingError {
    DecodingError.typeMismatch(type, .init(codingPath: path, debugDescription: "expected \(type), found \(head.kindName)"))
}

/// A map's entries, read where they lie. A field is found by comparing its key's UTF-8 with the
/// keys' bytes, scanning from the first entry; maps of more than 12 entries are indexed once.
private struct CBORKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let input: CBORInput
    /// The offset of the first key.
    let entries: Int
    let count: Int
    let path: CBORPath?
    /// The offset of each value by its key's bytes, for larger maps.
    private let index: [CBORKeyBytes: Int]?

    init(input: CBORInput, entries: Int, count: Int, path: CBORPath?) throws {
        self.input = input
        self.entries = entries
        self.count = count
        self.path = path
        guard count > 12 else {
            index = nil
            return
        }
        // Not sized by the count the input claims (checking bounded it by bytes, not by memory).
        var index: [CBORKeyBytes: Int] = .init(minimumCapacity: Swift.min(count, 1024))
        try Self.forEachEntry(input: input, entries: entries, count: count) { key, value in
            index[CBORKeyBytes(key)] = value
            return false
        }
        self.index = index
    }

    var codingPath: [any CodingKey] { CBORPath.keys(path) }

    /// Calls `body` with each key's bytes and its value's offset until it returns true.
    private static func forEachEntry(
        input: CBORInput, entries: Int, count: Int, _ body: (UnsafeRawBufferPointer, Int) throws -> Bool
    ) throws {
        var reader = input.reader(at: entries)
        for _ in 0..<count {
            let key = try reader.content(try reader.head())
            if try body(key, reader.offset) { return }
            reader.offset = try input.end(of: reader.offset)
        }
    }

    /// The offset of `key`'s value, or nil: the key whose UTF-8 is the same bytes. With JSON, a
    /// key that is not ASCII and not found is left to Foundation, which compares keys as
    /// `String`s ("\u{212A}", the Kelvin sign, is "K" to it).
    private func offset<Named: CodingKey>(of key: Named) throws -> Int? {
        var name = key.stringValue
        var found: Int?
        if let index {
            found = name.withUTF8 { index[CBORKeyBytes(UnsafeRawBufferPointer($0))] }
        } else {
            try name.withUTF8 { utf8 in
                let wanted = UnsafeRawBufferPointer(utf8)
                try Self.forEachEntry(input: input, entries: entries, count: count) { key, value in
                    guard key.hasSameBytes(as: wanted) else { return false }
                    found = value
                    return true
                }
            }
        }
        if found == nil, input.json, !name.isASCII { _ = input.failing(JSONPayload.FoundationNeeded()) }
        return found
    }

    private func decoder(_ key: Key) throws -> CBORDecoding {
        guard let offset = try offset(of: key) else {
            throw input.failing(DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for '\(key.stringValue)'")))
        }
        return CBORDecoding(input: input, offset: offset, path: path)
    }

    /// A decoder for a nested value, whose own path ends with `key`.
    private func nested(_ key: Key) throws -> CBORDecoding {
        let decoder = try decoder(key)
        return CBORDecoding(input: input, offset: decoder.offset, path: CBORPath(path, key))
    }

    var allKeys: [Key] {
        var keys: [Key] = []
        try? Self.forEachEntry(input: input, entries: entries, count: count) { key, _ in
            if let key = Key(stringValue: String(decoding: key, as: UTF8.self)) { keys.append(key) }
            return false
        }
        return keys
    }

    func contains(_ key: Key) -> Bool { ((try? offset(of: key)) ?? nil) != nil }

    func decodeNil(forKey key: Key) throws -> Bool { try decoder(key).isNull() }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decoder(key).decodeValue(T.self, errorPath: codingPath + [key], nestedPath: CBORPath(path, key))
    }

    // The common field types without the generic path (no metadata lookups or casts).
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder(key).text(codingPath + [key]) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder(key).integer(Int.self, codingPath + [key]) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder(key).double(codingPath + [key]) }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder(key).bool(codingPath + [key]) }
    func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { throw input.unsupported(Int128.self, codingPath + [key]) }
    func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { throw input.unsupported(UInt128.self, codingPath + [key]) }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let offset = try offset(of: key) else { return nil }
        let decoder = CBORDecoding(input: input, offset: offset, path: path)
        return try decoder.isNull() ? nil : try decoder.decodeValue(T.self, errorPath: codingPath + [key], nestedPath: CBORPath(path, key))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try nested(key).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try nested(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { try superDecoder(named: CBORKey.superKey) }

    func superDecoder(forKey key: Key) throws -> any Decoder { try superDecoder(named: key) }

    /// The value under `key`, or null when there is none (as Foundation's JSON decoder).
    private func superDecoder<Named: CodingKey>(named key: Named) throws -> any Decoder {
        guard let found = try offset(of: key) else {
            if input.json { _ = input.failing(JSONPayload.FoundationNeeded()) }
            return CBORDecoding(input: .null(), offset: 0, path: CBORPath(path, key))
        }
        return CBORDecoding(input: input, offset: found, path: CBORPath(path, key))
    }
}

private struct CBORUnkeyedDecoding: UnkeyedDecodingContainer {
    let input: CBORInput
    let path: CBORPath?
    let itemCount: Int
    var currentIndex = 0
    /// The offset of the next item.
    var offset: Int

    init(input: CBORInput, path: CBORPath?, count: Int, offset: Int) {
        self.input = input
        self.path = path
        self.itemCount = count
        self.offset = offset
    }

    var codingPath: [any CodingKey] { CBORPath.keys(path) }
    var count: Int? { itemCount }
    var isAtEnd: Bool { currentIndex >= itemCount }

    /// The next item; the container moves past it only once it is read (``advance(_:)``), as
    /// Foundation's does: a type may read an item again as something else after an error.
    private func peek<T>(_ type: T.Type) throws -> CBORDecoding {
        guard !isAtEnd else {
            throw input.failing(
                DecodingError.valueNotFound(
                    T.self, .init(codingPath: codingPath + [CBORKey(index: currentIndex)], debugDescription: "the array has no more items")))
        }
        return CBORDecoding(input: input, offset: offset, path: path)
    }

    /// Moves past the item just read, returning what was read from it.
    private mutating func advance<T>(_ value: T) throws -> T {
        offset = try input.end(of: offset)
        currentIndex += 1
        return value
    }

    private var itemPath: [any CodingKey] { codingPath + [CBORKey(index: currentIndex)] }

    mutating func decodeNil() throws -> Bool {
        // Foundation throws at the end: left to it with JSON.
        if isAtEnd, input.json { throw input.failing(JSONPayload.FoundationNeeded()) }
        guard !isAtEnd, try CBORDecoding(input: input, offset: offset, path: path).isNull() else { return false }
        return try advance(true)
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try advance(try peek(T.self).decodeValue(T.self, errorPath: itemPath, nestedPath: CBORPath(path, index: currentIndex)))
    }

    mutating func decode(_ type: String.Type) throws -> String { try advance(try peek(String.self).text(itemPath)) }
    mutating func decode(_ type: Int.Type) throws -> Int { try advance(try peek(Int.self).integer(Int.self, itemPath)) }
    mutating func decode(_ type: Double.Type) throws -> Double { try advance(try peek(Double.self).double(itemPath)) }
    mutating func decode(_ type: Int128.Type) throws -> Int128 { throw input.unsupported(Int128.self, itemPath) }
    mutating func decode(_ type: UInt128.Type) throws -> UInt128 { throw input.unsupported(UInt128.self, itemPath) }

    /// As Foundation's: nil for null, and nil past the end too, moving on either way.
    private mutating func ifPresent<T: Decodable>(_ type: T.Type) throws -> T? {
        if isAtEnd {
            currentIndex += 1
            return nil
        }
        if try decodeNil() { return nil }
        return try decode(T.self)
    }

    mutating func decodeIfPresent<T: Decodable>(_ type: T.Type) throws -> T? { try ifPresent(T.self) }
    mutating func decodeIfPresent(_ type: Bool.Type) throws -> Bool? { try ifPresent(Bool.self) }
    mutating func decodeIfPresent(_ type: String.Type) throws -> String? { try ifPresent(String.self) }
    mutating func decodeIfPresent(_ type: Double.Type) throws -> Double? { try ifPresent(Double.self) }
    mutating func decodeIfPresent(_ type: Float.Type) throws -> Float? { try ifPresent(Float.self) }
    mutating func decodeIfPresent(_ type: Int.Type) throws -> Int? { try ifPresent(Int.self) }
    mutating func decodeIfPresent(_ type: Int8.Type) throws -> Int8? { try ifPresent(Int8.self) }
    mutating func decodeIfPresent(_ type: Int16.Type) throws -> Int16? { try ifPresent(Int16.self) }
    mutating func decodeIfPresent(_ type: Int32.Type) throws -> Int32? { try ifPresent(Int32.self) }
    mutating func decodeIfPresent(_ type: Int64.Type) throws -> Int64? { try ifPresent(Int64.self) }
    mutating func decodeIfPresent(_ type: Int128.Type) throws -> Int128? { try ifPresent(Int128.self) }
    mutating func decodeIfPresent(_ type: UInt.Type) throws -> UInt? { try ifPresent(UInt.self) }
    mutating func decodeIfPresent(_ type: UInt8.Type) throws -> UInt8? { try ifPresent(UInt8.self) }
    mutating func decodeIfPresent(_ type: UInt16.Type) throws -> UInt16? { try ifPresent(UInt16.self) }
    mutating func decodeIfPresent(_ type: UInt32.Type) throws -> UInt32? { try ifPresent(UInt32.self) }
    mutating func decodeIfPresent(_ type: UInt64.Type) throws -> UInt64? { try ifPresent(UInt64.self) }
    mutating func decodeIfPresent(_ type: UInt128.Type) throws -> UInt128? { try ifPresent(UInt128.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let item = try peek([String: Int].self)
        return try advance(
            try CBORDecoding(input: input, offset: item.offset, path: CBORPath(path, index: currentIndex)).container(keyedBy: NestedKey.self))
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let item = try peek([Int].self)
        return try advance(try CBORDecoding(input: input, offset: item.offset, path: CBORPath(path, index: currentIndex)).unkeyedContainer())
    }

    mutating func superDecoder() throws -> any Decoder {
        let item = try peek(Any.self)
        return try advance(CBORDecoding(input: input, offset: item.offset, path: CBORPath(path, index: currentIndex)))
    }
}

/// A map key as its UTF-8 bytes, for sets and indexes: equal when the bytes are, hashed over all
/// of them (`Data` hashes only its first 80 bytes, so keys sharing a long prefix would all
/// collide).
struct CBORKeyBytes: Hashable {
    let bytes: [UInt8]

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = Array(bytes) }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}
