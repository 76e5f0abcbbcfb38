import FoundationEssentials
import Glibc

/// ``CBOREncoder``'s one-pass encoding: bytes are written as the value encodes itself, with no
/// tree of nodes in between.
///
/// A CBOR array or map starts with its count, which Codable does not say in advance: a
/// container's head is written as one byte and set when the container closes; a count of 24 or
/// more needs a longer head, and the bytes after such heads are moved along once, at the end.
/// Containers close innermost first: writing to a container closes every container opened
/// after it.
///
/// Codable also allows what one pass cannot write: writing to a container after a later
/// sibling's was written to, a value writing into a container of its parents', a key set twice
/// (the later value wins), a super encoder written to after later keys, a value that throws
/// after writing part of itself (a caller may catch that and go on). Any of these marks the
/// stream failed; every later operation is then ignored, ``finish()`` returns nil, and the
/// encoder encodes the value again through the tree (``CBOREncoding``). Keys are compared as
/// bytes, as the tree compares them.
///
/// A stream belongs to one `encode` call on one thread: its state is exempt from the run-time
/// exclusivity checks that would otherwise cost every field of every value several calls.
final class CBORStream {
    @exclusivity(unchecked) private var writer = CBORWriter(capacity: CBORStream.writerBytes)
    /// Containers not yet closed, innermost last.
    @exclusivity(unchecked) private var open: [OpenContainer] = []
    @exclusivity(unchecked) private var lastSlot = 0
    /// The slot whose value must come next (the root, or a key or element just written), or 0.
    /// While one is pending, only that slot may write.
    @exclusivity(unchecked) private var pending = 0
    /// The index in `open` below which the value being encoded may not write (its parents').
    @exclusivity(unchecked) private var floor = 0
    @exclusivity(unchecked) private(set) var failed = false
    @exclusivity(unchecked) private var taken = false
    /// Closed containers whose head must grow (see ``close(_:)``).
    @exclusivity(unchecked) private var widened: [(head: Int, major: UInt8, count: UInt64)] = []

    /// A slot is one place a value goes (the root, a map's value, an array's element): the
    /// encoder for it and the container it opens share its number.
    private struct OpenContainer {
        let slot: Int
        /// The offset of its one-byte head.
        let head: Int
        let isMap: Bool
        var count = 0
        /// For maps: a bit per key's hash, so that most keys need no comparison with the others.
        var keyBits: UInt64 = 0
        /// For maps: the offsets of the keys after the first (which is at `head + 1`), to compare
        /// a key with without walking the values between them.
        var laterKeys: [Int] = []
        /// For maps past 16 keys: the keys.
        var keys: Set<CBORKeyBytes>?
    }

    deinit {
        if !taken { writer.discard() }
    }

    /// A stream of this thread's, reused: an encoding then allocates neither a stream nor its
    /// stack of open containers (see ``ThreadKept``).
    static func take() -> CBORStream { kept.take() ?? CBORStream() }

    /// Keeps `stream`, emptied, for the thread's next encoding, unless something still holds it
    /// (an encoder a value kept would write into the next encoding).
    static func giveBack(_ stream: inout CBORStream) { kept.giveBack(&stream) { $0.reset() } }

    private static let kept = ThreadKept<CBORStream>()

    /// Back to a new stream's state, keeping the container stack's room and, when its bytes
    /// were not taken and it is small, the writer's buffer.
    private func reset() {
        if taken || writer.capacity > Self.keptBufferBytes {
            if !taken { writer.discard() }
            writer = CBORWriter(capacity: Self.writerBytes)
        } else {
            writer.offset = 0
        }
        open.removeAll(keepingCapacity: open.capacity <= 64)
        widened.removeAll(keepingCapacity: widened.capacity <= 64)
        lastSlot = 0
        pending = 0
        floor = 0
        failed = false
        taken = false
    }

    /// The largest writer buffer a kept stream holds on to.
    private static let keptBufferBytes = 4096

    /// A new writer's buffer, which grows as the value needs.
    private static let writerBytes = 128

    func encodeRoot<T: Encodable>(_ value: T) throws {
        pending = newSlot()
        try encodeValue(value, slot: pending, path: nil)
    }

