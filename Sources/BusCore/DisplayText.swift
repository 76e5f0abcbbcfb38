import Foundation

extension String {
    /// The text as it may be shown inside one line of a message, a terminal or a log: control
    /// characters escaped (`\n`, `\t`, `\u{1B}`…) so that a name cannot break a line or drive a
    /// terminal, and cut after `limit` characters with its full size said.
    public func escapedForDisplay(limit: Int = 120) -> String {
        var shown = ""
        var count = 0
        for scalar in unicodeScalars {
            if count == limit {
                return shown + "…(\(utf8.count) bytes)"
            }
            switch scalar {
            case "\n": shown += "\\n"
            case "\r": shown += "\\r"
            case "\t": shown += "\\t"
            default:
                if scalar.properties.generalCategory == .control || scalar.properties.generalCategory == .format
                    || scalar.properties.generalCategory == .lineSeparator || scalar.properties.generalCategory == .paragraphSeparator
                {
                    shown += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
                } else {
                    shown.unicodeScalars.append(scalar)
                }
            }
            count += 1
        }
        return shown
    }
}

extension String {
    /// The text of `bytes` when they are valid UTF-8, else nil: for the header's fields and CBOR's
    /// text strings, read on every message. Not `String(validating:as:)`, which is generic over
    /// the encoding and looks up type metadata on every call: `String(decoding:)` is the fast
    /// path, and replaces each invalid sequence (never by the bytes it replaced), so the text is
    /// valid exactly when it encodes to the same bytes.
    init?(validUTF8 bytes: UnsafeRawBufferPointer) {
        // Long text: one pass that validates and copies beats decoding and comparing, and the
        // look-up is paid once for many bytes.
        if bytes.count > 256 {
            guard let text = String(validating: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self) else { return nil }
            self = text
            return
        }
        var text = String(decoding: bytes, as: UTF8.self)
        let same = text.withUTF8 { utf8 in
            utf8.count == bytes.count && (bytes.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
        }
        guard same else { return nil }
        self = text
    }
}
