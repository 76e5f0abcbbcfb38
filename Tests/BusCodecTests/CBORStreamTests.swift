import BoardBusTestSupport
import Foundation
import Testing

@testable import BusCodec
@testable import BusCore

/// The one-pass encoder and the in-place decoder against the tree encoder they replace on the
/// common path: the same bytes, the tree's meaning where one pass cannot follow, and errors
/// that name where they happened.
@Suite("CBOR in one pass")
struct CBORStreamTests {
    /// What the tree encoder writes (the reference: it allows all of Codable).
    func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

    func tree<T: Encodable>(_ value: T) throws -> Data {
        CBORWriter.encode(try CBOREncoding.encodeTree(value, parentPath: [], key: nil, json: nil))
    }

    /// Whether one pass wrote `value` (true) or had to leave it to the tree (false).
    func onePass<T: Encodable>(_ value: T) throws -> Bool {
        let stream = CBORStream()
        try stream.encodeRoot(value)
        return stream.finish() != nil
    }

    struct Item: Codable, Equatable {
        var n: Int
        var tags: [String]
    }

    struct Nested: Codable, Equatable {
        var items: [Item]
        var byName: [String: Item]
        var empty: [Int] = []
        var nothing: CBORTests.Everything? = nil
        var after = "after the containers"
    }

    /// Counts at every head-size boundary, as arrays and as maps nested between other items, so
    /// that a container whose count outgrows its one-byte head moves what follows correctly.
    @Test func writesTheTreesBytesAtEveryCountBoundary() throws {
        for count in [0, 1, 23, 24, 25, 255, 256, 65_535, 65_536] {
            let numbers = Array(0..<count)
            #expect(try CBOREncoder().encode(numbers) == tree(numbers), "array of \(count)")
            #expect(try onePass(numbers))
            let names = Dictionary(uniqueKeysWithValues: (0..<min(count, 300)).map { ("k\($0)", $0) })
            let nested = Nested(
                items: [Item(n: count, tags: numbers.prefix(30).map(String.init))],
                byName: Dictionary(uniqueKeysWithValues: names.keys.map { ($0, Item(n: names[$0]!, tags: [])) }))
            let encoded = try CBOREncoder().encode(nested)
            #expect(encoded == (try tree(nested)), "nested with \(count)")
            #expect(try onePass(nested))
            #expect(try CBORDecoder().decode(Nested.self, from: encoded) == nested)
        }
        let everything = CBORTests.Everything()
        #expect(try CBOREncoder().encode(everything) == tree(everything))
        #expect(try onePass(everything))
        // A value that encodes nothing, at the top and inside: an empty map.
        #expect(try CBOREncoder().encode([Empty(), Empty()]) == Data([0x82, 0xA0, 0xA0]))
    }

