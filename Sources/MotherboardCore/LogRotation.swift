import BusCore
import Foundation

/// Keeps the fleet's log files (`<runtime>/logs/*.log`) under a size: a file past the limit is
/// copied to `.1` (older copies move to `.2`, … up to `generations`) and truncated in place, as
/// logrotate's `copytruncate` does. The processes keep writing to the same open file; since every
/// log is opened for append (`O_APPEND`: the boards' by the launcher, the broker's by
/// `scripts/fleet`'s `>>`), their next write lands at the new end, and the file has no hole of
/// zeros where the old content was. Lines written between the copy and the truncation are lost,
/// as with copytruncate.
///
/// Runs on a timer queue of its own, never on the routing loop (copying takes a while).
public final class LogRotation: @unchecked Sendable {
    public let directory: String
    public let maximumBytes: Int
    public let generations: Int
    private let queue = DispatchQueue(label: "boardbus.log-rotation")
    private var timer: DispatchSourceTimer?

    public init(directory: String, maximumBytes: Int, generations: Int = 3) {
        self.directory = directory
        self.maximumBytes = maximumBytes
        self.generations = max(1, generations)
    }

    /// Checks every `interval` until ``stop()``.
    public func start(every interval: Duration = .seconds(1)) {
        guard maximumBytes > 0 else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(Int(interval.wholeMilliseconds)), repeating: .milliseconds(Int(interval.wholeMilliseconds)))
        timer.setEventHandler { [weak self] in self?.rotateOversized() }
        timer.resume()
        self.timer = timer
    }

    public func stop() {
        timer?.cancel()
        timer = nil
    }

    /// Rotates every log over the limit; returns the paths rotated.
    @discardableResult
    public func rotateOversized() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var rotated: [String] = []
        for name in names where name.hasSuffix(".log") {
            let path = "\(directory)/\(name)"
            var info = stat()
            guard stat(path, &info) == 0, Int(info.st_size) > maximumBytes else { continue }
            if rotate(path) { rotated.append(path) }
        }
        return rotated
    }

    /// `copytruncate` of one file: shift the old copies, copy, truncate.
    func rotate(_ path: String) -> Bool {
        let fileManager = FileManager.default
        try? fileManager.removeItem(atPath: "\(path).\(generations)")
        for generation in stride(from: generations - 1, through: 1, by: -1) where fileManager.fileExists(atPath: "\(path).\(generation)") {
            try? fileManager.moveItem(atPath: "\(path).\(generation)", toPath: "\(path).\(generation + 1)")
        }
        guard (try? fileManager.copyItem(atPath: path, toPath: "\(path).1")) != nil else { return false }
        return truncate(path, 0) == 0
    }
}
