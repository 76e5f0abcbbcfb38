import Foundation

/// ``CBOREncoder``'s one-pass encoding: bytes are written as the value encodes itself, with no
/// tree of nodes in between.
///
/// A CBOR array or map starts with its count, which Codable does not say in advance: a
/// container's head is written as one byte and set when the container closes; a count of 24 or
/// more (rare) moves the container's bytes along to make room for a longer head. Containers
/// close innermost first: writing to a container closes every container opened after it.
///
/// Codable also allows what one pass cannot write: writing to a container after a later
/// sibling's was written to, a key set twice (the later value wins), super encoders. Any of
/// these marks the stream failed; every later operation is then ignored, ``finish()`` returns
/// nil, and the encoder encodes the value again through the tree (``CBOREncoding``).
///
/// A stream belongs to one `encode` call on one thread: its state is exempt from the run-time
/// exclusivity checks that would otherwise cost every field of every value several calls.
final class CBORStream {
    @exclusivity(unchecked) private var writer = CBORWriter(capacity: 128)
    /// Containers not yet closed, innermost last.
    @exclusivity(unchecked) private var open: [OpenContainer] = []
    @exclusivity(unchecked) private var lastSlot = 0
    /// The slot whose value must come next (the root, or a key or element just written), or 0.
    /// While one is pending, only that slot may write.
    @exclusivity(unchecked) private var pending = 0
    @exclusivity(unchecked) private(set) var failed = false
    @exclusivity(unchecked) private var taken = false

    /// A slot is one place a value goes (the root, a map's value, an array's element): the
    /// encoder for it and the container it opens share its number.
    private struct OpenContainer {
        let slot: Int
        /// The offset of its one-byte head.
        let head: Int
        let isMap: Bool
        var count = 0
        /// For maps: a bit per key's hash, so that most keys need no scan for a duplicate.
        var keyBits: UInt64 = 0
        /// For maps past 16 keys: the keys.
        var keys: Set<String>?
    }

    deinit {
        if !taken { writer.discard() }
    }

    func encodeRoot<T: Encodable>(_ value: T) throws {
        pending = newSlot()
        try encodeValue(value, slot: pending, path: nil)
    }

    /// The encoding, or nil when the value did something one pass cannot write.
    func finish() -> Data? {
        while let container = open.popLast() { close(container) }
        guard !failed, pending == 0 else { return nil }
        taken = true
        return writer.take()
    }

    func newSlot() -> Int {
        lastSlot += 1
        return lastSlot
    }

    func fail() { failed = true }

    /// Writes the pending `slot`'s value: a primitive at once, anything else through its
    /// `encode(to:)` (a value that encodes nothing is an empty map, as `{}` in JSON).
    func encodeValue<T: Encodable>(_ value: T, slot: Int, path: @autoclosure () -> CBORPath?) throws {
        guard !failed else { return }
        if let primitive = CBOREncoding.primitive(value) {
            write(primitive, slot: slot)
            return
        }
        try value.encode(to: CBORStreamEncoding(stream: self, slot: slot, path: path()))
        if pending == slot { write(.map(keys: [], values: []), slot: slot) }
    }

    /// Writes a scalar as the pending `slot`'s value.
    func write(_ value: CBORValue, slot: Int) {
        guard !failed, pending == slot else { return fail() }
        pending = 0
        writer.reserve(CBORWriter.size(value))
        writer.write(value)
    }

    /// Whether `slot`'s value is the one that must come next.
    func isPending(_ slot: Int) -> Bool { !failed && pending == slot }

    /// Opens `slot`'s container (a map or an array), or goes back to it when that slot asks for
    /// it again while it is still open (as Codable allows); false when it cannot.
    @discardableResult
    func begin(_ slot: Int, isMap: Bool) -> Bool {
        guard !failed else { return false }
        if pending == slot {
            pending = 0
            writer.reserve(1)
            open.append(OpenContainer(slot: slot, head: writer.offset, isMap: isMap))
            writer.byte(0)
            return true
        }
        guard reopen(slot), open[open.count - 1].isMap == isMap else {
            fail()
            return false
        }
        return true
    }

    /// Makes `slot`'s container the innermost one, closing those opened after it.
    private func reopen(_ slot: Int) -> Bool {
        guard !failed, pending == 0, let index = open.lastIndex(where: { $0.slot == slot }) else {
            fail()
            return false
        }
        while open.count > index + 1 { close(open.removeLast()) }
        return true
    }

    /// Starts an element of the array `slot`: returns the slot of its value, pending, or nil.
    func element(in slot: Int) -> Int? {
        guard reopen(slot) else { return nil }
        open[open.count - 1].count += 1
        pending = newSlot()
        return pending
    }

    /// The number of elements the array `slot` has so far.
    func count(of slot: Int) -> Int {
        open.last(where: { $0.slot == slot })?.count ?? 0
    }

    /// Writes a key of the map `slot`: returns the slot of its value, pending, or nil (the key
    /// is there already: the tree encoder replaces the earlier value).
    func key(_ key: String, in slot: Int) -> Int? {
        guard reopen(slot) else { return nil }
        let index = open.count - 1
        var key = key
        let isNew = key.withUTF8 { isNewKey(UnsafeRawBufferPointer($0), at: index) }
        guard isNew else {
            fail()
            return nil
        }
        writer.reserve(CBORWriter.size(.text(key)))
        writer.text(key)
        open[index].count += 1
        pending = newSlot()
        return pending
    }