    /// Encodes `keys` in order into one map (the same key may come twice).
    struct Keys: Encodable {
        var keys: [(String, Int)]
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CBORKey.self)
            for (key, value) in keys { try container.encode(value, forKey: CBORKey(stringValue: key)) }
        }
    }

    /// A key set twice: the later value wins, as with Foundation's JSON encoder; one pass cannot
    /// replace what it wrote, so it leaves the value to the tree — found by the hash bits and
    /// a scan in a small map, and by the set past 16 keys.
    @Test func aKeySetTwiceKeepsTheLaterValue() throws {
        for count in [2, 5, 16, 17, 40] {
            var keys = (0..<count).map { ("key\($0)", $0) }
            #expect(try onePass(Keys(keys: keys)))
            keys.append(("key1", -1))
            #expect(try !onePass(Keys(keys: keys)), "\(count) keys")
            let decoded = try CBORDecoder().decode([String: Int].self, from: CBOREncoder().encode(Keys(keys: keys)))
            #expect(decoded.count == count)
            #expect(decoded["key1"] == -1)
        }
        // Different keys with equal hash bits are not taken for one another.
        let many = (0..<200).map { ("\($0)", $0) }
        #expect(try onePass(Keys(keys: many)))
        #expect(try CBORDecoder().decode([String: Int].self, from: CBOREncoder().encode(Keys(keys: many))).count == 200)
    }

    enum Field: String, CodingKey { case a, b, x, y, base }

    /// Throws after writing part of itself.
    struct Refuses: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            var nested = container.nestedUnkeyedContainer(forKey: .a)
            try nested.encode(1)
            throw EncodingError.invalidValue(1, .init(codingPath: nested.codingPath, debugDescription: "no"))
        }
    }

    /// Writes to a nested container after its later sibling was opened.
    struct OutOfOrder: Encodable {
        func encode(to encoder: any Encoder) throws {
            var outer = encoder.container(keyedBy: Field.self)
            var a = outer.nestedContainer(keyedBy: Field.self, forKey: .a)
            var b = outer.nestedUnkeyedContainer(forKey: .b)
            try b.encode(2)
            try a.encode(1, forKey: .x)
            try b.encode(3)
        }
    }

    /// Asks its encoder for the same container twice while it is open (Codable allows it).
    struct AskedTwice: Encodable {
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: Field.self)
            try first.encode(1, forKey: .a)
            var second = encoder.container(keyedBy: Field.self)
            try second.encode(2, forKey: .b)
            try first.encode(3, forKey: .x)
        }
    }

    class Base: Encodable {
        var base = 1
    }

    final class Derived: Base {
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            try super.encode(to: container.superEncoder())
            try container.encode(2, forKey: .x)
        }
    }

    /// Takes a super encoder, writes a later key, then writes to the super encoder.
    struct LateSuper: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            let base = container.superEncoder()
            try container.encode(2, forKey: .x)
            var inner = base.container(keyedBy: Field.self)
            try inner.encode(1, forKey: .x)
        }
    }

    /// Encodes a single value twice (the tree keeps the last).
    struct TwiceSingle: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode("first")
            try container.encode("second")
        }
    }

    @Test func whatOnePassCannotFollowIsEncodedThroughTheTree() throws {
        struct Decoded: Decodable, Equatable {
            struct A: Decodable, Equatable { var x: Int }
            var a: A
            var b: [Int]
        }
        #expect(try !onePass(OutOfOrder()))
        #expect(try CBOREncoder().encode(OutOfOrder()) == tree(OutOfOrder()))
        #expect(try CBORDecoder().decode(Decoded.self, from: CBOREncoder().encode(OutOfOrder())) == Decoded(a: .init(x: 1), b: [2, 3]))

        #expect(try onePass(AskedTwice()))
        #expect(try CBOREncoder().encode(AskedTwice()) == tree(AskedTwice()))
        #expect(try CBORDecoder().decode([String: Int].self, from: CBOREncoder().encode(AskedTwice())) == ["a": 1, "b": 2, "x": 3])

        // A super encoder written to at once (as a subclass does) is one pass; one written to
        // after a later key is not.
        #expect(try onePass(Derived()))
        #expect(try CBOREncoder().encode(Derived()) == tree(Derived()))
        #expect(try hex(CBOREncoder().encode(Derived())) == "a2657375706572a1646261736501617802")
        #expect(try !onePass(LateSuper()))
        #expect(try hex(CBOREncoder().encode(LateSuper())) == "a2657375706572a1617801617802")

        #expect(try !onePass(TwiceSingle()))
        #expect(try CBORDecoder().decode(String.self, from: CBOREncoder().encode(TwiceSingle())) == "second")
    }

    /// An error a value throws while encoding reaches the caller, whichever encoder ran.
    @Test func anEncodingErrorReachesTheCaller() throws {
        let error = #expect(throws: EncodingError.self) { _ = try CBOREncoder().encode([Refuses()]) }
        guard case .invalidValue(_, let context) = error else { return }
        #expect(context.codingPath.map(\.stringValue) == ["Index 0", "a"])
    }

    /// 128-bit integers, which the profile does not carry, are a typed error naming the item,
    /// read from an array's container as from a single value, both ways.
    @Test func wideIntegersAreRefusedAtTheirPath() throws {
        /// Read its array's first item through the container's own 128-bit overloads (a generic
        /// type parameter would reach its generic `decode` instead).
        struct Signed: Decodable {
            init(from decoder: any Decoder) throws {
                var items = try decoder.unkeyedContainer()
                _ = try items.decode(Int128.self)
            }
        }
        struct Unsigned: Decodable {
            init(from decoder: any Decoder) throws {
                var items = try decoder.unkeyedContainer()
                _ = try items.decode(UInt128.self)
            }
        }
        func refusal(_ decode: () throws -> Void) -> [String]? {
            let error = #expect(throws: DecodingError.self) { try decode() }
            guard case .typeMismatch(_, let context) = error else { return nil }
            return context.codingPath.map(\.stringValue)
        }
        let encoded = try CBOREncoder().encode(["wide": [1, 2]])
        #expect(refusal { _ = try CBORDecoder().decode([String: Signed].self, from: encoded) } == ["wide", "Index 0"])
        #expect(refusal { _ = try CBORDecoder().decode([String: Unsigned].self, from: encoded) } == ["wide", "Index 0"])
        #expect(refusal { _ = try CBORDecoder().decode([String: [Int128]].self, from: encoded) } == ["wide", "Index 0"])
        let refused = #expect(throws: EncodingError.self) { _ = try CBOREncoder().encode(["wide": [Int128(1)]]) }
        guard case .invalidValue(_, let context) = refused else { return }
        #expect(context.codingPath.map(\.stringValue) == ["wide", "Index 0"])
    }

    /// Errors name the path to the value, through arrays and maps.
    @Test func decodingErrorsNameThePath() throws {
        let encoded = try CBOREncoder().encode(["items": [["n": 1, "tags": []], ["n": "two", "tags": []]] as [[String: AnyCodable]]])
        let error = #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode([String: [Item]].self, from: encoded) }
        guard case .typeMismatch(_, let context) = error else {
            Issue.record("expected a type mismatch, got \(String(describing: error))")
            return
        }
        #expect(context.codingPath.map(\.stringValue) == ["items", "Index 1", "n"])
        let missing = #expect(throws: DecodingError.self) {
            _ = try CBORDecoder().decode([Item].self, from: CBOREncoder().encode([["n": 1]] as [[String: Int]]))
        }
        guard case .keyNotFound(let key, let context) = missing else {
            Issue.record("expected a missing key, got \(String(describing: missing))")
            return
        }
        #expect(key.stringValue == "tags")
        #expect(context.codingPath.map(\.stringValue) == ["Index 0"])
    }

    /// Fields in another order than the type's, more than 12 (found through an index), unknown
    /// ones skipped, null and absent optionals, and a super decoder for a key that is absent.
    @Test func decodesFieldsWhereverTheyAre() throws {
        struct Wide: Codable, Equatable {
            var f0 = 0, f1 = "1", f2 = 2.5, f3 = true, f4: [Int] = [4], f5: [String: Int] = ["5": 5], f6: Int? = 6
            var f7: Int? = nil, f8 = Data([8]), f9: Float = 9, f10: Int8 = -10, f11: UInt64 = 11, f12 = "twelve"
            var f13 = Item(n: 13, tags: ["t"])
        }
        let wide = Wide()
        // The same fields backwards, with unknown ones in between.
        var map: [(String, Data)] = []
        let fields = try CBORDecoder().decode([String: Reencoded].self, from: CBOREncoder().encode(wide))
        for (key, value) in fields.sorted(by: { $0.key > $1.key }) {
            map.append((key, value.bytes))
            map.append(("unknown-\(key)", try CBOREncoder().encode(["nested": [1, 2, 3]])))
        }
        var bytes = Data([0xB8, UInt8(map.count)])
        for (key, value) in map { bytes += try CBOREncoder().encode(key) + value }
        #expect(try CBORDecoder().decode(Wide.self, from: bytes) == wide)

        struct Small: Codable, Equatable {
            var b: Int
            var a: String?
            var c: String?
        }
        #expect(
            try CBORDecoder().decode(Small.self, from: CBOREncoder().encode(["c": nil, "b": 1] as [String: Int?])) == Small(b: 1, a: nil, c: nil))

        struct WithSuper: Decodable {
            var fromSuper: String?
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: Field.self)
                fromSuper = try container.superDecoder(forKey: .base).singleValueContainer().decode(String?.self)
            }
        }
        #expect(try CBORDecoder().decode(WithSuper.self, from: CBOREncoder().encode(["base": "here"])).fromSuper == "here")
        #expect(try CBORDecoder().decode(WithSuper.self, from: CBOREncoder().encode(["other": "x"])).fromSuper == nil)
    }

    /// A field the type never reads is checked all the same.
    @Test func anUnreadFieldIsStillChecked() throws {
        struct OnlyB: Decodable { var b: Int }
        // {"a": <text 0xC3 0x28>, "b": 1}, {"a": <tag 1>(0), "b": 1}, {"a": [[..513 deep]], "b": 1}
        let badText = Data([0xA2, 0x61, 0x61, 0x62, 0xC3, 0x28, 0x61, 0x62, 0x01])
        let tagged = Data([0xA2, 0x61, 0x61, 0xC1, 0x00, 0x61, 0x62, 0x01])
        let deep = Data([0xA2, 0x61, 0x61]) + Data(repeating: 0x81, count: 600) + Data([0x00, 0x61, 0x62, 0x01])
        for input in [badText, tagged, deep] {
            #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode(OnlyB.self, from: input) }
        }
        #expect(try CBORDecoder().decode(OnlyB.self, from: Data([0xA2, 0x61, 0x61, 0x62, 0xC3, 0xA9, 0x61, 0x62, 0x01])).b == 1)
    }

    /// A type that keeps its decoder finds nothing to read once decoding has returned: a thrown
    /// error, not a read of memory the input no longer owns.
    @Test func aDecoderKeptPastTheCallReadsNothing() throws {
        struct Keeper: Decodable {
            let decoder: any Decoder
            init(from decoder: any Decoder) throws { self.decoder = decoder }
        }
        // The input stays alive here, so only the decoder's own rule can make these reads fail.
        let input = try CBOREncoder().encode(["a": String(repeating: "x", count: 1000)])
        let keeper = try CBORDecoder().decode(Keeper.self, from: input)
        withExtendedLifetime(input) {
            #expect(throws: DecodingError.self) { _ = try keeper.decoder.container(keyedBy: Field.self) }
            #expect(throws: DecodingError.self) { _ = try keeper.decoder.singleValueContainer().decode([String: String].self) }
        }
        // Nor the input of a later call on the same thread (a thread keeps its input for the
        // next call only when nothing else holds it), even while that call is under way.
        struct ReadsTheKeptOne: Decodable {
            var own: [String: String]
            init(from decoder: any Decoder) throws {
                Self.leaked = try? Self.keeper?.singleValueContainer().decode([String: String].self)
                own = try decoder.singleValueContainer().decode([String: String].self)
            }
            nonisolated(unsafe) static var keeper: (any Decoder)?
            nonisolated(unsafe) static var leaked: [String: String]?
        }
        ReadsTheKeptOne.keeper = keeper.decoder
        for _ in 0..<3 {
            let later = try CBORDecoder().decode(ReadsTheKeptOne.self, from: CBOREncoder().encode(["a": "leaked"]))
            #expect(later.own == ["a": "leaked"])
            #expect(ReadsTheKeptOne.leaked == nil)
            #expect(throws: DecodingError.self) { _ = try keeper.decoder.singleValueContainer().decode([String: String].self) }
        }
        ReadsTheKeptOne.keeper = nil
    }

    /// What a kept input was set to for one call (JSON's rules, noted long text, a failure) is
    /// not there for the next.
    @Test func aKeptInputStartsEveryCallAfresh() throws {
        let withLongText = try CBOREncoder().encode([String(repeating: "x", count: 300)])
        // Text that is not UTF-8 where the first call's long text was: only a stale note reads it.
        let plain = Data([0x81, 0x62, 0xFF, 0xFE])
        try withLongText.withUnsafeBytes { long in
            try plain.withUnsafeBytes { short in
                var found = CBORReader.Found()
                var reader = CBORReader(bytes: long)
                try reader.check(depth: 0, found: &found)
                try #require(!found.longText.isEmpty)
                var first = CBORInput.take(long, found: found, json: true)
                _ = first.failing(DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "test")))
                let identity = ObjectIdentifier(first)
                CBORInput.giveBack(&first)
                var second = CBORInput.take(short, found: CBORReader.Found(), json: false)
                #expect(ObjectIdentifier(second) == identity, "the input was kept")
                #expect(!second.json && !second.failed && second.bytes.count == short.count)
                // Long text noted for the first call's bytes would be looked for in these.
                #expect(throws: Never.self) { try second.checkUnreadLongText() }
                CBORInput.giveBack(&second)
            }
        }
    }

    /// A decoder's input is kept for the thread's next decoding once nothing holds it: every
    /// decoding reads its own bytes, and is judged by its own rules, whatever the one before left
    /// in it: an error thrown while reading, long text, a reading of JSON (which refuses what
    /// Foundation would read differently).
    @Test func aKeptInputReadsOnlyItsOwnCall() throws {
        var random = SeededRandom(seed: 2049)
        let long = [String(repeating: "\u{E9}", count: 300)]
        for round in 0..<20 {
            var budget = 300
            let shape = Shape.random(depth: 3, budget: &budget, using: &random)
            let encoded = try CBOREncoder().encode(shape)
            #expect(try CBORDecoder().decode(Shape.self, from: encoded) == shape, "round \(round)")
            // Read, then refused: text where a number is.
            #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode(Int.self, from: CBOREncoder().encode("seven")) }
            #expect(try CBORDecoder().decode(Int.self, from: CBOREncoder().encode(7)) == 7)
            #expect(try CBORDecoder().decode([String].self, from: CBOREncoder().encode(long)) == long)
            #expect(try CBORDecoder().decode(Shape.self, from: encoded) == shape, "round \(round), after long text")
            // After JSON's reading, a 128-bit integer is CBOR's type mismatch, not JSON's refusal.
            #expect(JSONPayload.decode([String: Int].self, from: Data(#"{"a": 1}"#.utf8)) == ["a": 1])
            let error = #expect(throws: (any Error).self) { _ = try CBORDecoder().decode(Int128.self, from: CBOREncoder().encode(5)) }
            #expect(error is DecodingError, "round \(round): \(String(describing: error))")
        }
    }
}

