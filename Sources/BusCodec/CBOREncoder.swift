import FoundationEssentials
import Glibc

/// Encodes `Encodable` values as CBOR (RFC 8949), the bus's compact payload format
/// (docs/PROTOCOL.md, "Payload content types").
///
/// The profile is the JSON data model in binary: a keyed container is a map with text-string
/// keys in the order they were encoded, an unkeyed container an array, integers the shortest
/// major type 0/1 head, `Double` a float64 and `Float` a float32 (so `nan`, `inf` and `-0` travel
/// as they are, which JSON cannot carry), `String` a text string, `Data` a byte string, `nil`
/// null. Lengths are always definite; no tags.
public struct CBOREncoder: Sendable {
    public init() {}

    /// Encodes `value`; a value that encodes nothing is an empty map, as `{}` in JSON.
    ///
    /// One pass writes the bytes as the value encodes itself (``CBORStream``). A value that uses
    /// its containers in an order one pass cannot follow — writing to a container after a later
    /// sibling's, setting a key twice, a super encoder written after later keys — is encoded
    /// again into a tree first (``CBOREncoding``), which allows all of Codable; both write the
    /// same bytes. Such a value's `encode(to:)` runs twice, so it must give the same result both
    /// times (as one reading a single-pass sequence would not).
    public func encode<T: Encodable>(_ value: T) throws -> Data {
        var stream = CBORStream.take()
        defer { CBORStream.giveBack(&stream) }
        try stream.encodeRoot(value)
        if let data = stream.finish() { return data }
        return CBORWriter.encode(try CBOREncoding.encodeTree(value, parentPath: [], key: nil, json: nil))
    }
}

/// What the tree encoder builds before it writes: containers are references, so that a
/// container handed out earlier can still be filled, as Codable allows.
enum CBORNode {
    case value(CBORValue)
    case array(CBORArrayNode)
    case map(CBORMapNode)
    /// A super-encoder's or nested encoder's result, read when the tree is written.
    case deferred(CBOREncoding)
}

final class CBORArrayNode {
    var items: [CBORNode] = []
}

final class CBORMapNode {
    private(set) var keys: [String] = []
    private(set) var values: [CBORNode] = []
    /// Where each key is, once there are more than ``CBORMapNode/scanned`` (a dictionary of
    /// thousands of entries would otherwise be set in quadratic time). Keyed by `String`, which
    /// takes two spellings of "é" for one key, so a hit is checked byte for byte.
    private var index: [String: Int]?
    private static let scanned = 16

    /// Sets `key`, replacing an earlier value of the same key (as JSONEncoder does). Keys are
    /// the same when their UTF-8 is (as CBOR compares them; `String`'s `==` would take two
    /// spellings of "é" for one key).
    func set(_ key: String, _ node: CBORNode) {
        if let existing = position(of: key) {
            values[existing] = node
            return
        }
        keys.append(key)
        values.append(node)
        if index != nil {
            if index![key] == nil { index![key] = keys.count - 1 }
        } else if keys.count > Self.scanned {
            var built: [String: Int] = [:]
            for (position, key) in keys.enumerated() where built[key] == nil { built[key] = position }
            index = built
        }
    }

    /// The node under `key`, for a container asked for twice.
    func node(for key: String) -> CBORNode? {
        position(of: key).map { values[$0] }
    }

    private func position(of key: String) -> Int? {
        if let index {
            // A miss is a miss for the bytes too; a hit of another spelling is looked for below.
            guard let found = index[key] else { return nil }
            if keys[found].utf8.elementsEqual(key.utf8) { return found }
        }
        return keys.firstIndex { $0.utf8.elementsEqual(key.utf8) }
    }

    var entries: Zip2Sequence<[String], [CBORNode]> { zip(keys, values) }
    var count: Int { keys.count }
}

/// The `Encoder` handed to `encode(to:)`.
final class CBOREncoding: Encoder {
    let codingPath: [any CodingKey]
    /// For a tree to be written as JSON text (``JSONPayload``): what it notes.
    let json: JSONTreeNotes?
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// What was encoded: nil until a container or a single value is asked for.
    var root: CBORNode?

