import BusCore
import BusZeroMQ
import Foundation
import Logging

/// Something in front of the bus that speaks another protocol (Majordomo) or to another
/// motherboard (the uplink to a parent). Each runs on a thread of its own (``HelperThread``) and
/// reaches the routing loop over the broker's in-process endpoint, as a client and as the boards
/// it serves (``HelperBoard``). The server starts the gateways it is given once the routing loop
/// runs, and stops them, last first, before it stops the fleet.
///
/// A new gateway is a file of this module and one case in ``Gateways/make(_:environment:)``.
package protocol Gateway: AnyObject {
    /// For logs: what it is and where (`Majordomo at ipc://…`).
    var description: String { get }
    func start()
    func stop()
}

/// What the server gives every gateway.
package struct GatewayEnvironment {
    /// The broker's ZeroMQ context (its ZAP handler checks a gateway's tcp peers too).
    package let context: ZMQContext
    /// The routing loop's in-process endpoint.
    package let localEndpoint: String
    package let limits: BusLimits
    package let logger: Logger
    /// The broker's CURVE secret key, for a gateway that listens on tcp; nil without CURVE.
    package let curveSecretKey: String?
    /// Called with a gateway's listening socket before it binds, so that its connections count
    /// toward the broker's limit.
    package let watchConnections: (ZMQSocket) throws -> Void
    /// Told the key of each new tcp connection (for revocation), and asked whether a key was
    /// revoked.
    package let keys: any ConnectionKeys

    package init(
        context: ZMQContext, localEndpoint: String, limits: BusLimits, logger: Logger, curveSecretKey: String?,
        watchConnections: @escaping (ZMQSocket) throws -> Void, keys: any ConnectionKeys
    ) {
        self.context = context
        self.localEndpoint = localEndpoint
        self.limits = limits
        self.logger = logger
        self.curveSecretKey = curveSecretKey
        self.watchConnections = watchConnections
        self.keys = keys
    }
}

/// The broker's record of the CURVE keys its tcp connections authenticated with, which a
/// gateway's tcp endpoint shares: each connection's key is noted with its first message, and a
/// message of a key removed from the allow-list is dropped and its connection closed.
package protocol ConnectionKeys: Sendable {
    /// A message came on a new connection (`descriptor`) with the key named `name` (`curveKey`,
    /// Z85: the connection's `X-Curve-Key` property).
    func noteKey(_ name: String, curveKey: String?, descriptor: Int32)
    /// Whether any key is revoked now: until one is, nobody needs to read a message's key.
    var hasRevokedCurveKeys: Bool { get }
    /// Whether `curveKey` was removed from the allow-list (and not listed again).
    func isRevoked(curveKey: String) -> Bool
    /// A message with the revoked key came on `descriptor`: its connection is closed, unless the
    /// descriptor is known to be another connection's by now.
    func closeRevoked(descriptor: Int32, name: String, curveKey: String?)
}

/// No tcp peers: nothing to note, nothing revoked.
package struct NoConnectionKeys: ConnectionKeys {
    package init() {}
    package func noteKey(_ name: String, curveKey: String?, descriptor: Int32) {}
    package var hasRevokedCurveKeys: Bool { false }
    package func isRevoked(curveKey: String) -> Bool { false }
    package func closeRevoked(descriptor: Int32, name: String, curveKey: String?) {}
}

/// The gateways a motherboard can run, and how each is built.
package enum Gateways {
    package enum Configuration {
        /// Majordomo (MDP 0.2) at an `ipc://` or `tcp://` endpoint.
        case majordomo(endpoint: String)
        /// The uplink to a parent motherboard, proving itself to its own motherboard with `secret`.
        case uplink(UplinkSettings, secret: String)
        /// A NATS cluster, proving itself to its own motherboard with `secret`.
        case nats(NATSGatewaySettings, secret: String)
    }

    package static func make(_ configuration: Configuration, environment: GatewayEnvironment) throws -> any Gateway {
        switch configuration {
        case .majordomo(let endpoint):
            try MajordomoBridge(
                settings: .init(endpoint: endpoint, limits: environment.limits), context: environment.context,
                localEndpoint: environment.localEndpoint, curveSecretKey: environment.curveSecretKey, logger: environment.logger,
                beforeBind: environment.watchConnections, keys: environment.keys)
        case .uplink(let settings, let secret):
            try Uplink(
                settings: settings, context: environment.context, localEndpoint: environment.localEndpoint, secret: secret,
                limits: environment.limits, logger: environment.logger)
        case .nats(let settings, let secret):
            try NATSGateway(
                settings: settings, context: environment.context, localEndpoint: environment.localEndpoint, secret: secret,
                limits: environment.limits, logger: environment.logger)
        }
    }
}

extension Gateways.Configuration: CustomStringConvertible {
    /// For logs (no secret, no password).
    package var description: String {
        switch self {
        case .majordomo(let endpoint): "Majordomo at \(endpoint)"
        case .uplink(let settings, _): "uplink to \(settings.endpoint)"
        case .nats(let settings, _): settings.description
        }
    }
}

extension MajordomoBridge: Gateway {
    package var description: String { "Majordomo (MDP 0.2) at \(settings.endpoint)" }
}

extension Uplink: Gateway {
    package var description: String { "uplink to \(settings.endpoint)" }
}
