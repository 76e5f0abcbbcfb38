import BusCore
import Foundation

/// Where the broker serves its metrics over HTTP: an IPv4 or IPv6 literal and a port (0: any
/// free one). Read from the manifest's `metricsListen` and `motherboard --metrics-listen`.
public struct MetricsAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: UInt16
    public var isIPv6: Bool { host.contains(":") }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Reads `HOST:PORT` (`127.0.0.1:9464`, `[::1]:9464`); a host must be an IP literal.
    public init(parsing text: String) throws(BusError) {
        let host: Substring
        let port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            guard text[close...].hasPrefix("]:") else { throw Self.refusal(text) }
            port = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw Self.refusal(text) }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard let number = UInt16(port), Self.isIPLiteral(String(host)) else { throw Self.refusal(text) }
        self.init(host: String(host), port: number)
    }

    private static func refusal(_ text: String) -> BusError {
        BusError(.badArgument, "metrics address '\(text.escapedForDisplay())' is not HOST:PORT with an IP address (e.g. 127.0.0.1:9464)")
    }

    private static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
