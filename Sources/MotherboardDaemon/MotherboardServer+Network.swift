import BusCore
import MotherboardCore
import BusZeroMQ
import CBoardBusAcceptGuard
import Foundation
import Logging
import ServiceLifecycle

// Listening beyond the ipc socket: tcp endpoints with CURVE and the allow-list, the MDP endpoint.
extension MotherboardServer {
    static let inProcessEndpoint = "inproc://motherboard"

    /// What listening on tcp set up: the ZAP handler to stop, the allow-list it reads.
    struct NetworkSecurity {
        var zap: ZAPHandler?
        var allowList: AllowListFile?
        /// The broker's CURVE secret key, for other tcp endpoints (MDP); nil without CURVE.
        var curveSecretKey: String?
        /// Why the tcp endpoints (the MDP one on tcp too) stay closed: the broker's key file
        /// cannot be used. The ipc socket serves meanwhile.
        var closedBecause: BusError?
    }

    /// The MDP endpoint, with a relative ipc path made absolute in the runtime directory.
    func mdpEndpoint(_ address: BusAddress) throws -> String? {
        guard let endpoint = options.mdp ?? options.manifest.mdp else { return nil }
        if endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst(6))
            return path.hasPrefix("/") ? endpoint : "ipc://\(address.runtimeDirectory)/\(path)"
        }
        guard endpoint.hasPrefix("tcp://") else { throw BusError(.badArgument, "--mdp takes an ipc:// or tcp:// endpoint, not '\(endpoint)'") }
        return endpoint
    }

    /// Binds the tcp endpoints (after the ipc one: libzmq takes the security options of an
    /// endpoint when it is bound, so the ipc socket stays as it was). CURVE with the broker's key
    /// pair and a ZAP handler checking the allow-list, unless `--insecure`.
    /// An MDP endpoint on tcp (`mdpOnTCP`) is guarded as the main one: keys, allow-list, ZAP.
    func listenOnNetwork(
        socket: ZMQSocket, context: ZMQContext, address: BusAddress, stateDirectory: String, metrics: BrokerMetrics, mdpOnTCP: Bool
    ) throws -> NetworkSecurity {
        let endpoints = options.listen.isEmpty ? options.manifest.listen : options.listen
        guard !endpoints.isEmpty || mdpOnTCP else { return NetworkSecurity(zap: nil) }
        for endpoint in endpoints where !endpoint.hasPrefix("tcp://") {
            throw BusError(.badArgument, "--listen takes tcp://ADDRESS:PORT endpoints, not '\(endpoint)'")
        }
        let logger = logger
        var decide: @Sendable (ZAPHandler.Request) -> String?
        var secretKey: String?
        var allowList: AllowListFile?
        if options.insecure {
            logger.critical(
                "INSECURE: tcp endpoints without CURVE: anyone who reaches them can use the fleet", metadata: ["endpoints": "\(endpoints)"])
            FileHandle.standardError.write(
                Data("motherboard: WARNING: --insecure: \(endpoints.joined(separator: " ")) accept anyone, unencrypted\n".utf8))
            // Every peer is let in; the name marks its connection as a tcp one (for `list`'s host).
            decide = { _ in "insecure" }
        } else {
            let directory = "\(stateDirectory)/curve"
            try RuntimeDirectory.prepare(directory)
            for moved in try StateDirectory.adoptCurveFiles(from: "\(address.runtimeDirectory)/curve", to: directory) {
                logger.notice("moved a CURVE file from the runtime directory to the state directory", metadata: ["file": "\(moved)"])
            }
            let keyPath = options.curveKeyPath ?? "\(directory)/server.key"
            let keys: CurveKeyPair
            do {
                let created: Bool
                (keys, created) = try CurveKeyPair.loadOrCreate(path: keyPath, name: "motherboard")
                if created { logger.notice("made the motherboard's CURVE key pair", metadata: ["file": "\(keyPath)"]) }
            } catch {
                // Kept as it is (a new pair would change the key every client trusts), and no tcp
                // endpoint opens without it; the fleet on this host is served over ipc.
                let reason = error as? BusError ?? BusError(.badArgument, "key file \(keyPath): \(error)")
                logger.critical(
                    "the tcp endpoints stay closed: the broker's key file cannot be used (fix it and restart)",
                    metadata: ["file": "\(keyPath)", "error": "\(reason.message)", "endpoints": "\(endpoints)"])
                FileHandle.standardError.write(Data("motherboard: tcp endpoints closed: \(reason.message)\n".utf8))
                return NetworkSecurity(zap: nil, closedBecause: reason)
            }
            try keys.certificate(includingSecret: false).write(toFile: "\(directory)/server.pub", atomically: true, encoding: .utf8)
            let allowListPath = options.allowListPath ?? "\(directory)/allowed.keys"
            // A line that is not a name and a key refuses only its own key: the broker starts.
            let (known, setAside) = try CurveAllowList.loadSettingAside(path: allowListPath)
            for line in setAside {
                logger.error(
                    "allow-list: a line was set aside (its key is refused until it is fixed)",
                    metadata: ["file": "\(allowListPath)", "line": "\(line.number)", "error": "\(line.error.message)"])
            }
            if !setAside.isEmpty {
                let numbers = setAside.prefix(10).map { String($0.number) }.joined(separator: ", ")
                FileHandle.standardError.write(
                    Data("motherboard: allow-list \(allowListPath): \(setAside.count) line(s) set aside (line \(numbers))\n".utf8))
            }
            if known.names.isEmpty {
                logger.warning("the allow-list is empty: no client can connect over tcp yet", metadata: ["file": "\(allowListPath)"])
            }
            let file = AllowListFile(path: allowListPath, list: known, logger: logger)
            allowList = file
            decide = { request in
                if request.mechanism == "CURVE", let key = request.publicKey, let name = file.name(of: key) { return name }
                metrics.countRefusedConnection(reason: "key")
                logger.warning(
                    "connection refused: key not in the allow-list",
                    metadata: [
                        "address": "\(request.address)", "mechanism": "\(request.mechanism)", "key": "\(request.publicKey ?? "none")",
                        "allowList": "\(file.path)",
                    ])
                return nil
            }
            secretKey = keys.secretKey
            try socket.set(.curveServer(true), .curveSecretKey(keys.secretKey ?? ""))
        }
        let zap = try ZAPHandler(context: context, decide: decide)
        try socket.set(.zapDomain("boardbus"))
        do {
            for endpoint in endpoints {
                try socket.bind(endpoint)
                logger.info("listening", metadata: ["endpoint": "\(endpoint)", "security": "\(options.insecure ? "none" : "CURVE")"])
            }
        } catch {
            zap.stop()
            throw error
        }
        return NetworkSecurity(zap: zap, allowList: allowList, curveSecretKey: secretKey)
    }

    /// Returns on SIGTERM/SIGINT (graceful shutdown) or, with `exitWithParent`, when the parent exits.
}

