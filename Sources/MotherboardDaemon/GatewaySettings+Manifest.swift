import BusCore
import BusZeroMQ
import BusNATS
import Foundation
import MotherboardCore
import MotherboardGateways

// The gateways' settings as the manifest gives them: the daemon reads the manifest, the gateways
// know only their settings.

extension NATSGatewaySettings {
    /// From the manifest's `nats` (relative file paths from the manifest's directory).
    package init(manifest nats: FleetManifest.NATS, directory: String?) throws {
        func resolved(_ path: String?) -> String? {
            guard let path, let directory, !path.hasPrefix("/") else { return path }
            return "\(directory)/\(path)"
        }
        try self.init(
            nats: NATSSettings(
                servers: nats.servers, name: nats.host, credentialsFile: resolved(nats.credentials), tlsCAFile: resolved(nats.tlsCA)),
            fleet: nats.fleet ?? Self.defaultFleet, host: nats.host ?? ProcessInfo.processInfo.hostName,
            principal: nats.principal ?? Self.defaultPrincipal, maximumInFlight: nats.maximumInFlight ?? Self.defaultMaximumInFlight)
    }
}

extension UplinkSettings {
    /// From the manifest's `attach` (keys as given there, relative paths from the manifest's
    /// directory; else from the environment).
    package init(manifest attach: FleetManifest.Attach, directory: String?) throws {
        var environment = ProcessInfo.processInfo.environment
        func resolved(_ path: String) -> String {
            guard let directory, !path.hasPrefix("/"), !CurveKeyPair.isKey(path) else { return path }
            return "\(directory)/\(path)"
        }
        if let key = attach.serverKey { environment["BOARDBUS_SERVER_KEY"] = resolved(key) }
        if let key = attach.clientKey { environment["BOARDBUS_CLIENT_KEY"] = resolved(key) }
        let credentials = attach.insecure == true ? nil : try CurveClientCredentials.resolve(environment: environment)
        guard credentials != nil || attach.insecure == true else {
            throw BusError(.badArgument, "attach needs serverKey and clientKey (or insecure: true for a parent started with --insecure)")
        }
        try self.init(endpoint: attach.address, credentials: credentials)
    }
}
