import Foundation
import Testing

@testable import BusCodec

/// The header's fields and CBOR's text strings are read with `String(validUTF8:)`, a fast path
/// around the standard library's generic validation: it must accept and refuse exactly what that
/// does, at the sizes where it switches from one way to the other.
@Suite("UTF-8 text")
struct UTF8TextTests {
    static let samples: [[UInt8]] = [
        [], Array("plain ascii".utf8), Array("Xin chào, thế giới 👋".utf8), [0xEF, 0xBF, 0xBD],  // valid, incl. U+FFFD itself
        [0x80], [0xC0, 0xAF], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80],  // lone continuation, overlong, surrogate
        [0xF0, 0x90, 0x80, 0x61],  // a 4-byte sequence cut after 3: replaced by one U+FFFD, as long as what it replaces
        [0xF4, 0x90, 0x80, 0x80], [0xFF], [0x61, 0xE2, 0x82],  // past U+10FFFF, never valid, cut at the end
    ]

    @Test(arguments: samples)
    func agreesWithTheStandardLibrary(_ sample: [UInt8]) {
        // Alone, and inside text long enough to take the other path.
        for padding in [0, 300] {
            let bytes = Array(repeating: UInt8(ascii: "a"), count: padding) + sample + Array(repeating: UInt8(ascii: "b"), count: padding / 3)
            let expected = bytes.withUnsafeBufferPointer { String(validating: $0, as: UTF8.self) }
            let got = bytes.withUnsafeBytes { String(validUTF8: $0) }
            #expect(got == expected, "\(sample) with \(padding) bytes before")
        }
    }

    /// The ASCII check reads eight bytes at a time and the rest one by one: a byte with its high
    /// bit set is found at every position, in every length around the word size, at any alignment.
    @Test
    func aNonASCIIByteIsFoundWhereverItIs() {
        let storage = Array(repeating: UInt8(ascii: "a"), count: 40)
        for start in 0..<8 {
            for count in 0..<25 {
                var bytes = storage
                let plain = bytes.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[start..<start + count]).isASCII }
                #expect(plain, "\(count) ASCII bytes at \(start)")
                for position in 0..<count {
                    bytes[start + position] = 0x80
                    let found = bytes.withUnsafeBytes { !UnsafeRawBufferPointer(rebasing: $0[start..<start + count]).isASCII }
                    #expect(found, "0x80 at \(position) of \(count), from \(start)")
                    bytes[start + position] = UInt8(ascii: "a")
                }
                // A high byte just outside is not counted.
                if start > 0 { bytes[start - 1] = 0xFF }
                bytes[start + count] = 0xFF
                let outside = bytes.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[start..<start + count]).isASCII }
                #expect(outside, "high bytes around \(count) at \(start)")
            }
        }
    }
}