    /// What it encoded; a value that encoded nothing is an empty map, as `{}` in JSON.
    var result: CBORNode { root ?? .map(CBORMapNode()) }

    init(codingPath: [any CodingKey], json: JSONTreeNotes?) {
        self.codingPath = codingPath
        self.json = json
    }

    /// Encodes `value`, under `key` in the container at `parentPath`, into a tree: primitives
    /// directly (their path is never built), anything else through its `encode(to:)`.
    static func encodeTree<T: Encodable>(_ value: T, parentPath: [any CodingKey], key: (any CodingKey)?, json: JSONTreeNotes?) throws -> CBORNode {
        try encodeNode(value, parentPath: parentPath, key: key, json: json) ?? .map(CBORMapNode())
    }

    /// As ``encodeTree(_:parentPath:key:json:)``, but nil for a value that encoded nothing
    /// (which Foundation's JSONEncoder refuses at the top level).
    static func encodeNode<T: Encodable>(_ value: T, parentPath: [any CodingKey], key: (any CodingKey)?, json: JSONTreeNotes?) throws -> CBORNode? {
        if let primitive = primitive(value) {
            if let json { try json.check(primitive) }
            return .value(primitive)
        }
        if let json, T.self == URL.self || T.self == Decimal.self { throw json.foundationNeeded() }
        let encoder = CBOREncoding(codingPath: key.map { parentPath + [$0] } ?? parentPath, json: json)
        try value.encode(to: encoder)
        return encoder.root
    }

    /// The CBOR value of a type the format maps directly (`Data` as a byte string rather than
    /// an array of numbers).
    static func primitive<T: Encodable>(_ value: T) -> CBORValue? {
        // Metatype comparisons, folded away when the call is specialised (a chain of dynamic
        // casts would cost every struct field a dozen runtime calls).
        if T.self == String.self { return .text(value as! String) }
        if T.self == Int.self { return .integer(value as! Int) }
        if T.self == Double.self { return .double(value as! Double) }
        if T.self == Bool.self { return .bool(value as! Bool) }
        if T.self == Data.self { return .bytes(value as! Data) }
        if T.self == Float.self { return .float(value as! Float) }
        if T.self == Int64.self { return .integer(value as! Int64) }
        if T.self == UInt64.self { return .unsigned(value as! UInt64) }
        if T.self == Int32.self { return .integer(value as! Int32) }
        if T.self == UInt32.self { return .unsigned(UInt64(value as! UInt32)) }
        if T.self == Int16.self { return .integer(value as! Int16) }
        if T.self == UInt16.self { return .unsigned(UInt64(value as! UInt16)) }
        if T.self == Int8.self { return .integer(value as! Int8) }
        if T.self == UInt8.self { return .unsigned(UInt64(value as! UInt8)) }
        if T.self == UInt.self { return .unsigned(UInt64(value as! UInt)) }
        return nil
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let map: CBORMapNode
        if case .map(let existing) = root {
            map = existing
        } else {
            if root != nil { _ = json?.foundationNeeded() }
            map = CBORMapNode()
            root = .map(map)
        }
        return KeyedEncodingContainer(CBORKeyedEncoding<Key>(map: map, codingPath: codingPath, json: json))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let array: CBORArrayNode
        if case .array(let existing) = root {
            array = existing
        } else {
            if root != nil { _ = json?.foundationNeeded() }
            array = CBORArrayNode()
            root = .array(array)
        }
        return CBORUnkeyedEncoding(array: array, codingPath: codingPath, json: json)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        CBORSingleValueEncoding(encoder: self)
    }

    /// The error for a 128-bit integer, which the profile does not carry (Foundation's JSON does).
    static func unsupported(_ value: Any, _ path: [any CodingKey], _ json: JSONTreeNotes?) -> any Error {
        if let json { return json.foundationNeeded() }
        return EncodingError.invalidValue(value, .init(codingPath: path, debugDescription: "\(type(of: value)) is not supported"))
    }
}

