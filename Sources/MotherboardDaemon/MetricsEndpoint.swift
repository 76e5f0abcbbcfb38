import BusCore
import MotherboardCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// Serves the broker's metrics over HTTP at `/metrics`, in the Prometheus text format, for a
/// Prometheus scraper (`motherboard --metrics-listen 127.0.0.1:9464`). Only `GET /metrics` (and
/// `HEAD`) is answered; anything else is 404. It runs on one SwiftNIO event loop of its own: a
/// scrape reads the registry, which is safe from any thread, and never touches the routing loop.
///
/// Whoever can reach the port is a stranger (another local user, on loopback), so what it may
/// hold is bounded: at most ``maximumConnections`` connections at once (one more is closed as
/// soon as it is accepted), each closed ``headTimeout`` after it opened unless its request head
/// has come by then (idle and slowloris peers), and after its answer (`Connection: close`).
/// Request heads are bounded by SwiftNIO's HTTP parser (80 KiB). Nothing it meets stops it: a
/// refused or failed accept only waits for the next connection.
public final class MetricsEndpoint: Sendable {
    public typealias Address = MetricsAddress

    /// The Prometheus text format's content type.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"
    /// Connections served at once.
    public static let maximumConnections = 16
    /// How long a connection may take to send its request head.
    public static let headTimeout: TimeAmount = .seconds(3)

    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel
    /// The port it listens on (the one chosen when 0 was asked for).
    public let port: UInt16

    /// Reads `HOST:PORT` (`127.0.0.1:9464`, `[::1]:9464`); a host must be an IP literal.
    public static func parse(_ text: String) throws(BusError) -> Address { try MetricsAddress(parsing: text) }

    /// Starts listening; returns once the socket is bound (throws `badArgument` when it cannot be).
    public init(address: Address, metrics: BrokerMetrics, logger: Logger) async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let limit = ConnectionCount(maximum: Self.maximumConnections, logger: logger)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(limit) } }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(MetricsScrape(metrics: metrics))
                }
            }
            .childChannelOption(.allowRemoteHalfClosure, value: false)
        do {
            channel = try await bootstrap.bind(host: address.host, port: Int(address.port)).get()
        } catch {
            try? await group.shutdownGracefully()
            throw BusError(.badArgument, "cannot serve metrics at \(address): \(error)")
        }
        port = UInt16(channel.localAddress?.port ?? Int(address.port))
        logger.info(
            "metrics served",
            metadata: ["url": "http://\(Address(host: address.host, port: port))/metrics", "maximumConnections": "\(Self.maximumConnections)"])
    }

    public func stop() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }
}

/// On the listening channel: counts the open connections and closes one past the maximum as
/// soon as it is accepted (logged at most once a second).
private final class ConnectionCount: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = any Channel
    // Touched on the listening channel's event loop only.
    private var open = 0
    private var refusals = LogThrottle(every: .seconds(1))
    private let maximum: Int
    private let logger: Logger

    init(maximum: Int, logger: Logger) {
        self.maximum = maximum
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        guard open < maximum else {
            child.close(promise: nil)
            if let refused = refusals.note() {
                logger.warning("metrics connection refused: too many open", metadata: ["open": "\(open)", "refused": "\(refused)"])
            }
            return
        }
        open += 1
        let loop = context.eventLoop
        child.closeFuture.hop(to: loop).whenComplete { _ in self.open -= 1 }
        context.fireChannelRead(data)
    }

    /// A failed accept (no descriptor, the peer gone) does not close the listener.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}

/// Answers one request on a connection, then closes it; closes it unanswered when its request
/// head has not come within ``MetricsEndpoint/headTimeout``.
private final class MetricsScrape: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private let metrics: BrokerMetrics
    private var request: HTTPRequestHead?
    private var deadline: Scheduled<Void>?

    init(metrics: BrokerMetrics) { self.metrics = metrics }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: MetricsEndpoint.headTimeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            deadline?.cancel()
            request = head
        case .body:
            break
        case .end:
            guard let head = request else { return }
            request = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        let found = path == "/metrics" && (head.method == .GET || head.method == .HEAD)
        let body = found ? Data(metrics.exposition().utf8) : Data("not found\n".utf8)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: found ? MetricsEndpoint.contentType : "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.count)")
        headers.add(name: "Connection", value: "close")
        let status: HTTPResponseStatus = found ? .ok : .notFound
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}
