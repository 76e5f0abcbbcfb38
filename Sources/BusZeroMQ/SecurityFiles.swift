import BusCore
import FoundationEssentials
import Glibc

// CURVE key files, the allow-list file, the credentials the environment names and the access
// policy file: the file side of the security types BusCore defines (which read and write text
// only).

extension AccessPolicy {
    /// Reads and checks a policy file; returns the policy and the file's text as it was read.
    public static func load(path: String) throws -> (policy: AccessPolicy, text: String) {
        guard let data = FileManager.default.contents(atPath: path) else { throw BusError(.badArgument, "cannot read policy \(path)") }
        return (try parse(data, source: path), String(decoding: data, as: UTF8.self))
    }
}

extension CurveKeyPair {
    /// Reads a certificate file (public key alone, or both). Also accepts a file holding only a
    /// public key on its first line.
    public static func load(path: String) throws -> CurveKeyPair {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw BusError(.badArgument, "cannot read key file \(path): \(readFailure(error))")
        }
        return try CurveKeyPair(certificate: text, source: path)
    }

    /// Writes the secret certificate with mode 0600 (created so: never readable by others, even briefly).
    public func writeSecret(to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw BusError(.badArgument, "cannot create key file \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard fchmod(descriptor, 0o600) == 0 else { throw BusError(.badArgument, "cannot set mode 0600 on \(path)") }
        let bytes = Array(certificate(includingSecret: true).utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count else { throw BusError(.badArgument, "cannot write key file \(path)") }
    }
}

extension CurveAllowList {
    /// The lines of the file at `path` that are a name and a key, and the others (see
    /// ``parse(_:source:)``); bytes that are not UTF-8 spoil only their lines. An empty list when
    /// there is no file; `badArgument` when it cannot be read.
    public static func loadSettingAside(path: String) throws -> (list: CurveAllowList, setAside: [SetAsideLine]) {
        guard FileManager.default.fileExists(atPath: path) else { return (CurveAllowList(), []) }
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            return parse(String(decoding: data, as: UTF8.self), source: path)
        } catch {
            throw BusError(.badArgument, "cannot read allow-list \(path): \(readFailure(error))")
        }
    }

    public static func load(path: String) throws -> CurveAllowList {
        guard FileManager.default.fileExists(atPath: path) else { return CurveAllowList() }
        do {
            return try CurveAllowList(parsing: try String(contentsOfFile: path, encoding: .utf8), source: path)
        } catch let error as BusError {
            throw error
        } catch {
            throw BusError(.badArgument, "cannot read allow-list \(path): \(readFailure(error))")
        }
    }
}

extension CurveClientCredentials {
    /// From the environment: `BOARDBUS_SERVER_KEY` (the broker's public key, or a file holding it)
    /// and `BOARDBUS_CLIENT_KEY` (the client's secret key file). Nil when neither is set; an error
    /// when only one is, or a file is unreadable.
    public static func resolve(environment: [String: String]) throws -> CurveClientCredentials? {
        let server = environment["BOARDBUS_SERVER_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        let client = environment["BOARDBUS_CLIENT_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        switch (server, client) {
        case (nil, nil): return nil
        case (let server?, let client?):
            let serverKey = CurveKeyPair.isKey(server) ? server : try CurveKeyPair.load(path: server).publicKey
            return try CurveClientCredentials(serverKey: serverKey, client: try CurveKeyPair.load(path: client))
        case (nil, _): throw BusError(.badArgument, "BOARDBUS_CLIENT_KEY is set but BOARDBUS_SERVER_KEY (the motherboard's public key) is not")
        case (_, nil): throw BusError(.badArgument, "BOARDBUS_SERVER_KEY is set but BOARDBUS_CLIENT_KEY (this client's key file) is not")
        }
    }
}

extension BusAddress {
    /// The CURVE credentials a connection to a `tcp://` endpoint uses: the address's own, else
    /// the environment's; nil for plaintext, which must be asked for (`insecureTCP`,
    /// `BOARDBUS_INSECURE=1`): a client without keys would otherwise wait out its deadline
    /// against a CURVE broker that ignores it.
    public func tcpCredentials(environment: [String: String]) throws -> CurveClientCredentials? {
        if let curve { return curve }
        if let resolved = try CurveClientCredentials.resolve(environment: environment) { return resolved }
        if insecureTCP || environment["BOARDBUS_INSECURE"] == "1" { return nil }
        throw BusError(
            .badArgument,
            "\(endpoint) is a tcp endpoint: set BOARDBUS_SERVER_KEY (the motherboard's public key, or its file) and BOARDBUS_CLIENT_KEY (this client's key file; make one with 'busctl keys new NAME'), or BOARDBUS_INSECURE=1 for a motherboard started with --insecure"
        )
    }
}

/// Why a text file could not be read, in words (FoundationEssentials' errors describe
/// themselves only by their code).
private func readFailure(_ error: any Error) -> String {
    guard let error = error as? CocoaError else { return "\(error)" }
    switch error.code {
    case .fileReadNoSuchFile, .fileNoSuchFile: return "no such file"
    case .fileReadNoPermission: return "permission denied"
    case .fileReadInapplicableStringEncoding, .fileReadCorruptFile: return "not UTF-8 text"
    default: return "error \(error.code.rawValue)"
    }
}
