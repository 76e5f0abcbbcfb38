import Foundation

/// Decodes `Decodable` values from CBOR (RFC 8949) of the profile ``CBOREncoder`` writes.
///
/// It reads what any CBOR library writes for the JSON data model: integers, half, single and
/// double floats, text and byte strings, arrays, maps with text keys, booleans, null (and
/// undefined, read as null). It refuses, with `DecodingError.dataCorrupted` and never by
/// trapping: indefinite lengths, tags, other simple values, a length past the end of the input,
/// text that is not UTF-8, a map with a key twice or a key that is not text, nesting deeper than
/// ``maximumDepth``, and bytes after the item. A number is read into an integer type only when
/// it is an integer that fits (`1e20`, `nan`, `inf` and `1.5` do not; `-0.0` is 0).
public struct CBORDecoder: Sendable {
    /// Deepest nesting of arrays and maps accepted (as Foundation's JSON decoder).
    public static let maximumDepth = 512

    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        let value = try data.withUnsafeBytes { bytes in
            var reader = CBORReader(bytes: bytes)
            let value = try reader.item(depth: 0)
            guard reader.offset == bytes.count else {
                throw reader.corrupted("\(bytes.count - reader.offset) bytes after the CBOR item")
            }
            return value
        }
        return try CBORDecoding(value: value, parentPath: [], key: nil).decodeValue(T.self)
    }
}

/// Reads one data item, checking every length against what is left before it allocates.
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

    private mutating func bigEndian<T: FixedWidthInteger>(_: T.Type) throws -> T {
        let size = MemoryLayout<T>.size
        guard bytes.count - offset >= size else { throw corrupted("truncated") }
        var value: T = 0
        for index in 0..<size { value = value << 8 | T(bytes[offset + index]) }
        offset += size
        return value
    }

    /// The argument of a head whose low five bits are `info`.
    private mutating func argument(_ info: UInt8) throws -> UInt64 {
        switch info {
        case 0..<24: return UInt64(info)
        case 24: return UInt64(try byte())
        case 25: return UInt64(try bigEndian(UInt16.self))
        case 26: return UInt64(try bigEndian(UInt32.self))
        case 27: return try bigEndian(UInt64.self)
        case 31: throw corrupted("indefinite lengths are not used (send definite lengths)")
        default: throw corrupted("reserved additional information \(info)")
        }
    }

    /// A length that at least `minimumBytesEach` bytes per element must still follow.
    private mutating func length(_ info: UInt8, minimumBytesEach: Int) throws -> Int {
        let length = try argument(info)
        guard length <= UInt64(bytes.count - offset) / UInt64(minimumBytesEach) else {
            throw corrupted("a length of \(length) runs past the end of the input")
        }
        return Int(length)
    }

    private mutating func text(_ info: UInt8) throws -> String {
        let count = try length(info, minimumBytesEach: 1)
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
        guard let text = String(validUTF8: slice) else {
            throw corrupted("text string is not valid UTF-8")
        }
        offset += count
        return text
    }

    mutating func item(depth: Int) throws -> CBORValue {
        let initial = try byte()
        let info = initial & 0x1F
        switch initial >> 5 {
        case 0: return .unsigned(try argument(info))
        case 1: return .negative(try argument(info))
        case 2:
            let count = try length(info, minimumBytesEach: 1)
            defer { offset += count }
            return .bytes(Data(bytes[offset..<offset + count]))
        case 3: return .text(try text(info))
        case 4:
            guard depth < CBORDecoder.maximumDepth else { throw corrupted("nested deeper than \(CBORDecoder.maximumDepth)") }
            let count = try length(info, minimumBytesEach: 1)
            var items: [CBORValue] = []
            items.reserveCapacity(count)
            for _ in 0..<count { items.append(try item(depth: depth + 1)) }
            return .array(items)
        case 5:
            guard depth < CBORDecoder.maximumDepth else { throw corrupted("nested deeper than \(CBORDecoder.maximumDepth)") }
            let count = try length(info, minimumBytesEach: 2)
            var keys: [String] = []
            var values: [CBORValue] = []
            keys.reserveCapacity(count)
            values.reserveCapacity(count)
            var seen = count > 8 ? Set<String>(minimumCapacity: count) : nil
            for _ in 0..<count {
                let head = try byte()
                guard head >> 5 == 3 else { throw corrupted("map key of major type \(head >> 5) (keys are text strings)") }
                let key = try text(head & 0x1F)
                let repeated = seen == nil ? keys.contains(key) : !seen!.insert(key).inserted
                guard !repeated else { throw corrupted("map has the key '\(key)' twice") }
                keys.append(key)
                values.append(try item(depth: depth + 1))
            }
            return .map(keys: keys, values: values)
        case 6: throw corrupted("tags are not used (tag \(try argument(info)))")
        default:
            switch info {
            case 20: return .bool(false)
            case 21: return .bool(true)
            case 22, 23: return .null
            case 25: return .double(Double(Float16(bitPattern: try bigEndian(UInt16.self))))
            case 26: return .float(Float(bitPattern: try bigEndian(UInt32.self)))
            case 27: return .double(Double(bitPattern: try bigEndian(UInt64.self)))
            case 31: throw corrupted("a break outside an indefinite-length item")
            default: throw corrupted("simple value \(info) is not used")
            }
        }
    }
}