/// The allow-list file, read again whenever it changes (so that a key is added or removed without
/// a restart), from the ZAP thread and the routing loop. A change that does not parse is reported
/// once, with its line, and the list in force stays: a typo never locks every peer out.
final class AllowListFile: @unchecked Sendable {
    let path: String
    private let lock = NSLock()
    private var list: CurveAllowList
    private var stamp: FileStamp?
    private let logger: Logger

    /// `list` is the one read at start (its bad lines set aside); a later change must parse whole.
    init(path: String, list: CurveAllowList, logger: Logger) {
        self.path = path
        self.list = list
        self.logger = logger
        stamp = FileStamp(path)
    }

    func name(of key: String) -> String? {
        lock.withLock {
            refreshLocked()
            return list.name(of: key)
        }
    }

    /// Reads the file again if it changed; returns the names whose keys it no longer has (once:
    /// whichever thread reads the change first keeps them for ``takeRevoked()``).
    func refresh() {
        lock.withLock { refreshLocked() }
    }

    /// The names and the keys (Z85) removed from the list since the last call: a key replaced
    /// under the same name is among the keys, not the names.
    func takeRevoked() -> (names: Set<String>, keys: Set<String>) {
        lock.withLock {
            defer { (revoked, revokedKeys) = ([], []) }
            return (revoked, revokedKeys)
        }
    }

    private var revoked: Set<String> = []
    private var revokedKeys: Set<String> = []

    /// The names and the keys the list in force has.
    var listed: (names: Set<String>, keys: Set<String>) {
        lock.withLock { (Set(list.names.values), Set(list.names.keys)) }
    }

    private func refreshLocked() {
        let current = FileStamp(path)
        guard current != stamp else { return }
        stamp = current
        do {
            let before = list
            list = try CurveAllowList.load(path: path)
            revoked.formUnion(Set(before.names.values).subtracting(list.names.values))
            revokedKeys.formUnion(Set(before.names.keys).subtracting(list.names.keys))
            logger.notice("allow-list read again", metadata: ["file": "\(path)", "keys": "\(list.names.count)"])
        } catch {
            logger.error(
                "allow-list not changed: the new file is invalid; the list read before stays in force",
                metadata: ["file": "\(path)", "error": "\((error as? BusError)?.message ?? "\(error)")"])
        }
    }
}

/// The runtime directory (and the state directory, and their `curve` directory): created with
/// mode 0700, since a socket in it gives access to the fleet and what is kept there is secret.
public enum RuntimeDirectory {
    public static func prepare(_ path: String, what: String = "runtime directory") throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw BusError(.badArgument, "cannot create \(what) \(path): \(error.localizedDescription)")
        }
        guard chmod(path, 0o700) == 0 else {
            throw BusError(.badArgument, "cannot set mode 0700 on \(what) \(path)")
        }
    }
}