/// What a tree for JSON text (``JSONPayload``) notes while a value encodes itself: whether it
/// used what Foundation's JSONEncoder writes otherwise than the tree would — `URL` and
/// `Decimal` (a string and a number for Foundation), 128-bit integers, super encoders (whose
/// value Foundation takes when they are released), a container after a single value or
/// another kind of container, another kind of value under a key, a `nan` or infinite float.
/// Noted even where the value's own code catches the error thrown.
final class JSONTreeNotes {
    private(set) var needsFoundation = false

    /// Notes it, and returns the error to throw.
    func foundationNeeded() -> JSONPayload.FoundationNeeded {
        needsFoundation = true
        return JSONPayload.FoundationNeeded()
    }

    /// A `nan` or infinite float, which Foundation refuses as it is encoded (a later value of the
    /// same key must not hide it).
    func check(_ value: CBORValue) throws {
        switch value {
        case .double(let number) where !number.isFinite: throw foundationNeeded()
        case .float(let number) where !number.isFinite: throw foundationNeeded()
        default: return
        }
    }
}

private struct CBORKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let map: CBORMapNode
    let codingPath: [any CodingKey]
    let json: JSONTreeNotes?

    mutating func encodeNil(forKey key: Key) throws { map.set(key.stringValue, .value(.null)) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        map.set(key.stringValue, try CBOREncoding.encodeTree(value, parentPath: codingPath, key: key, json: json))
    }

    // The common field types without the generic path (no metadata lookups or casts).
    mutating func encode(_ value: String, forKey key: Key) throws { map.set(key.stringValue, .value(.text(value))) }
    mutating func encode(_ value: Int, forKey key: Key) throws { map.set(key.stringValue, .value(.integer(value))) }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        if let json { try json.check(.double(value)) }
        map.set(key.stringValue, .value(.double(value)))
    }
    mutating func encode(_ value: Bool, forKey key: Key) throws { map.set(key.stringValue, .value(.bool(value))) }
    mutating func encode(_ value: Int128, forKey key: Key) throws { throw CBOREncoding.unsupported(value, codingPath + [key], json) }
    mutating func encode(_ value: UInt128, forKey key: Key) throws { throw CBOREncoding.unsupported(value, codingPath + [key], json) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested: CBORMapNode
        let node = map.node(for: key.stringValue)
        if case .map(let existing) = node {
            nested = existing
        } else {
            // Foundation traps on another kind of value under the key.
            if node != nil { _ = json?.foundationNeeded() }
            nested = CBORMapNode()
            map.set(key.stringValue, .map(nested))
        }
        return KeyedEncodingContainer(CBORKeyedEncoding<NestedKey>(map: nested, codingPath: codingPath + [key], json: json))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested: CBORArrayNode
        let node = map.node(for: key.stringValue)
        if case .array(let existing) = node {
            nested = existing
        } else {
            if node != nil { _ = json?.foundationNeeded() }
            nested = CBORArrayNode()
            map.set(key.stringValue, .array(nested))
        }
        return CBORUnkeyedEncoding(array: nested, codingPath: codingPath + [key], json: json)
    }

    mutating func superEncoder() -> any Encoder { superEncoder(named: CBORKey.superKey) }

    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key) }

    private func superEncoder(named key: any CodingKey) -> any Encoder {
        // Foundation writes a super encoder's value when it is released.
        _ = json?.foundationNeeded()
        let encoder = CBOREncoding(codingPath: codingPath + [key], json: json)
        map.set(key.stringValue, .deferred(encoder))
        return encoder
    }
}

private struct CBORUnkeyedEncoding: UnkeyedEncodingContainer {
    let array: CBORArrayNode
    let codingPath: [any CodingKey]
    let json: JSONTreeNotes?
    var count: Int { array.items.count }

    private var nextPath: [any CodingKey] { codingPath + [CBORKey(index: count)] }

