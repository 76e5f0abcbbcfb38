import FoundationEssentials
import Glibc

/// Where a fleet lives: its runtime directory and the broker's endpoint.
///
/// Resolution order (docs/PROTOCOL.md, "Finding the bus"):
/// - runtime dir: `$BOARDBUS_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/boardbus`, else `/tmp/boardbus-$UID`;
/// - endpoint: an explicit `--bus`, else `$BOARDBUS_ADDRESS`, else `ipc://<runtime dir>/motherboard.sock`.
public struct BusAddress: Sendable, Hashable {
    /// The file name of the broker socket inside the runtime directory.
    public static let socketName = "motherboard.sock"

    /// The runtime directory of the fleet.
    public var runtimeDirectory: String
    /// The ZeroMQ endpoint of the broker, e.g. `ipc:///tmp/boardbus-0/motherboard.sock`.
    public var endpoint: String
    /// For a `tcp://` endpoint: the broker's public key and this client's key pair. When nil, a
    /// client takes them from `BOARDBUS_SERVER_KEY` and `BOARDBUS_CLIENT_KEY`.
    public var curve: CurveClientCredentials?
    /// For a `tcp://` endpoint of a broker started with `--insecure`: plaintext, no keys (also
    /// `BOARDBUS_INSECURE=1`).
    public var insecureTCP = false

    public init(runtimeDirectory: String, endpoint: String? = nil) {
        self.runtimeDirectory = runtimeDirectory
        self.endpoint = endpoint ?? "ipc://\(runtimeDirectory)/\(BusAddress.socketName)"
    }

    /// Resolves the address from an explicit endpoint and the environment.
    public static func resolve(explicitEndpoint: String? = nil, environment: [String: String], userID: UInt32) -> BusAddress {
        let runtime = runtimeDirectory(environment: environment, userID: userID)
        let endpoint = explicitEndpoint ?? environment["BOARDBUS_ADDRESS"].flatMap { $0.isEmpty ? nil : $0 }
        return BusAddress(runtimeDirectory: runtime, endpoint: endpoint)
    }

    /// The runtime directory named by the environment.
    public static func runtimeDirectory(environment: [String: String], userID: UInt32) -> String {
        if let explicit = environment["BOARDBUS_RUNTIME_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return "\(xdg)/boardbus" }
        return "/tmp/boardbus-\(userID)"
    }

    /// The state directory named by the environment: where what must outlive the broker lives
    /// (store databases, the CURVE key pair, the allow-list). `$BOARDBUS_STATE_DIR`, else
    /// `$XDG_STATE_HOME/boardbus`, else `~/.local/state/boardbus` (`$HOME`, else the user's home
    /// in the password database). Unlike the runtime directory, which systemd removes when the
    /// service stops, it is kept.
    public static func stateDirectory(environment: [String: String], userID: UInt32) -> String {
        if let explicit = environment["BOARDBUS_STATE_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty { return "\(xdg)/boardbus" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? homeDirectory(of: userID) ?? "/tmp/boardbus-state-\(userID)"
        return "\(home)/.local/state/boardbus"
    }

    private static func homeDirectory(of userID: UInt32) -> String? {
        guard let entry = getpwuid(userID), let directory = entry.pointee.pw_dir else { return nil }
        return String(cString: directory)
    }

    /// Whether the endpoint is `tcp://` (another host, or this one's network stack).
    public var isTCP: Bool { endpoint.hasPrefix("tcp://") }

    /// The socket path when the endpoint is `ipc://`, else nil.
    public var ipcPath: String? {
        endpoint.hasPrefix("ipc://") ? String(endpoint.dropFirst("ipc://".count)) : nil
    }
}
