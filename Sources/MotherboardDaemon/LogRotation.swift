import BusCore
import MotherboardCore
import Foundation
import Synchronization

/// Keeps the fleet's log files (`<runtime>/logs/*.log`) under a size: a file past the limit is
/// copied to `.1` (older copies move to `.2`, … up to `generations`) and truncated in place, as
/// logrotate's `copytruncate` does. The processes keep writing to the same open file; since every
/// log is opened for append (`O_APPEND`: the boards' by the launcher, the broker's by
/// `scripts/fleet`'s `>>`), their next write lands at the new end, and the file has no hole of
/// zeros where the old content was. Lines written between the copy and the truncation are lost,
/// as with copytruncate.
///
/// Board logs are written by their log writers (``BoardLauncher/Logs``), which rotate them
/// before they pass the limit; this rotates the other files of the directory (the broker's own
/// log under `scripts/fleet`), and boards' logs when no writer runs. A file is looked at as soon
/// as it is written (inotify's `IN_MODIFY` on the directory), and every file each second, for
/// what inotify cannot see; a writer faster than the copy can still take a file past the limit.
///
/// Runs on a thread of its own, never on the routing loop (copying takes a while).
public final class LogRotation: @unchecked Sendable {
    public let directory: String
    public let maximumBytes: Int
    public let generations: Int
    private let running = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    public init(directory: String, maximumBytes: Int, generations: Int = 3) {
        self.directory = directory
        self.maximumBytes = maximumBytes
        self.generations = max(1, generations)
    }

    /// Watches until ``stop()``; every file is looked at at least every `interval`.
    public func start(every interval: Duration = .seconds(1)) {
        guard maximumBytes > 0, !running.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let thread = Thread { [self] in
            watch(every: interval)
            finished.signal()
        }
        thread.name = "log-rotation"
        thread.start()
    }

    public func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }

    private func watch(every interval: Duration) {
        let notifications = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        defer { if notifications >= 0 { close(notifications) } }
        if notifications >= 0 { _ = inotify_add_watch(notifications, directory, UInt32(IN_MODIFY)) }
        var lastScan = ContinuousClock.now
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while running.load(ordering: .acquiring) {
            var ready = pollfd(fd: notifications, events: Int16(POLLIN), revents: 0)
            if notifications >= 0 {
                _ = poll(&ready, 1, 100)
            } else {
                usleep(100_000)
            }
            var written = Set<String>()
            while notifications >= 0, ready.revents & Int16(POLLIN) != 0 {
                let count = buffer.withUnsafeMutableBytes { read(notifications, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                written.formUnion(Self.names(in: buffer, count: count))
            }
            for name in written where name.hasSuffix(".log") { rotateIfOversized("\(directory)/\(name)") }
            if lastScan.duration(to: .now) >= interval {
                lastScan = .now
                rotateOversized()
            }
        }
    }

    /// The file names of the inotify events in the first `count` bytes of `buffer`.
    static func names(in buffer: [UInt8], count: Int) -> Set<String> {
        var names = Set<String>()
        var offset = 0
        let header = MemoryLayout<inotify_event>.size
        buffer.withUnsafeBytes { bytes in
            while offset + header <= count {
                let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                let name = bytes[(offset + header)..<min(count, offset + header + length)].prefix { $0 != 0 }
                if !name.isEmpty { names.insert(String(decoding: name, as: UTF8.self)) }
                offset += header + length
            }
        }
        return names
    }

    /// Rotates the log at `path` if it is over the limit; whether it did.
    @discardableResult
    private func rotateIfOversized(_ path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0, Int(info.st_size) > maximumBytes else { return false }
        return rotate(path)
    }

    /// Rotates every log over the limit; returns the paths rotated.
    @discardableResult
    public func rotateOversized() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".log") }.map { "\(directory)/\($0)" }.filter { rotateIfOversized($0) }
    }

    /// `copytruncate` of one file: shift the old copies, read the file's end, truncate it, write
    /// what was read to `.1`. Only the last `maximumBytes` are kept (from the first whole line in
    /// them): a file a fast writer took far past the limit costs one limit's worth of copying, and
    /// `.1` holds its latest lines. The file is truncated right after it is read: only what is
    /// written between the two is lost.
    func rotate(_ path: String) -> Bool {
        let fileManager = FileManager.default
        try? fileManager.removeItem(atPath: "\(path).\(generations)")
        for generation in stride(from: generations - 1, through: 1, by: -1) where fileManager.fileExists(atPath: "\(path).\(generation)") {
            try? fileManager.moveItem(atPath: "\(path).\(generation)", toPath: "\(path).\(generation + 1)")
        }
        guard let file = FileHandle(forUpdatingAtPath: path) else { return false }
        defer { try? file.close() }
        guard let size = try? file.seekToEnd() else { return false }
        let kept = min(size, UInt64(maximumBytes))
        guard (try? file.seek(toOffset: size - kept)) != nil, var tail = try? file.read(upToCount: Int(kept)),
            (try? file.truncate(atOffset: 0)) != nil
        else { return false }
        if kept < size, let newline = tail.firstIndex(of: UInt8(ascii: "\n")) { tail = tail[(newline + 1)...] }
        return fileManager.createFile(atPath: "\(path).1", contents: tail, attributes: [.posixPermissions: 0o600])
    }
}