/// The `Decoder` handed to `init(from:)`.
struct CBORDecoding: Decoder {
    let value: CBORValue
    /// The path to the container this value is in, and its key there: the value's own path is
    /// built only when asked for (an error, a nested container), not for every field.
    let parentPath: [any CodingKey]
    let key: (any CodingKey)?

    var codingPath: [any CodingKey] { key.map { parentPath + [$0] } ?? parentPath }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .map(let keys, let values) = value else { throw mismatch([String: Int].self, value, codingPath) }
        return KeyedDecodingContainer(CBORKeyedDecoding<Key>(keys: keys, values: values, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch([Int].self, value, codingPath) }
        return CBORUnkeyedDecoding(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    /// Decodes `T` from this value: primitives directly, anything else through its `init(from:)`.
    func decodeValue<T: Decodable>(_: T.Type) throws -> T {
        // Metatype comparisons, folded away when specialised (see CBOREncoding.primitive).
        if T.self == String.self { return try decode(String.self) as! T }
        if T.self == Int.self { return try integer(Int.self) as! T }
        if T.self == Double.self { return try decode(Double.self) as! T }
        if T.self == Bool.self { return try decode(Bool.self) as! T }
        if T.self == Data.self {
            guard case .bytes(let data) = value else { throw mismatch(Data.self, value, codingPath) }
            return data as! T
        }
        if T.self == Float.self { return try decode(Float.self) as! T }
        if T.self == Int64.self { return try integer(Int64.self) as! T }
        if T.self == UInt64.self { return try integer(UInt64.self) as! T }
        if T.self == Int32.self { return try integer(Int32.self) as! T }
        if T.self == UInt32.self { return try integer(UInt32.self) as! T }
        if T.self == Int16.self { return try integer(Int16.self) as! T }
        if T.self == UInt16.self { return try integer(UInt16.self) as! T }
        if T.self == Int8.self { return try integer(Int8.self) as! T }
        if T.self == UInt8.self { return try integer(UInt8.self) as! T }
        if T.self == UInt.self { return try integer(UInt.self) as! T }
        return try T(from: self)
    }

    /// An integer that fits `T`: from an integer item, or from a float that is a whole number
    /// in range (never by trapping on `nan`, `inf` or `1e20`).
    func integer<T: FixedWidthInteger>(_: T.Type) throws -> T {
        let result: T?
        switch value {
        case .unsigned(let n): result = T(exactly: n)
        case .negative(let n): result = n <= UInt64(Int64.max) ? T(exactly: -1 - Int64(n)) : nil
        case .double(let number): result = T(exactly: number)
        case .float(let number): result = T(exactly: number)
        default: throw mismatch(T.self, value, codingPath)
        }
        guard let result else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "\(value.numberText) does not fit in \(T.self)"))
        }
        return result
    }
}