    mutating func encodeNil() throws { array.items.append(.value(.null)) }
    mutating func encode(_ value: Int128) throws { throw CBOREncoding.unsupported(value, nextPath, json) }
    mutating func encode(_ value: UInt128) throws { throw CBOREncoding.unsupported(value, nextPath, json) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        array.items.append(try CBOREncoding.encodeTree(value, parentPath: codingPath, key: CBORKey(index: count), json: json))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = CBORMapNode()
        let path = nextPath
        array.items.append(.map(nested))
        return KeyedEncodingContainer(CBORKeyedEncoding<NestedKey>(map: nested, codingPath: path, json: json))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = CBORArrayNode()
        let path = nextPath
        array.items.append(.array(nested))
        return CBORUnkeyedEncoding(array: nested, codingPath: path, json: json)
    }

    mutating func superEncoder() -> any Encoder {
        _ = json?.foundationNeeded()
        let encoder = CBOREncoding(codingPath: nextPath, json: json)
        array.items.append(.deferred(encoder))
        return encoder
    }
}

private struct CBORSingleValueEncoding: SingleValueEncodingContainer {
    let encoder: CBOREncoding
    var codingPath: [any CodingKey] { encoder.codingPath }

    mutating func encodeNil() throws { set(.value(.null)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        set(try CBOREncoding.encodeTree(value, parentPath: codingPath, key: nil, json: encoder.json))
    }

    mutating func encode(_ value: Int128) throws { throw CBOREncoding.unsupported(value, codingPath, encoder.json) }
    mutating func encode(_ value: UInt128) throws { throw CBOREncoding.unsupported(value, codingPath, encoder.json) }

    /// A second value, or a value after a container: Foundation keeps the container.
    private func set(_ node: CBORNode) {
        if encoder.root != nil { _ = encoder.json?.foundationNeeded() }
        encoder.root = node
    }
}

/// A coding key for array indices and `super`.
struct CBORKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) {
        stringValue = "\(intValue)"
        self.intValue = intValue
    }
    init(index: Int) {
        stringValue = "Index \(index)"
        intValue = index
    }

    static let superKey = CBORKey(stringValue: "super")
}

/// One decoded or to-be-written CBOR data item of the profile.
enum CBORValue {
    case unsigned(UInt64)
    /// Major type 1: the value is -1 - n.
    case negative(UInt64)
    case bytes(Data)
    case text(String)
    case array([CBORValue])
    /// Text keys, in the order they came; no key twice.
    case map(keys: [String], values: [CBORValue])
    case bool(Bool)
    case null
    case double(Double)
    case float(Float)

    static func integer<T: BinaryInteger>(_ value: T) -> CBORValue {
        value < 0 ? .negative(UInt64(-1 - Int64(value))) : .unsigned(UInt64(value))
    }
}

/// Writes CBOR heads and items into one growing `malloc` buffer that becomes the payload's
/// `Data` without a copy. The tree encoder sums the exact size first, so a 64 KiB string is
/// copied once, not into a growing array and again into a `Data`; the stream reserves before
/// each item.
struct CBORWriter {
    /// The encoding of `node` as a `Data`.
    static func encode(_ node: CBORNode) -> Data {
        let count = size(node)
        var writer = CBORWriter(capacity: count)
        writer.write(node)
        precondition(writer.offset == count, "CBOR size and encoding disagree")
        return writer.take()
    }