/// Any CBOR item, kept as its bytes (to rebuild a map in another order).
private struct Reencoded: Decodable {
    var bytes: Data

    init(from decoder: any Decoder) throws {
        let value = try decoder.singleValueContainer()
        if let number = try? value.decode(Int64.self) {
            bytes = try CBOREncoder().encode(number)
        } else if let number = try? value.decode(Double.self) {
            bytes = try CBOREncoder().encode(number)
        } else if let text = try? value.decode(String.self) {
            bytes = try CBOREncoder().encode(text)
        } else if let flag = try? value.decode(Bool.self) {
            bytes = try CBOREncoder().encode(flag)
        } else if let data = try? value.decode(Data.self) {
            bytes = try CBOREncoder().encode(data)
        } else if value.decodeNil() {
            bytes = Data([0xF6])
        } else if let items = try? value.decode([Reencoded].self) {
            bytes = Data([0x80 | UInt8(items.count)]) + items.reduce(Data()) { $0 + $1.bytes }
        } else {
            let fields = try value.decode([String: Reencoded].self)
            bytes = try fields.reduce(Data([0xA0 | UInt8(fields.count)])) { $0 + (try CBOREncoder().encode($1.key)) + $1.value.bytes }
        }
    }
}

/// A JSON-like value for building test input.
private enum AnyCodable: Encodable, ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral {
    case int(Int)
    case text(String)
    case array([AnyCodable])