    /// The encoding, or nil when the value did something one pass cannot write.
    func finish() -> Data? {
        guard !failed, pending == 0 else { return nil }
        while let container = open.popLast() { close(container) }
        widen()
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
        // What the value opens is above its parents' containers, which it may not write to.
        let parentFloor = floor
        floor = open.count
        defer { floor = parentFloor }
        do {
            try value.encode(to: CBORStreamEncoding(stream: self, slot: slot, path: path()))
        } catch {
            // Part of it may be written; a caller that catches this and goes on would leave it.
            fail()
            throw error
        }
        if pending == slot { write(.map(keys: [], values: []), slot: slot) }
    }

    /// Writes a scalar as the pending `slot`'s value.
    func write(_ value: CBORValue, slot: Int) {
        guard !failed, slot != 0, pending == slot else { return fail() }
        pending = 0
        writer.reserve(CBORWriter.size(value))
        writer.write(value)
    }

    /// When `slot`'s value is the one that must come next: a new slot that takes its place.
    func handOver(_ slot: Int) -> Int? {
        guard !failed, slot != 0, pending == slot else { return nil }
        pending = newSlot()
        return pending
    }

    /// Opens `slot`'s container (a map or an array), or goes back to it when that slot asks for
    /// it again while it is still open (as Codable allows); false when it cannot.
    @discardableResult
    func begin(_ slot: Int, isMap: Bool) -> Bool {
        guard !failed, slot != 0 else { return false }
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
        guard !failed, pending == 0, let index = open.lastIndex(where: { $0.slot == slot }), index >= floor else {
            fail()
            return false
        }
        while open.count > index + 1 { close(open.removeLast()) }
        return true
    }

    /// Starts an element of the array `slot`: returns the slot of its value, pending, and its
    /// index in the array, or nil.
    func element(in slot: Int) -> (slot: Int, index: Int)? {
        guard reopen(slot) else { return nil }
        open[open.count - 1].count += 1
        pending = newSlot()
        return (pending, open[open.count - 1].count - 1)
    }

    /// The number of elements the array `slot` has so far, or nil when it is not open (closed,
    /// or the stream failed).
    func count(of slot: Int) -> Int? {
        guard !failed else { return nil }
        return open.last(where: { $0.slot == slot })?.count
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
        if open[index].count > 0 { open[index].laterKeys.append(writer.offset) }
        writer.reserve(CBORWriter.size(.text(key)))
        writer.text(key)
        open[index].count += 1
        pending = newSlot()
        return pending
    }

    /// Whether the map at `index` in `open` lacks `key`; notes it if so.
    private func isNewKey(_ key: UnsafeRawBufferPointer, at index: Int) -> Bool {
        if open[index].keys != nil {
            return open[index].keys!.insert(CBORKeyBytes(key)).inserted
        }
        // FNV-1a, then mixed (its top bits barely depend on the last byte): a key whose bit is
        // clear is new without a look at the others.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in key { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        let bit: UInt64 = 1 << ((hash &* 0x9E37_79B9_7F4A_7C15) >> 58)
        if open[index].keyBits & bit != 0 {
            var found = false
            forEachKey(of: open[index]) { earlier in
                found = earlier.hasSameBytes(as: key)
                return found
            }
            if found { return false }
        }
        open[index].keyBits |= bit
        if open[index].count == 16 {
            var keys = Set<CBORKeyBytes>(minimumCapacity: 32)
            forEachKey(of: open[index]) { earlier in
                keys.insert(CBORKeyBytes(earlier))
                return false
            }
            keys.insert(CBORKeyBytes(key))
            open[index].keys = keys
        }
        return true
    }

    /// Calls `body` with the bytes of each key the open map has written, until it returns true.
    /// The keys' offsets hold: no byte moves before ``finish()``.
    private func forEachKey(of map: OpenContainer, _ body: (UnsafeRawBufferPointer) -> Bool) {
        let bytes = UnsafeRawBufferPointer(start: writer.buffer, count: writer.offset)
        func visit(_ offset: Int) -> Bool {
            var reader = CBORReader(bytes: bytes, offset: offset)
            // Bytes this encoder wrote: they parse.
            guard let head = try? reader.head(), let key = try? reader.content(head) else { return true }
            return body(key)
        }
        guard map.count > 0, !visit(map.head + 1) else { return }
        for offset in map.laterKeys where visit(offset) { return }
    }

