import FoundationEssentials
import Glibc

extension String {
    /// The text of `bytes` when they are valid UTF-8, else nil: for the header's fields and CBOR's
    /// text strings, read on every message. Not `String(validating:as:)`, which is generic over
    /// the encoding and looks up type metadata on every call: `String(decoding:)` is the fast
    /// path, and replaces each invalid sequence (never by the bytes it replaced), so the text is
    /// valid exactly when it encodes to the same bytes.
    package init?(validUTF8 bytes: UnsafeRawBufferPointer) {
        // Long text: one pass that validates and copies beats decoding and comparing, and the
        // look-up is paid once for many bytes.
        if bytes.count > 256 {
            guard let text = String(validating: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self) else { return nil }
            self = text
            return
        }
        let text = String(decoding: bytes, as: UTF8.self)
        // ASCII (nearly every header field) is valid as it is; other text must come back unchanged.
        guard bytes.isASCII || text.hasUTF8(bytes) else { return nil }
        self = text
    }
}

extension UnsafeRawBufferPointer {
    /// Whether every byte is below 0x80: 32 at a time in four independent words (long CBOR
    /// text is checked this way before it is read), then eight, then one.
    package var isASCII: Bool {
        var offset = 0
        var high: UInt64 = 0
        while offset + 32 <= count {
            high |=
                loadUnaligned(fromByteOffset: offset, as: UInt64.self) | loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
                | loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self) | loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self)
            offset += 32
        }
        while offset + 8 <= count {
            high |= loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        while offset < count {
            high |= UInt64(self[offset])
            offset += 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }
}

extension UnsafeRawBufferPointer {
    /// Whether these are the same bytes as `other`: one `memcmp`.
    package func hasSameBytes(as other: UnsafeRawBufferPointer) -> Bool {
        count == other.count && (isEmpty || memcmp(baseAddress!, other.baseAddress!, count) == 0)
    }

    /// Whether the bytes are valid UTF-8 (ASCII without decoding them).
    var isValidUTF8: Bool { isASCII || String(validUTF8: self) != nil }
}

extension String {
    /// Whether the text's UTF-8 is exactly `bytes`: one `memcmp`, where `utf8.elementsEqual`
    /// walks the view a byte at a time (for header fields compared on every message).
    package func hasUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var text = self
        return text.withUTF8 { UnsafeRawBufferPointer($0).hasSameBytes(as: bytes) }
    }

    /// Whether every byte of the text's UTF-8 is below 0x80.
    var isASCII: Bool {
        var text = self
        return text.withUTF8 { UnsafeRawBufferPointer($0).isASCII }
    }
}