    /// Whether the map at `index` in `open` lacks `key`; notes it if so.
    private func isNewKey(_ key: UnsafeRawBufferPointer, at index: Int) -> Bool {
        if open[index].keys != nil {
            return open[index].keys!.insert(String(decoding: key, as: UTF8.self)).inserted
        }
        // FNV-1a: a key whose bit is clear is new without a look at the others.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in key { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        let bit: UInt64 = 1 << (hash & 63)
        if open[index].keyBits & bit != 0 {
            var found = false
            forEachKey(of: open[index]) { earlier in
                found = earlier.count == key.count && (key.isEmpty || memcmp(earlier.baseAddress!, key.baseAddress!, key.count) == 0)
                return found
            }
            if found { return false }
        }
        open[index].keyBits |= bit
        if open[index].count == 16 {
            var keys = Set<String>(minimumCapacity: 32)
            forEachKey(of: open[index]) { earlier in
                keys.insert(String(decoding: earlier, as: UTF8.self))
                return false
            }
            keys.insert(String(decoding: key, as: UTF8.self))
            open[index].keys = keys
        }
        return true
    }

    /// Calls `body` with the bytes of each key the open map has written, until it returns true.
    /// Its values are whole items already: every container in them has closed.
    private func forEachKey(of map: OpenContainer, _ body: (UnsafeRawBufferPointer) -> Bool) {
        var reader = CBORReader(bytes: UnsafeRawBufferPointer(start: writer.buffer, count: writer.offset), offset: map.head + 1)
        for _ in 0..<map.count {
            // Bytes this encoder wrote: they parse.
            guard let head = try? reader.head(), let key = try? reader.content(head) else { return }
            if body(key) { return }
            guard (try? reader.skip()) != nil else { return }
        }
    }

    /// Sets a closed container's head to its count, moving its items along when the count needs
    /// more than the one byte reserved.
    private func close(_ container: OpenContainer) {
        let count = UInt64(container.count)
        let extra = CBORWriter.headSize(count) - 1
        let end = writer.offset
        if extra > 0 {
            writer.reserve(extra)
            let items = writer.buffer + container.head + 1
            memmove(items + extra, items, end - container.head - 1)
        }
        writer.offset = container.head
        writer.head(container.isMap ? 5 : 4, count)
        writer.offset = end + extra
    }
}

/// The `Encoder` handed to `encode(to:)` in one pass: three words, so that passing it as
/// `any Encoder` boxes nothing.
struct CBORStreamEncoding: Encoder {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        stream.begin(slot, isMap: true)
        return KeyedEncodingContainer(CBORStreamKeyed<Key>(stream: stream, slot: slot, path: path))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        stream.begin(slot, isMap: false)
        return CBORStreamUnkeyed(stream: stream, slot: slot, path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        CBORStreamSingle(stream: stream, slot: slot, path: path)
    }
}

private struct CBORStreamKeyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }

    mutating func encodeNil(forKey key: Key) throws {
        if let value = stream.key(key.stringValue, in: slot) { stream.write(.null, slot: value) }
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        guard let slot = stream.key(key.stringValue, in: slot) else { return }
        try stream.encodeValue(value, slot: slot, path: CBORPath(path, key))
    }

    // The common field types without the generic path (no metadata lookups or casts).
    mutating func encode(_ value: String, forKey key: Key) throws {
        if let slot = stream.key(key.stringValue, in: slot) { stream.write(.text(value), slot: slot) }
    }
    mutating func encode(_ value: Int, forKey key: Key) throws {
        if let slot = stream.key(key.stringValue, in: slot) { stream.write(.integer(value), slot: slot) }
    }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        if let slot = stream.key(key.stringValue, in: slot) { stream.write(.double(value), slot: slot) }
    }
    mutating func encode(_ value: Bool, forKey key: Key) throws {
        if let slot = stream.key(key.stringValue, in: slot) { stream.write(.bool(value), slot: slot) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = stream.key(key.stringValue, in: slot) ?? 0
        stream.begin(nested, isMap: true)
        return KeyedEncodingContainer(CBORStreamKeyed<NestedKey>(stream: stream, slot: nested, path: CBORPath(path, key)))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = stream.key(key.stringValue, in: slot) ?? 0
        stream.begin(nested, isMap: false)
        return CBORStreamUnkeyed(stream: stream, slot: nested, path: CBORPath(path, key))
    }

    // A super encoder may be written to after later keys: the tree encoder's.
    mutating func superEncoder() -> any Encoder {
        stream.fail()
        return CBORStreamEncoding(stream: stream, slot: 0, path: path)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder() }
}

private struct CBORStreamUnkeyed: UnkeyedEncodingContainer {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }
    var count: Int { stream.count(of: slot) }

    mutating func encodeNil() throws {
        if let element = stream.element(in: slot) { stream.write(.null, slot: element) }
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        guard let element = stream.element(in: slot) else { return }
        let index = count - 1
        try stream.encodeValue(value, slot: element, path: CBORPath(path, index: index))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = stream.element(in: slot) ?? 0
        stream.begin(nested, isMap: true)
        return KeyedEncodingContainer(CBORStreamKeyed<NestedKey>(stream: stream, slot: nested, path: CBORPath(path, index: count - 1)))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = stream.element(in: slot) ?? 0
        stream.begin(nested, isMap: false)
        return CBORStreamUnkeyed(stream: stream, slot: nested, path: CBORPath(path, index: count - 1))
    }

    mutating func superEncoder() -> any Encoder {
        stream.fail()
        return CBORStreamEncoding(stream: stream, slot: 0, path: path)
    }
}

private struct CBORStreamSingle: SingleValueEncodingContainer {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }

    mutating func encodeNil() throws { stream.write(.null, slot: slot) }

    /// A single value is written once; a second (the tree encoder keeps the last) fails the pass.
    mutating func encode<T: Encodable>(_ value: T) throws {
        guard stream.isPending(slot) else { return stream.fail() }
        try stream.encodeValue(value, slot: slot, path: path)
    }
}
