import BusCore
import MotherboardCore
import Foundation

/// The state directory: what must outlive the broker (the stores of its boards, its CURVE key
/// pair, the allow-list), apart from the runtime directory, which systemd removes whenever the
/// service stops. Mode 0700.
public enum StateDirectory {
    /// The claim of one broker on a state directory: an exclusive `flock` on `motherboard.lock`,
    /// which the kernel releases when the broker's process ends, however it ends.
    public final class Claim: Sendable {
        private let descriptor: Int32
        init(descriptor: Int32) { self.descriptor = descriptor }

        public func release() { close(descriptor) }
    }

    /// Creates the directory (mode 0700) and claims it for this broker. Two fleets on one state
    /// directory would share their stores' databases, so a second broker is refused, with the
    /// runtime directory and pid of the one that holds it.
    public static func claim(_ path: String, runtimeDirectory: String) throws -> Claim {
        try RuntimeDirectory.prepare(path, what: "state directory")
        let lockPath = "\(path)/motherboard.lock"
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw BusError(.badArgument, "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: lockPath, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            close(descriptor)
            throw BusError(
                .idInUse,
                "the state directory \(path) is in use by another motherboard (\(holder.isEmpty ? "unknown" : holder)); give each fleet its own with --state-dir or BOARDBUS_STATE_DIR"
            )
        }
        let owner = "pid \(getpid()), runtime directory \(runtimeDirectory)\n"
        _ = ftruncate(descriptor, 0)
        _ = owner.withCString { pwrite(descriptor, $0, strlen($0), 0) }
        return Claim(descriptor: descriptor)
    }

    /// CURVE files that an earlier version kept in the runtime directory (`server.key`,
    /// `allowed.keys`) and the state directory lacks are moved there, so that the broker keeps
    /// its key (and its remote peers keep trusting it) across the upgrade. Returns what moved.
    public static func adoptCurveFiles(from oldDirectory: String, to directory: String) throws -> [String] {
        var moved: [String] = []
        let fileManager = FileManager.default
        for name in ["server.key", "allowed.keys"] {
            let old = "\(oldDirectory)/\(name)"
            let new = "\(directory)/\(name)"
            guard fileManager.fileExists(atPath: old), !fileManager.fileExists(atPath: new) else { continue }
            do {
                let contents = try Data(contentsOf: URL(fileURLWithPath: old))
                // Written under a temporary name, then renamed: never half a key under its name.
                let temporary = "\(new).moving"
                let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
                guard descriptor >= 0 else { throw BusError(.storageFailed, String(cString: strerror(errno))) }
                let written = contents.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
                let synced = fsync(descriptor) == 0
                close(descriptor)
                guard written == contents.count, synced, rename(temporary, new) == 0 else {
                    unlink(temporary)
                    throw BusError(.storageFailed, "short write")
                }
                try? fileManager.removeItem(atPath: old)
                moved.append(new)
            } catch {
                throw BusError(.storageFailed, "cannot move \(old) to \(new): \(error)")
            }
        }
        return moved
    }
}