    init(integerLiteral value: Int) { self = .int(value) }
    init(stringLiteral value: String) { self = .text(value) }
    init(arrayLiteral elements: AnyCodable...) { self = .array(elements) }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .int(let value): try container.encode(value)
        case .text(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        }
    }
}

extension CBORStreamTests {
    /// A container a value can reach from inside another value's `encode(to:)`.
    final class Reach {
        var container: KeyedEncodingContainer<Field>
        init(_ container: KeyedEncodingContainer<Field>) { self.container = container }
    }

    /// Writes its own container, then one of its parent's.
    struct IntoParent: Encodable {
        let parent: Reach
        func encode(to encoder: any Encoder) throws {
            var own = encoder.container(keyedBy: Field.self)
            try own.encode(1, forKey: .x)
            try parent.container.encode(2, forKey: .b)
        }
    }

    struct Parent: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            try container.encode(IntoParent(parent: Reach(container)), forKey: .a)
        }
    }

    /// Writes part of itself, then throws.
    struct PartThenThrows: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            try container.encode(1, forKey: .x)
            throw EncodingError.invalidValue(1, .init(codingPath: container.codingPath, debugDescription: "part written"))
        }
    }

    /// Catches a value's error and goes on (as lossy wrappers do).
    struct CatchesAndGoesOn: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            try? container.encode(PartThenThrows(), forKey: .a)
            try container.encode(2, forKey: .b)
        }
    }

    /// Asks a closed array for its count and acts on the answer.
    struct CountsAClosedArray: Encodable {
        func encode(to encoder: any Encoder) throws {
            var outer = encoder.unkeyedContainer()
            var first = outer.nestedUnkeyedContainer()
            try first.encode(1)
            try outer.encode(2)
            if first.count == 1 { try outer.encode("one") }
        }
    }

    /// Fills an array while its count is below 3, after the pass has failed (a key set twice).
    struct LoopsOnCount: Encodable {
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Field.self)
            try container.encode(1, forKey: .a)
            try container.encode(2, forKey: .a)
            var list = container.nestedUnkeyedContainer(forKey: .b)
            while list.count < 3 { try list.encode(0) }
        }
    }

    /// Hands its own encoder, inside a single value, to the value it encodes.
    struct HandsItsEncoderOn: Encodable {
        struct Child: Encodable {
            let outer: any Encoder
            func encode(to encoder: any Encoder) throws {
                var container = outer.container(keyedBy: Field.self)
                try container.encode(1, forKey: .x)
            }
        }
        func encode(to encoder: any Encoder) throws {
            var single = encoder.singleValueContainer()
            try single.encode(Child(outer: encoder))
        }
    }

    /// Where one pass would write other bytes than the tree, it leaves the value to the tree:
    /// a value writing into its parent's container, a caught error after part of a value, a
    /// closed array's count, and a loop on `count` after the pass failed ends.
    @Test func onePassNeverWritesWhatTheTreeWouldNot() throws {
        #expect(try !onePass(Parent()))
        #expect(try hex(CBOREncoder().encode(Parent())) == "a26162026161a1617801")
        #expect(try !onePass(CatchesAndGoesOn()))
        #expect(try hex(CBOREncoder().encode(CatchesAndGoesOn())) == "a1616202")
        #expect(try !onePass(CountsAClosedArray()))
        #expect(try hex(CBOREncoder().encode(CountsAClosedArray())) == "838101026" + "36f6e65")
        #expect(try !onePass(LoopsOnCount()))
        #expect(try hex(CBOREncoder().encode(LoopsOnCount())) == "a2616102616283000000")
        // The tree keeps what the single value's own encoder wrote (nothing: an empty map).
        #expect(try !onePass(HandsItsEncoderOn()))
        #expect(try hex(CBOREncoder().encode(HandsItsEncoderOn())) == "a0")
    }

    /// Keys are bytes: two spellings of "é" are two keys when encoding (both encoders) and
    /// when decoding (small maps, maps past 16 keys, and the index of maps past 12 entries).
    @Test func keysAreComparedAsBytes() throws {
        let composed = "\u{E9}"
        let decomposed = "e\u{301}"
        let pair = Keys(keys: [(composed, 1), (decomposed, 2)])
        #expect(try onePass(pair))
        let encoded = try CBOREncoder().encode(pair)
        #expect(encoded == (try tree(pair)))
        #expect(encoded.first == 0xA2)
        struct Composed: Decodable {
            var value: Int
            enum CodingKeys: String, CodingKey { case value = "\u{E9}" }
        }
        #expect(try CBORDecoder().decode(Composed.self, from: encoded).value == 1)
        struct BySuper: Decodable {
            var value: Int
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CBORKey.self)
                value = try container.superDecoder(forKey: CBORKey(stringValue: "e\u{301}")).singleValueContainer().decode(Int.self)
            }
        }
        #expect(try CBORDecoder().decode(BySuper.self, from: encoded).value == 2)
        for filler in [0, 11, 20] {
            let keys = pair.keys + (0..<filler).map { ("f\($0)", $0) }
            let many = try CBOREncoder().encode(Keys(keys: keys))
            #expect(try CBORDecoder().decode(Composed.self, from: many).value == 1, "\(keys.count) keys")
        }
    }

    /// Keys whose hash bits collide are compared, also after a value long enough to have been
    /// moved to make room for its count.
    @Test func collidingKeysAreComparedAfterMovedValues() throws {
        struct Colliding: Encodable {
            var repeated: String?
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CBORKey.self)
                try container.encode(Array(0..<30), forKey: CBORKey(stringValue: "k0"))
                try container.encode(["x": Array(0..<300)], forKey: CBORKey(stringValue: "k1"))
                try container.encode(5, forKey: CBORKey(stringValue: "k2"))
                if let repeated { try container.encode(7, forKey: CBORKey(stringValue: repeated)) }
            }
        }
        #expect(try onePass(Colliding(repeated: nil)))
        #expect(try CBOREncoder().encode(Colliding(repeated: nil)) == tree(Colliding(repeated: nil)))
        for repeated in ["k0", "k1", "k2"] {
            #expect(try !onePass(Colliding(repeated: repeated)), "\(repeated)")
            let encoded = try CBOREncoder().encode(Colliding(repeated: repeated))
            #expect(encoded.first == 0xA3)
            let decoded = try CBORDecoder().decode([String: Shape].self, from: encoded)
            #expect(decoded[repeated] == .int(7))
        }
    }

    /// Moving past an item by its noted end lands where walking it does, at every item of a
    /// deep and wide input.
    @Test func notedEndsAgreeWithWalking() throws {
        var random = SeededRandom(seed: 64)
        for _ in 0..<20 {
            var budget = 800
            let shape = Shape.list([Shape.random(depth: 6, budget: &budget, using: &random), .text(String(repeating: "y", count: 70))])
            let encoded = try CBOREncoder().encode(shape)
            try encoded.withUnsafeBytes { bytes in
                var checker = CBORReader(bytes: bytes)
                var found = CBORReader.Found()
                try checker.check(depth: 0, found: &found)
                let input = CBORInput(bytes, found: found)
                defer { input.close() }
                // Every item's offset, by walking heads.
                var offsets: [Int] = []
                var reader = CBORReader(bytes: bytes)
                func visit() throws {
                    offsets.append(reader.offset)
                    let head = try reader.head()
                    switch head.major {
                    case 2, 3: _ = try reader.content(head)
                    case 4: for _ in 0..<head.argument { try visit() }
                    case 5:
                        for _ in 0..<head.argument {
                            _ = try reader.content(try reader.head())
                            try visit()
                        }
                    default: break
                    }
                }
                try visit()
                for offset in offsets.dropFirst() {
                    var walker = CBORReader(bytes: bytes, offset: offset)
                    try walker.skip()
                    #expect(try input.end(of: offset) == walker.offset)
                }
            }
        }
    }

    /// Random shapes (arrays and maps of every count boundary up to 300, nested four deep,
    /// text and numbers): one pass writes them all, and the tree's bytes.
    @Test func randomShapesAreWrittenInOnePassAsTheTreeWrites() throws {
        var random = SeededRandom(seed: 8949)
        for round in 0..<60 {
            var budget = 1_500
            let shape = Shape.random(depth: 4, budget: &budget, using: &random)
            #expect(try onePass(shape), "round \(round)")
            let encoded = try CBOREncoder().encode(shape)
            #expect(encoded == (try tree(shape)), "round \(round)")
            #expect(try CBORDecoder().decode(Shape.self, from: encoded) == shape, "round \(round)")
        }
    }

    /// A thread keeps its stream between encodings: whatever the last one left in it (an error
    /// thrown midway, a value one pass could not follow, a buffer grown past what is kept, an
    /// encoding nested in another's `encode(to:)`), the next one starts afresh and writes the
    /// tree's bytes.
    @Test func aKeptStreamStartsEveryEncodingAfresh() throws {
        /// Encodes another value's CBOR as its own bytes, from inside its `encode(to:)`.
        struct Wrapping: Encodable {
            var inner: [Int]
            func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                try container.encode(CBOREncoder().encode(inner))
            }
        }
        var random = SeededRandom(seed: 7049)
        /// Grows the writer past what a kept stream keeps, then throws.
        struct LongThenRefuses: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.unkeyedContainer()
                try container.encode(Array(0..<10_000))
                try container.encode(Refuses())
            }
        }
        let before: [any Encodable] = [
            Refuses(), OutOfOrder(), Array(0..<10_000), Wrapping(inner: [1, 2, 3]), [Refuses()], LongThenRefuses(),
        ]
        for (index, value) in before.enumerated() {
            _ = try? CBOREncoder().encode(value)
            var budget = 400
            let shape = Shape.random(depth: 3, budget: &budget, using: &random)
            // The stream the value left, in one pass.
            var stream = CBORStream.take()
            try stream.encodeRoot(shape)
            #expect(stream.finish() == (try tree(shape)), "after value \(index)")
            CBORStream.giveBack(&stream)
            #expect(try CBOREncoder().encode(shape) == tree(shape), "after value \(index)")
        }
        #expect(try CBORDecoder().decode(Data.self, from: CBOREncoder().encode(Wrapping(inner: [4]))) == CBOREncoder().encode([4]))
    }

    /// A stream an encoder a value kept still holds is not kept for the next encoding, which
    /// that encoder could otherwise write into.
    @Test func aStreamAnEncoderStillHoldsIsNotKept() throws {
        final class Keeper: Encodable {
            var kept: (any Encoder)?
            func encode(to encoder: any Encoder) throws {
                kept = encoder
                var container = encoder.singleValueContainer()
                try container.encode(1)
            }
        }
        let keeper = Keeper()
        _ = try CBOREncoder().encode(keeper)
        let held = try #require(keeper.kept as? CBORStreamEncoding)
        var next = CBORStream.take()
        #expect(next !== held.stream)
        CBORStream.giveBack(&next)
        // One nothing else holds is kept.
        _ = try CBOREncoder().encode([1, 2])
        var first = CBORStream.take()
        let identity = ObjectIdentifier(first)
        CBORStream.giveBack(&first)
        var second = CBORStream.take()
        #expect(ObjectIdentifier(second) == identity)
        CBORStream.giveBack(&second)
    }

    /// Long text: checked as UTF-8 when read, after decoding when not read (also when a read
    /// failed and was caught), and long non-ASCII text round trips.
    @Test func longTextIsCheckedReadOrNot() throws {
        let valid = String(repeating: "\u{E9}", count: 300)
        #expect(try CBORDecoder().decode([String].self, from: CBOREncoder().encode([valid])) == [valid])
        var invalid = try CBOREncoder().encode(["a": String(repeating: "x", count: 300), "b": "1"])
        invalid[invalid.count - 200] = 0xFF
        #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode([String: String].self, from: invalid) }
        struct OnlyB: Decodable { var b: String }
        #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode(OnlyB.self, from: invalid) }
        struct TriesA: Decodable {
            var a: String?
            var b: String
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: Field.self)
                a = try? container.decode(String.self, forKey: .a)
                b = try container.decode(String.self, forKey: .b)
            }
        }
        #expect(throws: DecodingError.self) { _ = try CBORDecoder().decode(TriesA.self, from: invalid) }
        let fine = try CBOREncoder().encode(["a": String(repeating: "x", count: 300), "b": "1"])
        #expect(try CBORDecoder().decode(TriesA.self, from: fine).a?.count == 300)
        #expect(try CBORDecoder().decode(OnlyB.self, from: fine).b == "1")
    }

    /// Values moved past through the ends noted while checking: a long value before the one
    /// looked up, long arrays in an array, at 12 and 13 entries (scan and index).
    @Test func longValuesAreMovedPastByTheirNotedEnds() throws {
        struct Late: Decodable, Equatable { var z: Int }
        for count in [12, 13] {
            var keys: [(String, Shape)] = (0..<(count - 1)).map { ("k\($0)", .list(Array(repeating: .int(1_000), count: 40))) }
            keys.append(("z", .int(5)))
            let encoded = try CBOREncoder().encode(Shape.map(keys))
            #expect(try CBORDecoder().decode(Late.self, from: encoded) == Late(z: 5), "\(count) entries")
            #expect(try CBORDecoder().decode([String: Shape].self, from: encoded).count == count)
        }
        let nested = (0..<50).map { row in (0..<(row * 3)).map { $0 * 1_000 } }
        #expect(try CBORDecoder().decode([[Int]].self, from: CBOREncoder().encode(nested)) == nested)
        let deep = (0..<20).reduce(Shape.list((0..<100).map { .int($0 * 300) })) { inner, level in .list([.text("\(level)"), inner, .int(level)]) }
        #expect(try CBORDecoder().decode(Shape.self, from: CBOREncoder().encode(deep)) == deep)
    }
}

