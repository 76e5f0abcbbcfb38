import BusCore
import FlyingFox
import FlyingSocks
import Foundation
import Logging
import Synchronization

/// Serves the broker's metrics over HTTP at `/metrics`, in the Prometheus text format, for a
/// Prometheus scraper (`motherboard --metrics-listen 127.0.0.1:9464`). Only `GET /metrics` (and
/// `HEAD`) is answered; anything else is 404. The server is FlyingFox's, on its own tasks: a
/// scrape reads the registry, which is safe from any thread, and never touches the routing loop.
public final class MetricsEndpoint: Sendable {
    /// Where to listen: an IPv4 or IPv6 literal and a port (0: any free one).
    public struct Address: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: UInt16
        public var isIPv6: Bool { host.contains(":") }
        public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The Prometheus text format's content type.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    private let server: HTTPServer
    /// The port it listens on (the one chosen when 0 was asked for).
    public let port: UInt16

    /// Reads `HOST:PORT` (`127.0.0.1:9464`, `[::1]:9464`); a host must be an IP literal.
    public static func parse(_ text: String) throws(BusError) -> Address {
        let host: Substring
        let port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            guard text[close...].hasPrefix("]:") else { throw refusal(text) }
            port = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw refusal(text) }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard let number = UInt16(port), isIPLiteral(String(host)) else { throw refusal(text) }
        return Address(host: String(host), port: number)
    }

    private static func refusal(_ text: String) -> BusError {
        BusError(.badArgument, "metrics address '\(text.escapedForDisplay())' is not HOST:PORT with an IP address (e.g. 127.0.0.1:9464)")
    }

    private static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// Starts listening; returns once the socket is bound (throws `badArgument` when it cannot be).
    public init(address: Address, metrics: BrokerMetrics, logger: Logger) async throws {
        let socketAddress: any SocketAddress =
            address.isIPv6
            ? try sockaddr_in6.inet6(ip6: address.host, port: address.port) : try sockaddr_in.inet(ip4: address.host, port: address.port)
        server = HTTPServer(address: socketAddress, timeout: 15, logger: .disabled)
        await server.appendRoute("GET,HEAD /metrics") { _ in
            HTTPResponse(statusCode: .ok, headers: [.contentType: Self.contentType], body: Data(metrics.exposition().utf8))
        }
        let server = self.server
        let failure = Mutex<(any Error)?>(nil)
        let task = Task {
            do { try await server.run() } catch { failure.withLock { $0 = error } }
        }
        // Listening, or the reason it is not (an address in use, one this host does not have).
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while await server.listeningAddress == nil {
            if let error = failure.withLock({ $0 }) {
                throw BusError(.badArgument, "cannot serve metrics at \(address): \(error)")
            }
            guard ContinuousClock.now < deadline else {
                task.cancel()
                throw BusError(.timeout, "cannot serve metrics at \(address): not listening after 5 s")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        switch await server.listeningAddress {
        case .ip4(_, let bound)?, .ip6(_, let bound)?: port = bound
        default: port = address.port
        }
        let bound = Address(host: address.host, port: port)
        logger.info("metrics served", metadata: ["url": "http://\(bound)/metrics"])
    }

    public func stop() async {
        await server.stop(timeout: 1)
    }
}
