import BusCore
import BusZeroMQ
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
        (policy, text) = try AccessPolicy.load(path: path)
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
/// time, appended to `<state>/audit.log` (mode 0600), rotated before it passes `maximumBytes`
/// (the board logs' limit, `motherboard --max-log-bytes`), within each principal's rate. Written
/// on the routing loop.
final class AuditLog: @unchecked Sendable {
    /// Lines one principal may write a second, and in a burst: past them its lines are counted,
    /// not written, and a line says how many once it may write again. One principal's noise
    /// neither fills the disk nor rotates another's lines away.
    static let linesPerSecond = 10.0
    static let burst = 50.0
    /// Principals whose buckets are kept at once (the allow-list's names; more forgets them all).
    static let maximumPrincipals = 4_096

    let path: String
    /// The file is rotated (`audit.log.1`, … `.generations`) before it passes this size.
    let maximumBytes: Int
    let generations: Int
    private var descriptor: Int32
    private var size = 0
    private let logger: Logger
    private var buckets: [String: (tokens: Double, at: ContinuousClock.Instant, dropped: Int)] = [:]

    init(path: String, maximumBytes: Int = 10 << 20, generations: Int = 3, logger: Logger) {
        self.path = path
        self.maximumBytes = maximumBytes
        self.generations = max(1, generations)
        self.logger = logger
        descriptor = -1
        reopen()
    }

    deinit { if descriptor >= 0 { close(descriptor) } }

    private func reopen() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            return logger.error("cannot open the audit log", metadata: ["file": "\(path)", "errno": "\(errno)"])
        }
        var status = stat()
        size = fstat(descriptor, &status) == 0 ? Int(status.st_size) : 0
    }

    /// Writes `line` for `principal`, within its rate.
    func write(principal: String, _ line: String, now: ContinuousClock.Instant = .now) {
        if buckets[principal] == nil, buckets.count >= Self.maximumPrincipals { buckets.removeAll(keepingCapacity: true) }
        var bucket = buckets[principal] ?? (Self.burst, now, 0)
        let elapsed = bucket.at.duration(to: now).components
        let seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        bucket.tokens = min(Self.burst, bucket.tokens + max(0, seconds) * Self.linesPerSecond)
        bucket.at = now
        guard bucket.tokens >= 1 else {
            bucket.dropped += 1
            buckets[principal] = bucket
            return
        }
        bucket.tokens -= 1
        if bucket.dropped > 0 {
            append("\(principal) audit: \(bucket.dropped) line(s) not written (over \(Int(Self.linesPerSecond)) a second)")
            bucket.dropped = 0
        }
        buckets[principal] = bucket
        append(line)
    }

    private func append(_ line: String) {
        let text = "\(Date().ISO8601Format()) \(line)\n"
        let bytes = text.utf8.count
        if size > 0, size + bytes > maximumBytes { rotate() }
        guard descriptor >= 0, text.withCString({ Foundation.write(descriptor, $0, strlen($0)) }) >= 0 else {
            return logger.notice("audit: \(line)")
        }
        size += bytes
    }

    /// `audit.log` becomes `.1`, `.1` becomes `.2`, …; the oldest goes.
    private func rotate() {
        for generation in stride(from: generations - 1, through: 1, by: -1) {
            _ = rename("\(path).\(generation)", "\(path).\(generation + 1)")
        }
        _ = rename(path, "\(path).1")
        reopen()
    }
}
