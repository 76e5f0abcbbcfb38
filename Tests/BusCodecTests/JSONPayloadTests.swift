import BoardBusTestSupport
import Foundation
import Testing

@testable import BusCodec
@testable import BusCore

/// The JSON fast path against Foundation, which defines what a JSON payload means: where the
/// fast path answers, it must answer what Foundation does, byte for byte and bit for bit.
@Suite("JSON payload fast path")
struct JSONPayloadTests {
    static let foundationEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    /// The fast encoder writes Foundation's bytes, or leaves the value to Foundation when
    /// `mayDecline` (and then `PayloadCodec` still writes Foundation's bytes).
    func expectSameEncoding<T: Encodable>(
        _ value: T, mayDecline: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let foundation = try? Self.foundationEncoder.encode(value)
        let fast = JSONPayload.encode(value)
        if let fast {
            #expect(
                fast == foundation,
                "\(T.self): \(String(decoding: fast, as: UTF8.self)) against \(foundation.map { String(decoding: $0, as: UTF8.self) } ?? "an error")",
                sourceLocation: sourceLocation)
        } else {
            #expect(mayDecline, "the fast path declined \(T.self) \(value)", sourceLocation: sourceLocation)
        }
        #expect((try? PayloadCodec.encode(value)) == foundation, sourceLocation: sourceLocation)
    }

    /// Where the fast decoder reads `text` as `T`, Foundation reads the same value (compared by
    /// `same`); returns whether the fast path answered.
    @discardableResult
    func expectSameDecoding<T: Decodable>(
        _: T.Type, _ text: Data, same: (T, T) -> Bool, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        let foundation = try? JSONDecoder().decode(T.self, from: text)
        guard let fast = JSONPayload.decode(T.self, from: text) else { return false }
        guard let foundation else {
            Issue.record(
                "the fast path read \(String(decoding: text, as: UTF8.self).debugDescription) as \(T.self) \(fast); Foundation refuses it",
                sourceLocation: sourceLocation)
            return true
        }
        #expect(
            same(fast, foundation), "\(String(decoding: text, as: UTF8.self).debugDescription): \(fast) against \(foundation)",
            sourceLocation: sourceLocation)
        return true
    }

    @discardableResult
    func expectSameDecoding<T: Decodable & Equatable>(
        _: T.Type, _ text: String, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        expectSameDecoding(T.self, Data(text.utf8), same: ==, sourceLocation: sourceLocation)
    }

    struct Record: Codable, Equatable {
        enum Shape: Codable, Equatable {
            case circle(radius: Double)
            case label(String, Int)
            case none
        }
        struct Nothing: Codable, Equatable {}
        var text = "Zoë 🚀 東京 \"quoted\" back\\slash a/b\n\t\u{0}\u{1F}\u{7F}"
        var numbers: [Double] = [0, -0.0, 1, 1.5, 1e20, 1e-7, 0.1, 1.0 / 3, 123_456_789, .leastNonzeroMagnitude, .greatestFiniteMagnitude, -2.5e-300]
        var floats: [Float] = [0.1, -0.5, 3.4028235e38, .leastNonzeroMagnitude, 16_777_216]
        var limits: [Int64] = [.min, .max, 0, -1]
        var unsigned: UInt64 = .max
        var small: Int8 = -128
        var bytes = Data((0...255).map { UInt8($0) })
        var missing: String? = nil
        var present: String? = "here"
        var nested: [String: [Int]] = ["b": [1, -1], "a": [], "B": [2], "aa": [], "": [3], "a/b": []]
        var byNumber: [Int: String] = [10: "ten", 9: "nine", -1: "minus one"]
        var shapes: [Shape] = [.circle(radius: 2), .label("x", 3), .none]
        var matrix: [[Bool]] = [[true, false], []]
        var date = Date(timeIntervalSinceReferenceDate: 12.5)
        var nothing = Nothing()
        var optionals: [Int?] = [1, nil, 3]
    }

    /// A `Record` without its `Data`, which the fast path leaves to Foundation.
    struct WithoutBytes: Codable, Equatable {
        var text: String, numbers: [Double], floats: [Float], limits: [Int64], unsigned: UInt64, small: Int8
        var missing: String?, present: String?, nested: [String: [Int]], byNumber: [Int: String]
        var shapes: [Record.Shape], matrix: [[Bool]], date: Date, nothing: Record.Nothing, optionals: [Int?]
    }

    /// Arrays in arrays, read without trying one type and then another.
    indirect enum Nest: Decodable, Equatable {
        case array([Nest])
        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            var items: [Nest] = []
            while !container.isAtEnd { items.append(try container.decode(Nest.self)) }
            self = .array(items)
        }
    }

    struct Mixed: Decodable, Equatable {
        var a: [Double], b: [String: [String: String]], t: [Bool?], d: Int, e: Int8?
    }

    @Test func encodesFoundationsBytes() {
        expectSameEncoding(Record())
        expectSameEncoding("a string at the top")
        expectSameEncoding(42)
        expectSameEncoding(-0.0)
        expectSameEncoding(Float(1e20))
        expectSameEncoding([String: Int]())
        expectSameEncoding([Int]())
        expectSameEncoding(Int?.none)
        expectSameEncoding(Data([0xFF, 0xFF, 0xFE]))  // base64 with '/', escaped as Foundation does
        expectSameEncoding(["key \"with\" escapes\n": 1, "z": 2, "\u{1}": 3])
        expectSameEncoding(Empty())
    }

    /// Every escape, at every offset of a string longer than the 16 bytes scanned at a time.
    @Test func escapesEveryCharacterAtEveryOffset() throws {
        let specials: [Character] = (0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) } + ["\"", "\\", "/", "\u{7F}", "é", "🚀"]
        for special in specials {
            for offset in 0..<36 {
                var text = String(repeating: "x", count: 36)
                text.insert(special, at: text.index(text.startIndex, offsetBy: offset))
                expectSameEncoding(text)
                expectSameEncoding(["k": text])
                #expect(expectSameDecoding(String.self, String(decoding: try Self.foundationEncoder.encode(text), as: UTF8.self)))
            }
        }
    }

    /// Numbers Foundation writes in particular ways, and random doubles and floats.
    @Test func writesNumbersAsFoundationDoes() throws {
        var random = SeededRandom(seed: 19)
        var doubles: [Double] = [1e16, 1e15, 123e-20, 5e-324, 4.9e-324, 1.7976931348623157e308, 9_007_199_254_740_993, 0.000001, 1e21]
        var floats: [Float] = [.leastNonzeroMagnitude, .greatestFiniteMagnitude, 1e-10, 16_777_217, 0.3]
        for _ in 0..<2000 {
            let double = Double(bitPattern: random.next())
            if double.isFinite { doubles.append(double) }
            let float = Float(bitPattern: UInt32(truncatingIfNeeded: random.next()))
            if float.isFinite { floats.append(float) }
        }
        expectSameEncoding(doubles)
        expectSameEncoding(floats)
        for double in doubles.prefix(300) { expectSameEncoding(double) }
        // Read back: the fast decoder reads Foundation's text as Foundation does.
        let doubleText = String(decoding: try Self.foundationEncoder.encode(doubles), as: UTF8.self)
        #expect(expectSameDecoding([Double].self, Data(doubleText.utf8), same: { $0.map(\.bitPattern) == $1.map(\.bitPattern) }))
        let floatText = String(decoding: try Self.foundationEncoder.encode(floats), as: UTF8.self)
        #expect(expectSameDecoding([Float].self, Data(floatText.utf8), same: { $0.map(\.bitPattern) == $1.map(\.bitPattern) }))
    }

    /// What the fast encoder leaves to Foundation: its special cases, what JSON cannot carry,
    /// keys that are not ASCII, a value that encodes nothing.
    @Test func leavesFoundationsSpecialCasesToIt() {
        struct Links: Codable { var url = URL(string: "https://example.com/a?b=c")!, price = Decimal(string: "12.50")! }
        #expect(JSONPayload.encode(Links()) == nil)
        expectSameEncoding(Links(), mayDecline: true)
        for number in [Double.nan, .infinity, -.infinity] {
            #expect(JSONPayload.encode(["n": number]) == nil)
            #expect(throws: BusError.self) { _ = try PayloadCodec.encode(["n": number]) }
        }
        #expect(JSONPayload.encode(["é": 1]) == nil)
        // Two spellings of "é", which Foundation takes for one key.
        struct TwoSpellings: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                try container.encode(1, forKey: AnyJSON.Key(stringValue: "\u{E9}"))
                try container.encode(2, forKey: AnyJSON.Key(stringValue: "e\u{301}"))
            }
        }
        expectSameEncoding(TwoSpellings(), mayDecline: true)
        struct Silent: Encodable { func encode(to encoder: any Encoder) throws {} }
        #expect(JSONPayload.encode(Silent()) == nil)
        #expect(throws: BusError.self) { _ = try PayloadCodec.encode(Silent()) }
        struct Deep: Encodable {
            let depth: Int
            func encode(to encoder: any Encoder) throws {
                var container = encoder.unkeyedContainer()
                if depth > 0 { try container.encode(Deep(depth: depth - 1)) }
            }
        }
        #expect(JSONPayload.encode(Deep(depth: 300)) == nil)
        expectSameEncoding(Deep(depth: 300), mayDecline: true)
        expectSameEncoding(Deep(depth: 100))
    }

    @Test func decodesWhatFoundationEncodes() throws {
        let text = try Self.foundationEncoder.encode(Record())
        #expect(expectSameDecoding(WithoutBytes.self, String(decoding: text, as: UTF8.self)))
        #expect(expectSameDecoding(Record.self, String(decoding: text, as: UTF8.self)))
        #expect(try PayloadCodec.decode(Record.self, from: text) == Record())
        // Base64 at its edges: padding, none, whitespace, characters outside the alphabet, bits
        // left over, URL-safe letters.
        for base64 in [
            "", "AQ==", "AQI=", "AQID", "AQ", "AQ=", "A", "AQ==\\n", " AQ==", "AQ==AQ==", "AR==", "-_8=", "//8=", #"\/\/8="#, #"AQ\u003d\u003d"#,
            "AQ%3D",
        ] {
            expectSameDecoding([Data].self, "[\"\(base64)\"]")
        }
        #expect(expectSameDecoding([Data].self, #"["AQI=","\/\/8=",""]"#))
    }

    /// Numbers at and past every edge, into every kind of number.
    @Test func readsNumbersAsFoundationDoes() throws {
        let texts = [
            "0", "-0", "1", "-1", "1.0", "1.5", "-1.5", "1e2", "1E2", "1e+2", "1e-2", "-0.0", "0e5", "0.0e-5", "2.50",
            "9007199254740992", "9007199254740993", "9007199254740993.0", "9007199254740993.5", "1e17", "9223372036854775807.0",
            "9.223372036854775807e18", "-9223372036854775808.0", "18446744073709551615.0", "10000000000000000000.0", "9007199254740991.0",
            "9007199254740992.0", "1" + String(repeating: "0", count: 100_000) + "e-100005", "1.5e17", "123456789012345678e-1",
            "18446744073709551615", "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
            "-9007199254740993", "1e400", "-1e400", "1e-400", "0.1e-400", "1e308", "4.9e-324", "2.4703282292062328e-324",
            "3.4028235e38", "3.4028236e38", "3.5e38", "1e-45", "1e-46", "7e-46", "1.401298464324817e-45",
            "16777217", "16777217.0", "16777217.000000001", "16777219.0", "0.1", "255", "256", "-128", "-129", "1e20",
            // Not JSON.
            "01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "0x10", "NaN", "Infinity", "-Infinity", "1_000", "1 2", "--1", "1.5.5",
        ]
        func bits<F: BinaryFloatingPoint>(_ a: F, _ b: F) -> Bool { a == b && a.sign == b.sign }
        for text in texts {
            expectSameDecoding(Int.self, text)
            expectSameDecoding(Int8.self, text)
            expectSameDecoding(UInt8.self, text)
            expectSameDecoding(Int64.self, text)
            expectSameDecoding(UInt64.self, text)
            expectSameDecoding(Double.self, Data(text.utf8), same: bits)
            expectSameDecoding(Float.self, Data(text.utf8), same: bits)
            expectSameDecoding([String: Double].self, Data("{\"n\":\(text)}".utf8), same: { bits($0["n"]!, $1["n"]!) })
        }
        // The common cases do take the fast path.
        #expect(expectSameDecoding(Int.self, "-12"))
        #expect(expectSameDecoding(Double.self, "2.5"))
        #expect(expectSameDecoding(Int.self, "1e2"))
        #expect(expectSameDecoding(Float.self, "0.1"))
        #expect(expectSameDecoding(UInt64.self, "18446744073709551615"))
        // Where a double rounding could read another Float than strtof, Foundation decides.
        #expect(JSONPayload.decode(Float.self, from: Data("16777217.000000001".utf8)) == nil)
        #expect(try PayloadCodec.decode(Float.self, from: Data("16777217.000000001".utf8)) == 16_777_218)
        // An integer type from a float of 2^53 or more: Foundation reads the text exactly.
        #expect(try PayloadCodec.decode(Int.self, from: Data("9007199254740993.0".utf8)) == 9_007_199_254_740_993)
    }

    /// Text at every edge: escapes, surrogates, control characters, bytes that are not UTF-8.
    @Test func readsTextAsFoundationDoes() {
        let texts = [
            #""a\u0041\u00e9\u6771""#, #""\ud83d\ude00""#, #""\ud83d""#, #""\ude00""#, #""\ud83dx""#, #""\ud83d\u0041""#,
            #""\x""#, #""\/\b\f\n\r\t\"\\""#, #""\u0000""#, #""\u12""#, #""\uZZZZ""#, #""a"#, #"""#, #""\"#,
            "\"raw\ttab\"", "\"raw\u{1}\"", "\"del\u{7F}\"", "\"é\"", "\"a\\u00\"",
        ]
        for text in texts { expectSameDecoding(String.self, text) }
        let bytes: [[UInt8]] = [
            [0x22, 0xFF, 0x22], [0x22, 0xC0, 0x80, 0x22], [0x22, 0xE6, 0x9D, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22],
            [0x22] + Array(repeating: 0x61, count: 300) + [0xFF, 0x22], [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],
        ]
        for text in bytes { expectSameDecoding(String.self, Data(text), same: ==) }
        #expect(expectSameDecoding(String.self, #""\ud83d\ude00 \u00e9""#))
    }

    /// Structure at every edge: whitespace, trailing commas, keys twice or not ASCII, nesting.
    @Test func readsStructureAsFoundationDoes() throws {
        struct Pair: Codable, Equatable { var a: Int, b: String? }
        let texts = [
            #"{"a":1,"b":"x"}"#, " \n\t{ \"a\" : 1 , \"b\" : null }\r\n", #"{"a":1}"#, #"{"b":"x"}"#, #"{"a":1,}"#, #"{"a":1,"a":2}"#,
            #"{"a" 1}"#, #"{a:1}"#, #"{"a":1}x"#, #"{"a":1}{}"#, #"{"a":1"#, #"{"a":1,"b":"x","c":[1,{"d":null}]}"#,
            #"{"é":1,"a":1}"#, #"{"\u0061":1}"#, #"{"a":true}"#, #"{"a":"1"}"#, #"{"a":1.0}"#, #"{"a":[]}"#, "\u{FEFF}{\"a\":1}",
            "{\"a\":1}\u{0}", #"{"a":nul}"#, #"{"a":tru}"#, #"[1]"#, "",
        ]
        for text in texts {
            expectSameDecoding(Pair.self, text)
            expectSameDecoding([String: Pair?].self, "{\"p\":\(text)}")
        }
        #expect(expectSameDecoding(Pair.self, #"{"b":null,"a":7}"#))
        // A key spelled otherwise than the type's (é as e and a combining accent) is the same
        // key to Foundation, which compares keys as `String`s.
        struct Accented: Codable, Equatable { var café: Int? }
        expectSameDecoding(Accented.self, "{\"cafe\u{301}\":1}")
        #expect(try JSONDecoder().decode(Accented.self, from: Data("{\"cafe\u{301}\":1}".utf8)) == Accented(café: 1))
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        expectSameDecoding(Nest.self, deep)
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(expectSameDecoding(Nest.self, fine))
        // A type that tries one type and then another is left to Foundation (see
        // aCaughtErrorStillLeavesTheValueToFoundation).
        expectSameDecoding(AnyJSON.self, #"{"a":[1,"x",null,true,{"b":2.5}]}"#)
    }

    @Test func leavesFoundationsSpecialTypesToIt() throws {
        struct Links: Codable, Equatable { var url: URL, price: Decimal, data: Data }
        let text = Data(#"{"url":"https:\/\/example.com","price":12.5,"data":"AQI="}"#.utf8)
        #expect(expectSameDecoding(Data.self, #""AQI=""#))
        #expect(JSONPayload.decode(Links.self, from: text) == nil)
        #expect(try PayloadCodec.decode(Links.self, from: text) == Links(url: URL(string: "https://example.com")!, price: 12.5, data: Data([1, 2])))
        // A URL spelled as its own keyed encoding is not a URL to Foundation's decoder.
        expectSameDecoding([URL].self, #"[{"relative":"https://example.com"}]"#)
    }

    /// Random texts near valid ones: wherever the fast path reads one, Foundation reads the same.
    @Test func agreesWithFoundationOnMutatedTexts() throws {
        var random = SeededRandom(seed: 0x19_0000)
        let seeds = [
            String(decoding: try Self.foundationEncoder.encode(Record()), as: UTF8.self),
            #"{"a":[1,-2.5e3,1E+2,-0,0.5],"b":{"c":{"x":"y\u00e9\n\/"}},"t":[true,false,null],"d":-0,"e":12}"#,
        ]
        let alphabet = Array(#"{}[]:,"\/-+.0123456789eEtrufalsn u"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        var answered = 0
        for round in 0..<3000 {
            var bytes = Array(seeds[round % seeds.count].utf8)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let index = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: bytes[index] = alphabet.randomElement(using: &random)!
                case 1: bytes.remove(at: index)
                default: bytes.insert(alphabet.randomElement(using: &random)!, at: index)
                }
            }
            let answeredNow =
                round % 2 == 0
                ? expectSameDecoding(WithoutBytes.self, Data(bytes), same: ==) : expectSameDecoding(Mixed.self, Data(bytes), same: ==)
            if answeredNow { answered += 1 }
        }
        // Most mutations break the text; enough of them do not for the comparison to mean something.
        #expect(answered > 300)
    }

    /// A value's own code that catches errors (`try?`) must not turn the fast path's "ask
    /// Foundation" into a different value.
    @Test func aCaughtErrorStillLeavesTheValueToFoundation() throws {
        struct Lenient: Decodable {
            var url: URL?, data: Data?, price: Decimal?, float: Float?, wide: Int128?, missing: Int?
            enum CodingKeys: String, CodingKey {
                case url, data, price, float, wide
                case missing = "\u{212A}"
            }
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                url = try? container.decode(URL.self, forKey: .url)
                data = try? container.decode(Data.self, forKey: .data)
                price = try? container.decode(Decimal.self, forKey: .price)
                float = try? container.decode(Float.self, forKey: .float)
                wide = try? container.decode(Int128.self, forKey: .wide)
                missing = try? container.decodeIfPresent(Int.self, forKey: .missing)
            }
        }
        let text = Data(#"{"url":"https://example.com","data":"AQI=","price":12.5,"float":16777217.000000001,"wide":5,"K":7}"#.utf8)
        #expect(JSONPayload.decode(Lenient.self, from: text) == nil)
        let lenient = try PayloadCodec.decode(Lenient.self, from: text)
        #expect(lenient.url == URL(string: "https://example.com") && lenient.data == Data([1, 2]) && lenient.price == 12.5)
        #expect(lenient.float == 16_777_218 && lenient.wide == 5)
        // The Kelvin sign is "K" to Foundation, which compares keys as `String`s.
        #expect(lenient.missing == 7)

        // An array read leniently: an item that fails is read again as something else.
        struct Skip: Decodable { init(from decoder: any Decoder) throws {} }
        expectSameDecoding(LenientArray<Int, Skip>.self, #"[1,"x",2,3]"#)
        #expect(try PayloadCodec.decode(LenientArray<Int, Skip>.self, from: Data(#"[1,"x",2,3]"#.utf8)).items == [1, 2, 3])
        // An item whose own `init(from:)` refuses it (an enum case this build does not know) is
        // read again as text: the container moves past an item only once it is read.
        enum Kind: String, Decodable { case a, b }
        #expect(expectSameDecoding(LenientArray<Kind, String>.self, #"["a","zzz","b"]"#))
        #expect(try PayloadCodec.decode(LenientArray<Kind, String>.self, from: Data(#"["a","zzz","b"]"#.utf8)).items == [.a, .b])
        // `decodeIfPresent` past the end is nil and moves on, as Foundation's.
        struct PastTheEnd: Decodable, Equatable {
            var values: [Int?] = []
            var index = 0
            init(from decoder: any Decoder) throws {
                var container = try decoder.unkeyedContainer()
                for _ in 0..<3 { values.append(try container.decodeIfPresent(Int.self)) }
                index = container.currentIndex
            }
        }
        #expect(expectSameDecoding(PastTheEnd.self, "[1]"))
        struct NilAtEnd: Decodable, Equatable {
            var isNil: Bool
            init(from decoder: any Decoder) throws {
                var container = try decoder.unkeyedContainer()
                isNil = try container.decodeNil()
            }
        }
        expectSameDecoding(NilAtEnd.self, "[]")

        struct LenientOut: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                try? container.encode(URL(string: "https://example.com")!, forKey: AnyJSON.Key(stringValue: "url"))
                try? container.encode(Int128(5), forKey: AnyJSON.Key(stringValue: "wide"))
                try container.encode(1, forKey: AnyJSON.Key(stringValue: "one"))
            }
        }
        #expect(JSONPayload.encode(LenientOut()) == nil)
        expectSameEncoding(LenientOut(), mayDecline: true)
        #expect(JSONPayload.encode(Int128(5)) == nil)
        expectSameEncoding(Int128.max, mayDecline: true)
        #expect(try PayloadCodec.decode(UInt128.self, from: Data("340282366920938463463374607431768211455".utf8)) == .max)
    }

    /// Codable used in ways the tree would write otherwise than Foundation: a super encoder kept
    /// past a later value of its key, a single value after a container.
    @Test func unusualEncodingIsLeftToFoundation() {
        struct KeptSuper: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                let superEncoder = container.superEncoder(forKey: AnyJSON.Key(stringValue: "a"))
                var single = superEncoder.singleValueContainer()
                try single.encode("super")
                try container.encode(5, forKey: AnyJSON.Key(stringValue: "a"))
                withExtendedLifetime(superEncoder) {}
            }
        }
        struct ContainerThenValue: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                try container.encode(1, forKey: AnyJSON.Key(stringValue: "a"))
                var single = encoder.singleValueContainer()
                try single.encode(5)
            }
        }
        // A nan Foundation refuses as it is encoded, hidden by a later value of its key.
        struct NanThenNumber: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                try? container.encode(Double.nan, forKey: AnyJSON.Key(stringValue: "v"))
                try container.encode(1, forKey: AnyJSON.Key(stringValue: "v"))
            }
        }
        expectSameEncoding(NanThenNumber(), mayDecline: true)
        #expect(JSONPayload.encode(NanThenNumber()) == nil)
        // A nested container over a value of another kind, where Foundation traps: declined
        // (Foundation is not asked here).
        struct Overwritten: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                try container.encode([1, 2], forKey: AnyJSON.Key(stringValue: "a"))
                var nested = container.nestedContainer(keyedBy: AnyJSON.Key.self, forKey: AnyJSON.Key(stringValue: "a"))
                try nested.encode(3, forKey: AnyJSON.Key(stringValue: "b"))
            }
        }
        #expect(JSONPayload.encode(Overwritten()) == nil)
        expectSameEncoding(KeptSuper(), mayDecline: true)
        expectSameEncoding(ContainerThenValue(), mayDecline: true)
        #expect(JSONPayload.encode(KeptSuper()) == nil && JSONPayload.encode(ContainerThenValue()) == nil)
    }

    /// A map of many keys: the same bytes, and the tree sets each key in constant time.
    @Test func encodesLargeMaps() {
        let large = Dictionary(uniqueKeysWithValues: (0..<20_000).map { ("key \($0)", $0) })
        expectSameEncoding(large)
        struct Repeated: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyJSON.Key.self)
                for round in 0..<3 {
                    for index in 0..<40 { try container.encode(index * round, forKey: AnyJSON.Key(stringValue: "k\(index)")) }
                }
            }
        }
        expectSameEncoding(Repeated())
    }

    /// An array's `Item`s, each item that is not one read as a `Skipped` instead (the way a type
    /// tolerates what a newer sender adds).
    struct LenientArray<Item: Decodable & Equatable, Skipped: Decodable>: Decodable, Equatable {
        var items: [Item] = []
        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            while !container.isAtEnd {
                if let item = try? container.decode(Item.self) { items.append(item) } else { _ = try container.decode(Skipped.self) }
            }
        }
    }

    /// Any JSON value, read through the containers a `Decodable` type would use.
    enum AnyJSON: Decodable, Equatable {
        case null
        case bool(Bool)
        case integer(Int64)
        case number(Double)
        case string(String)
        case array([AnyJSON])
        case object([String: AnyJSON])

        init(from decoder: any Decoder) throws {
            if let container = try? decoder.container(keyedBy: Key.self) {
                var object: [String: AnyJSON] = [:]
                for key in container.allKeys { object[key.stringValue] = try container.decode(AnyJSON.self, forKey: key) }
                self = .object(object)
            } else if var container = try? decoder.unkeyedContainer() {
                var array: [AnyJSON] = []
                while !container.isAtEnd { array.append(try container.decode(AnyJSON.self)) }
                self = .array(array)
            } else {
                let single = try decoder.singleValueContainer()
                if single.decodeNil() {
                    self = .null
                } else if let flag = try? single.decode(Bool.self) {
                    self = .bool(flag)
                } else if let integer = try? single.decode(Int64.self) {
                    self = .integer(integer)
                } else if let number = try? single.decode(Double.self) {
                    self = .number(number)
                } else {
                    self = .string(try single.decode(String.self))
                }
            }
        }

        static func == (a: AnyJSON, b: AnyJSON) -> Bool {
            switch (a, b) {
            case (.null, .null): true
            case (.bool(let x), .bool(let y)): x == y
            case (.integer(let x), .integer(let y)): x == y
            case (.number(let x), .number(let y)): x.bitPattern == y.bitPattern
            case (.string(let x), .string(let y)): x == y
            case (.array(let x), .array(let y)): x == y
            case (.object(let x), .object(let y)): x == y
            default: false
            }
        }

        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
    }
}