/// A JSON-like value whose maps keep their order (for comparing encoders byte for byte).
private indirect enum Shape: Codable, Equatable {
    case int(Int)
    case text(String)
    case list([Shape])
    case map([(String, Shape)])

    static func == (left: Shape, right: Shape) -> Bool {
        switch (left, right) {
        case (.int(let a), .int(let b)): a == b
        case (.text(let a), .text(let b)): a == b
        case (.list(let a), .list(let b)): a == b
        case (.map(let a), .map(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    /// A random shape of at most `budget` values: containers take every count boundary (0, 1,
    /// 23, 24, 25, 255, 256) while the budget lasts.
    static func random(depth: Int, budget: inout Int, using generator: inout SeededRandom) -> Shape {
        budget -= 1
        let counts = [0, 1, 2, 23, 24, 25, 255, 256, 300]
        switch Int.random(in: 0..<(depth > 0 && budget > 0 ? 4 : 2), using: &generator) {
        case 0: return .int(Int.random(in: -70_000...70_000, using: &generator))
        case 1: return .text(String(repeating: "\u{E9}a", count: Int.random(in: 0...20, using: &generator)))
        case let kind:
            let count = min(counts.randomElement(using: &generator)!, max(budget, 0))
            var items: [Shape] = []
            for _ in 0..<count { items.append(random(depth: depth - 1, budget: &budget, using: &generator)) }
            return kind == 2 ? .list(items) : .map(items.enumerated().map { ("key\($0.offset)", $0.element) })
        }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .int(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .text(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .list(let items):
            var container = encoder.unkeyedContainer()
            for item in items { try container.encode(item) }
        case .map(let entries):
            var container = encoder.container(keyedBy: CBORKey.self)
            for (key, value) in entries { try container.encode(value, forKey: CBORKey(stringValue: key)) }
        }
    }

    init(from decoder: any Decoder) throws {
        if var list = try? decoder.unkeyedContainer() {
            var items: [Shape] = []
            while !list.isAtEnd { items.append(try list.decode(Shape.self)) }
            self = .list(items)
        } else if let map = try? decoder.container(keyedBy: CBORKey.self) {
            self = .map(try map.allKeys.map { ($0.stringValue, try map.decode(Shape.self, forKey: $0)) })
        } else if let value = try? decoder.singleValueContainer().decode(Int.self) {
            self = .int(value)
        } else {
            self = .text(try decoder.singleValueContainer().decode(String.self))
        }
    }
}