    private(set) var buffer: UnsafeMutableRawPointer
    private(set) var capacity: Int
    var offset = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
        guard let buffer = malloc(self.capacity) else { fatalError("out of memory for \(capacity) bytes of CBOR") }
        self.buffer = buffer
    }

    /// Room for `count` more bytes.
    mutating func reserve(_ count: Int) {
        guard offset + count > capacity else { return }
        capacity = max(capacity * 2, offset + count)
        guard let grown = realloc(buffer, capacity) else { fatalError("out of memory for \(capacity) bytes of CBOR") }
        buffer = grown
    }

    /// The bytes written, as a `Data` that frees the buffer; the writer must not be used after.
    /// A buffer larger than its bytes by more than a page is shrunk first: payloads wait in
    /// queues.
    func take() -> Data {
        if capacity - offset > 4096, let shrunk = realloc(buffer, max(offset, 1)) {
            return Data(bytesNoCopy: shrunk, count: offset, deallocator: .free)
        }
        return Data(bytesNoCopy: buffer, count: offset, deallocator: .free)
    }

    /// Frees the buffer of a writer whose bytes are not taken.
    func discard() { free(buffer) }

    static func size(_ node: CBORNode) -> Int {
        switch node {
        case .value(let value): return size(value)
        case .array(let array): return headSize(UInt64(array.items.count)) + array.items.reduce(0) { $0 + size($1) }
        case .map(let map): return headSize(UInt64(map.count)) + map.entries.reduce(0) { $0 + textSize($1.0) + size($1.1) }
        case .deferred(let encoder): return size(encoder.result)
        }
    }

    static func size(_ value: CBORValue) -> Int {
        switch value {
        case .unsigned(let n), .negative(let n): return headSize(n)
        case .bytes(let data): return headSize(UInt64(data.count)) + data.count
        case .text(let string): return textSize(string)
        case .array(let items): return headSize(UInt64(items.count)) + items.reduce(0) { $0 + size($1) }
        case .map(let keys, let values):
            return headSize(UInt64(keys.count)) + keys.reduce(0) { $0 + textSize($1) } + values.reduce(0) { $0 + size($1) }
        case .bool, .null: return 1
        case .double: return 9
        case .float: return 5
        }
    }

    private static func textSize(_ string: String) -> Int {
        let count = string.utf8.count
        return headSize(UInt64(count)) + count
    }

    static func headSize(_ argument: UInt64) -> Int {
        switch argument {
        case 0..<24: 1
        case 24...0xFF: 2
        case 0x100...0xFFFF: 3
        case 0x1_0000...0xFFFF_FFFF: 5
        default: 9
        }
    }

    mutating func write(_ node: CBORNode) {
        switch node {
        case .value(let value): write(value)
        case .array(let array):
            head(4, UInt64(array.items.count))
            for item in array.items { write(item) }
        case .map(let map):
            head(5, UInt64(map.count))
            for (key, value) in map.entries {
                text(key)
                write(value)
            }
        case .deferred(let encoder):
            write(encoder.result)
        }
    }

    mutating func write(_ value: CBORValue) {
        switch value {
        case .unsigned(let n): head(0, n)
        case .negative(let n): head(1, n)
        case .bytes(let data):
            head(2, UInt64(data.count))
            data.withUnsafeBytes { copy($0) }
        case .text(let string): text(string)
        case .array(let items):
            head(4, UInt64(items.count))
            for item in items { write(item) }
        case .map(let keys, let values):
            head(5, UInt64(keys.count))
            for (key, value) in zip(keys, values) {
                text(key)
                write(value)
            }
        case .bool(let flag): byte(flag ? 0xF5 : 0xF4)
        case .null: byte(0xF6)
        case .double(let number):
            byte(0xFB)
            bigEndian(number.bitPattern)
        case .float(let number):
            byte(0xFA)
            bigEndian(number.bitPattern)
        }
    }

    mutating func text(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            head(3, UInt64(utf8.count))
            copy(UnsafeRawBufferPointer(utf8))
        }
    }

    mutating func byte(_ value: UInt8) {
        buffer.storeBytes(of: value, toByteOffset: offset, as: UInt8.self)
        offset += 1
    }

    mutating func copy(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        (buffer + offset).copyMemory(from: base, byteCount: bytes.count)
        offset += bytes.count
    }

    /// A head in its shortest form: major type in the top three bits, then the argument.
    mutating func head(_ major: UInt8, _ argument: UInt64) {
        let type = major << 5
        switch argument {
        case 0..<24: byte(type | UInt8(argument))
        case 24...0xFF:
            byte(type | 24)
            byte(UInt8(argument))
        case 0x100...0xFFFF:
            byte(type | 25)
            bigEndian(UInt16(argument))
        case 0x1_0000...0xFFFF_FFFF:
            byte(type | 26)
            bigEndian(UInt32(argument))
        default:
            byte(type | 27)
            bigEndian(argument)
        }
    }

    private mutating func bigEndian<T: FixedWidthInteger>(_ value: T) {
        buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: T.self)
        offset += MemoryLayout<T>.size
    }
}