extension CBORDecoding: SingleValueDecodingContainer {
    func decodeNil() -> Bool {
        if case .null = value { return true }
        return false
    }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self, value, codingPath) }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .text(let text) = value else { throw mismatch(String.self, value, codingPath) }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        switch value {
        case .double(let number): return number
        case .float(let number): return Double(number)
        case .unsigned(let n): return Double(n)
        case .negative(let n): return -1 - Double(n)
        default: throw mismatch(Double.self, value, codingPath)
        }
    }

    func decode(_ type: Float.Type) throws -> Float {
        if case .float(let number) = value { return number }
        let number = try decode(Double.self)
        let narrowed = Float(number)
        guard narrowed.isFinite || !number.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "\(number) does not fit in Float"))
        }
        return narrowed
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self) }
}

private func mismatch(_ type: Any.Type, _ value: CBORValue, _ path: [any CodingKey]) -> DecodingError {
    DecodingError.typeMismatch(type, .init(codingPath: path, debugDescription: "expected \(type), found \(value.kindName)"))
}

extension CBORValue {
    /// A number as text, for errors.
    var numberText: String {
        switch self {
        case .unsigned(let n): "\(n)"
        case .negative(let n): "-\(n)-1"
        case .double(let number): "\(number)"
        case .float(let number): "\(number)"
        default: kindName
        }
    }

    /// What the item is, for errors.
    var kindName: String {
        switch self {
        case .unsigned, .negative: "an integer"
        case .bytes: "a byte string"
        case .text: "a text string"
        case .array: "an array"
        case .map: "a map"
        case .bool: "a boolean"
        case .null: "null"
        case .double, .float: "a float"
        }
    }
}

private struct CBORKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let keys: [String]
    let values: [CBORValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { keys.contains(key.stringValue) }

    private func value(_ key: Key) throws -> CBORValue {
        guard let index = keys.firstIndex(of: key.stringValue) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for '\(key.stringValue)'"))
        }
        return values[index]
    }

    private func decoder(_ key: Key) throws -> CBORDecoding {
        CBORDecoding(value: try value(key), parentPath: codingPath, key: key)
    }

    func decodeNil(forKey key: Key) throws -> Bool { try decoder(key).decodeNil() }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder(key).decodeValue(T.self) }

    // The common field types without the generic path (no metadata lookups or casts).
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder(key).decode(String.self) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder(key).integer(Int.self) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder(key).decode(Double.self) }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder(key).decode(Bool.self) }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let index = keys.firstIndex(of: key.stringValue) else { return nil }
        let decoder = CBORDecoding(value: values[index], parentPath: codingPath, key: key)
        return decoder.decodeNil() ? nil : try decoder.decodeValue(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder(key).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        CBORDecoding(value: keys.firstIndex(of: "super").map { values[$0] } ?? .null, parentPath: codingPath, key: CBORKey.superKey)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        CBORDecoding(value: keys.firstIndex(of: key.stringValue).map { values[$0] } ?? .null, parentPath: codingPath, key: key)
    }
}

private struct CBORUnkeyedDecoding: UnkeyedDecodingContainer {
    let items: [CBORValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    private mutating func next<T>(_ type: T.Type) throws -> CBORDecoding {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                T.self, .init(codingPath: codingPath + [CBORKey(index: currentIndex)], debugDescription: "the array has no more items"))
        }
        defer { currentIndex += 1 }
        return CBORDecoding(value: items[currentIndex], parentPath: codingPath, key: CBORKey(index: currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, case .null = items[currentIndex] else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(T.self).decodeValue(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next([String: Int].self).container(keyedBy: NestedKey.self)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next([Int].self).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { try next(Any.self) }
}
