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
