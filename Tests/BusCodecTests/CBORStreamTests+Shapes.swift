import BoardBusTestSupport
import Foundation
import Testing

@testable import BusCodec
@testable import BusCore

// One pass against the tree over shapes the encoder meets in the wild and random ones: the
// same bytes, the same order of keys, kept streams started afresh.
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
indirect enum Shape: Codable, Equatable {
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
