import BusCore
import Foundation
import Logging
import MotherboardCore

extension MotherboardServer {
    /// `--policy`, else the manifest's `policy` (relative to the manifest), else `<state>/policy.json`.
    func policyPath(stateDirectory: String) -> String {
        if let path = options.policyPath { return path }
        if let path = options.manifest.policy {
            guard !path.hasPrefix("/"), let directory = options.manifest.directory else { return path }
            return "\(directory)/\(path)"
        }
        return "\(stateDirectory)/policy.json"
    }
}

/// The access policy file, read at start (an invalid one stops the start) and again whenever it
/// changes, on the routing loop's thread. A change that does not parse is reported and the policy
/// in force stays; a file removed leaves no policy (remote principals may do nothing).
final class PolicyFile {
    let path: String
    private(set) var policy = AccessPolicy()
    private(set) var text: String?
    private var stamp: FileStamp?
    private let logger: Logger

    init(path: String, logger: Logger) throws {
        self.path = path
        self.logger = logger
        stamp = FileStamp(path)
        if stamp != nil { try read() }
    }

    private func read() throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw BusError(.badArgument, "cannot read policy \(path)") }
        policy = try AccessPolicy.parse(data, source: path)
        text = String(decoding: data, as: UTF8.self)
        logger.notice("access policy read", metadata: ["file": "\(path)", "rules": "\(policy.rules.count)"])
    }

    /// Reads the file again if it changed; returns whether the policy in force changed.
    func refresh() -> Bool {
        let current = FileStamp(path)
        guard current != stamp else { return false }
        stamp = current
        guard current != nil else {
            policy = AccessPolicy()
            text = nil
            logger.notice("access policy removed: remote principals may do nothing", metadata: ["file": "\(path)"])
            return true
        }
        do {
            try read()
            return true
        } catch {
            logger.error(
                "access policy not changed: the new file is invalid; the policy read before stays in force",
                metadata: ["file": "\(path)", "error": "\((error as? BusError)?.message ?? "\(error)")"])
            return false
        }
    }
}

/// When a file last changed, as far as a look at it can tell (modification time and size).
struct FileStamp: Equatable {
    let seconds: Int
    let nanoseconds: Int
    let size: Int

    init?(_ path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        (seconds, nanoseconds, size) = (info.st_mtim.tv_sec, info.st_mtim.tv_nsec, Int(info.st_size))
    }
}

/// The audit log: each control operation a remote principal was allowed, one line each with its
/// time, appended to `<state>/audit.log` (mode 0600).
final class AuditLog: @unchecked Sendable {
    private let descriptor: Int32
    private let logger: Logger

    init(path: String, logger: Logger) {
        descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        self.logger = logger
        if descriptor < 0 { logger.error("cannot open the audit log", metadata: ["file": "\(path)", "errno": "\(errno)"]) }
    }

    deinit { if descriptor >= 0 { close(descriptor) } }

    func write(_ line: String) {
        let text = "\(Date().ISO8601Format()) \(line)\n"
        guard descriptor >= 0, text.withCString({ Foundation.write(descriptor, $0, strlen($0)) }) >= 0 else {
            return logger.notice("audit: \(line)")
        }
    }
}
