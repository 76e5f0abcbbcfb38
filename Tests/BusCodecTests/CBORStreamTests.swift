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
struct Reencoded: Decodable {
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
enum AnyCodable: Encodable, ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral {
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
