import Foundation
import Testing

@testable import BusCore

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
}