    /// Sets a closed container's head to its count. A count of 24 or more needs a longer head
    /// than the byte reserved: that waits for ``widen()``, so that no byte moves once per level.
    private func close(_ container: OpenContainer) {
        let major: UInt8 = container.isMap ? 5 : 4
        if container.count < 24 {
            writer.buffer.storeBytes(of: major << 5 | UInt8(container.count), toByteOffset: container.head, as: UInt8.self)
        } else {
            widened.append((container.head, major, UInt64(container.count)))
        }
    }

    /// Gives every container noted by ``close(_:)`` its full head, from the last to the first:
    /// the bytes after each head move once, by the room all the heads before them need.
    private func widen() {
        guard !widened.isEmpty else { return }
        // Closed innermost first; the moves need them in order.
        widened.sort { $0.head < $1.head }
        let extras = widened.map { CBORWriter.headSize($0.count) - 1 }
        let total = extras.reduce(0, +)
        let end = writer.offset
        writer.reserve(total)
        var shift = total
        var segmentEnd = end
        for index in widened.indices.reversed() {
            let (head, major, count) = widened[index]
            memmove(writer.buffer + head + 1 + shift, writer.buffer + head + 1, segmentEnd - head - 1)
            shift -= extras[index]
            writer.offset = head + shift
            writer.head(major, count)
            segmentEnd = head
        }
        writer.offset = end + total
        widened = []
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

    mutating func superEncoder() -> any Encoder { superEncoder(named: CBORKey.superKey) }

    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key) }

    /// An encoder for the value under `key`, which must be written before anything else (as
    /// `super.encode(to: container.superEncoder())` does); else the stream fails.
    private func superEncoder<Named: CodingKey>(named key: Named) -> any Encoder {
        CBORStreamEncoding(stream: stream, slot: stream.key(key.stringValue, in: slot) ?? 0, path: CBORPath(path, key))
    }
}

private struct CBORStreamUnkeyed: UnkeyedEncodingContainer {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?
    /// Elements this container value was given: its count once the stream no longer knows it
    /// (so that a loop on `count` ends even after the stream failed).
    private var given = 0

    init(stream: CBORStream, slot: Int, path: CBORPath?) {
        self.stream = stream
        self.slot = slot
        self.path = path
    }

    var codingPath: [any CodingKey] { CBORPath.keys(path) }

    /// The elements so far. Asked of a closed container, whose count one pass no longer keeps,
    /// it fails the stream (the tree answers for it: the value may act on the answer).
    var count: Int {
        if let count = stream.count(of: slot) { return count }
        stream.fail()
        return given
    }

    /// The next element's slot, pending, and its index.
    private mutating func element() -> (slot: Int, index: Int) {
        given += 1
        return stream.element(in: slot) ?? (0, given - 1)
    }

    mutating func encodeNil() throws {
        let (element, _) = element()
        stream.write(.null, slot: element)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let (element, index) = element()
        try stream.encodeValue(value, slot: element, path: CBORPath(path, index: index))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let (nested, index) = element()
        stream.begin(nested, isMap: true)
        return KeyedEncodingContainer(CBORStreamKeyed<NestedKey>(stream: stream, slot: nested, path: CBORPath(path, index: index)))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let (nested, index) = element()
        stream.begin(nested, isMap: false)
        return CBORStreamUnkeyed(stream: stream, slot: nested, path: CBORPath(path, index: index))
    }

    mutating func superEncoder() -> any Encoder {
        let (element, index) = element()
        return CBORStreamEncoding(stream: stream, slot: element, path: CBORPath(path, index: index))
    }
}

private struct CBORStreamSingle: SingleValueEncodingContainer {
    let stream: CBORStream
    let slot: Int
    let path: CBORPath?

    var codingPath: [any CodingKey] { CBORPath.keys(path) }

    mutating func encodeNil() throws { stream.write(.null, slot: slot) }

    /// A single value is written once; a second (the tree encoder keeps the last) fails the pass.
    /// The value gets a slot of its own: the encoder whose container this is cannot write in its
    /// place (the tree would drop what it wrote).
    mutating func encode<T: Encodable>(_ value: T) throws {
        guard let inner = stream.handOver(slot) else { return stream.fail() }
        try stream.encodeValue(value, slot: inner, path: path)
    }
}
