import BoardBusTestSupport
import Foundation
import Testing

@testable import BusCodec
@testable import BusCore

@Suite("CBOR payload codec")
struct CBORTests {
    func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }
    func bytes(_ hex: String) -> Data {
        Data(stride(from: 0, to: hex.count, by: 2).map { UInt8(hex.dropFirst($0).prefix(2), radix: 16)! })
    }

    /// RFC 8949 Appendix A: what the encoder writes for the values the profile uses.
    @Test func encodesTheRFCExamples() throws {
        let encoder = CBOREncoder()
        #expect(hex(try encoder.encode(0)) == "00")
        #expect(hex(try encoder.encode(23)) == "17")
        #expect(hex(try encoder.encode(24)) == "1818")
        #expect(hex(try encoder.encode(1000)) == "1903e8")
        #expect(hex(try encoder.encode(1_000_000)) == "1a000f4240")
        #expect(hex(try encoder.encode(1_000_000_000_000)) == "1b000000e8d4a51000")
        #expect(hex(try encoder.encode(UInt64.max)) == "1bffffffffffffffff")
        #expect(hex(try encoder.encode(-1)) == "20")
        #expect(hex(try encoder.encode(-1000)) == "3903e7")
        #expect(hex(try encoder.encode(Int64.min)) == "3b7fffffffffffffff")
        #expect(hex(try encoder.encode(1.1)) == "fb3ff199999999999a")
        #expect(hex(try encoder.encode(Float(100_000))) == "fa47c35000")
        #expect(hex(try encoder.encode(true)) == "f5")
        #expect(hex(try encoder.encode(String?.none)) == "f6")
        #expect(hex(try encoder.encode("IETF")) == "6449455446")
        #expect(hex(try encoder.encode("\u{00FC}")) == "62c3bc")
        #expect(hex(try encoder.encode([1, 2, 3])) == "83010203")
        #expect(hex(try encoder.encode(Data([1, 2, 3, 4]))) == "4401020304")
        struct AB: Codable { var a = 1, b = [2, 3] }
        #expect(hex(try encoder.encode(AB())) == "a26161016162820203")
        // A type that encodes nothing is an empty map, as `{}` in JSON.
        #expect(hex(try encoder.encode(Empty())) == "a0")
    }

    /// RFC 8949 Appendix A: what other encoders write that this one does not (half floats).
    @Test func decodesTheRFCExamplesOfOtherEncoders() throws {
        let decoder = CBORDecoder()
        #expect(try decoder.decode(Double.self, from: bytes("f93c00")) == 1.0)
        #expect(try decoder.decode(Double.self, from: bytes("f97bff")) == 65504.0)
        #expect(try decoder.decode(Double.self, from: bytes("f90001")) == 5.960464477539063e-8)
        #expect(try decoder.decode(Double.self, from: bytes("f97c00")) == .infinity)
        #expect(try decoder.decode(Double.self, from: bytes("f9fc00")) == -.infinity)
        #expect(try decoder.decode(Double.self, from: bytes("f97e00")).isNaN)
        #expect(try decoder.decode(Double.self, from: bytes("f98000")).bitPattern == (-0.0 as Double).bitPattern)
        #expect(try decoder.decode(Double.self, from: bytes("fa7f7fffff")) == Double(Float.greatestFiniteMagnitude))
        #expect(try decoder.decode(Double.self, from: bytes("3bffffffffffffffff")) == -18_446_744_073_709_551_616.0)
        // undefined reads as null.
        #expect(try decoder.decode(String?.self, from: bytes("f7")) == nil)
        #expect(try decoder.decode([String: [Int]].self, from: bytes("a26161806162820203")) == ["a": [], "b": [2, 3]])
    }

    struct Everything: Codable, Equatable {
        enum Shape: Codable, Equatable {
            case circle(radius: Double)
            case label(String, Int)
            case none
        }
        var text = "Zoë 🚀 東京"
        var boundary = String(repeating: "a", count: 23) + "é"
        var empty = ""
        var numbers: [Double] = [.infinity, -.infinity, 1e20, 1.5, .leastNonzeroMagnitude, .greatestFiniteMagnitude]
        var float: Float = -0.5
        var limits: [Int64] = [.min, .max, 0, -24, -25, 255, 256, 65_535, 65_536]
        var unsigned: UInt64 = .max
        var small: Int8 = -128
        var bytes = Data((0...255).map { UInt8($0) })
        var missing: String? = nil
        var present: String? = "here"
        var nested: [String: [Int]] = ["b": [1, -1], "a": []]
        var shapes: [Shape] = [.circle(radius: 2), .label("x", 3), .none]
        var matrix: [[Bool]] = [[true, false], []]
        var date = Date(timeIntervalSinceReferenceDate: 12.5)
    }

    @Test func roundTripsEveryKindOfValue() throws {
        let value = Everything()
        let encoded = try CBOREncoder().encode(value)
        #expect(try CBORDecoder().decode(Everything.self, from: encoded) == value)
        // What JSON cannot carry travels bit for bit.
        let special: [Double] = [-0.0, .nan, -.nan]
        let decoded = try CBORDecoder().decode([Double].self, from: CBOREncoder().encode(special))
        #expect(decoded.map(\.bitPattern) == special.map(\.bitPattern))
        // An optional left out is absent, not null; one decoded from null is nil.
        #expect(!hex(encoded).contains(hex(Data("missing".utf8))))
        struct Optionals: Codable, Equatable { var a: Int? }
        #expect(try CBORDecoder().decode(Optionals.self, from: bytes("a16161f6")) == Optionals(a: nil))
    }

    /// A number is read into an integer only when it is a whole number that fits: never a trap.
    @Test func refusesNumbersThatDoNotFitWithoutTrapping() throws {
        let decoder = CBORDecoder()
        #expect(try decoder.decode(Int.self, from: CBOREncoder().encode(-0.0)) == 0)
        #expect(try decoder.decode(Int.self, from: CBOREncoder().encode(2.0)) == 2)
        for number in [1e20, .nan, .infinity, -.infinity, 1.5, -9.3e18, .leastNonzeroMagnitude] {
            #expect(throws: DecodingError.self, "\(number)") { _ = try decoder.decode(Int.self, from: CBOREncoder().encode(number)) }
        }
        #expect(throws: DecodingError.self) { _ = try decoder.decode(Int64.self, from: CBOREncoder().encode(UInt64.max)) }
        #expect(throws: DecodingError.self) { _ = try decoder.decode(UInt.self, from: CBOREncoder().encode(-1)) }
        #expect(throws: DecodingError.self) { _ = try decoder.decode(Int8.self, from: CBOREncoder().encode(128)) }
        #expect(throws: DecodingError.self) { _ = try decoder.decode(Int64.self, from: bytes("3bffffffffffffffff")) }
        #expect(throws: DecodingError.self) { _ = try decoder.decode(Float.self, from: CBOREncoder().encode(1e300)) }
        #expect(try decoder.decode(Float.self, from: CBOREncoder().encode(Double.infinity)) == .infinity)
        // Through the payload codec, a misfit is the bus's typeMismatch.
        let error = #expect(throws: BusError.self) { _ = try PayloadCodec.decode(Int.self, from: CBOREncoder().encode(1e20), format: .cbor) }
        #expect(error?.code == .typeMismatch)
    }

    /// Input an attacker chooses: every refusal is a thrown error, checked before allocating.
    @Test func refusesMalformedInput() throws {
        let decoder = CBORDecoder()
        let refused: [(String, String)] = [
            ("", "empty"),
            ("5bffffffffffffffff", "a byte string longer than the input"),
            ("7b7fffffffffffffff41", "a text string longer than the input"),
            ("9bffffffffffffffff", "an array longer than the input"),
            ("bb4000000000000000", "a map longer than the input"),
            ("62c328", "text that is not UTF-8"),
            ("62eda0", "a truncated multi-byte character"),
            ("a2616101616102", "a key twice"),
            ("a10102", "a key that is not text"),
            ("9f01ff", "an indefinite-length array"),
            ("7f6161ff", "an indefinite-length text"),
            ("c11a514b67b0", "a tag"),
            ("f0", "an unassigned simple value"),
            ("1c", "reserved additional information"),
            ("ff", "a lone break"),
            ("0100", "trailing bytes"),
            ("19ff", "a truncated head"),
        ]
        for (input, what) in refused {
            #expect(throws: DecodingError.self, "\(what)") { _ = try decoder.decode([String: Int].self, from: bytes(input)) }
        }
        // A map with many keys, one of them twice: 16 keys (compared with each other) and 17
        // (the set-checked path).
        for count in [16, 17] {
            var many = String(format: "%02x", 0xA0 + count)
            for key in 0..<(count - 1) { many += "61" + String(format: "%02x", 0x61 + key) + "01" }
            #expect(throws: DecodingError.self, "\(count)") { _ = try decoder.decode([String: Int].self, from: bytes(many + "616101")) }
            #expect(try decoder.decode([String: Int].self, from: bytes(many + "617a01")).count == count)
        }
        // Nesting past the limit is refused, not a stack overflow.
        let deep = Data(repeating: 0x81, count: 100_000) + Data([0x00])
        #expect(throws: DecodingError.self) { _ = try decoder.decode([Int].self, from: deep) }
        // Every prefix of a valid encoding is refused.
        let whole = try CBOREncoder().encode(Everything())
        for cut in 0..<whole.count {
            #expect(throws: DecodingError.self) { _ = try decoder.decode(Everything.self, from: whole.prefix(cut)) }
        }
    }

    /// Random bytes and random corruptions of a valid encoding never crash the decoder.
    @Test func survivesRandomInput() throws {
        var random = SeededRandom(seed: 19)
        let whole = try CBOREncoder().encode(Everything())
        for round in 0..<3_000 {
            var input: Data
            if round % 2 == 0 {
                input = Data((0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            } else {
                input = whole
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    input[Int.random(in: 0..<input.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
                }
            }
            // Decoded, or refused with a `DecodingError`: never another error, never a crash.
            for decode in [
                { _ = try CBORDecoder().decode(Everything.self, from: input) }, { _ = try CBORDecoder().decode([String: [Int]].self, from: input) },
            ] {
                do {
                    try decode()
                } catch is DecodingError {
                } catch {
                    Issue.record("round \(round): \(error) is not a DecodingError")
                }
            }
        }
    }

    @Test func theHeaderCarriesTheContentTypeWithinItsLimits() throws {
        var header = EnvelopeHeader(kind: .command, target: "a.b", typeName: "c", contentType: PayloadFormat.cborContentType)
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))).contentType == "application/cbor")
        header.contentType = String(repeating: "x", count: 255)
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))) == header)
        for refused in [String(repeating: "x", count: 256), "", "application/é", "a\nb"] {
            header.contentType = refused
            let error = #expect(throws: BusError.self) { _ = try HeaderCodec.encode(header) }
            #expect(error?.code == .badArgument)
        }
        // On the wire: twice, empty, or not ASCII is malformed.
        let base = try HeaderCodec.encode(EnvelopeHeader(kind: .command, target: "a.b"))
        for field in [[3, 0, 1, 0x61, 3, 0, 1, 0x62], [3, 0, 0], [3, 0, 2, 0xC3, 0xA9]] as [[UInt8]] {
            let error = #expect(throws: BusError.self) { _ = try HeaderCodec.decode(Data(base + field)) }
            #expect(error?.code == .malformed)
        }
        // Set by name only, never smuggled among the unknown fields.
        header.contentType = nil
        header.unknownFields = Data([3, 0, 1, 0x61])
        #expect(throws: BusError.self) { _ = try HeaderCodec.encode(header) }
    }

    @Test func aFormatIsNamedByItsContentType() throws {
        #expect(try PayloadFormat(contentType: nil) == .json)
        #expect(try PayloadFormat(contentType: "application/json") == .json)
        #expect(try PayloadFormat(contentType: "application/cbor") == .cbor)
        let error = #expect(throws: BusError.self) { _ = try PayloadFormat(contentType: "application/x-protobuf") }
        #expect(error?.code == .unsupportedContentType)
        // An empty payload is an empty map in either format.
        #expect(try PayloadCodec.decode(Empty.self, from: Data(), format: .cbor) == Empty())
    }
}
