import BusCore
import Foundation
import Logging
import MotherboardCore

/// The at-least-once ledger's journal in the state directory (`deliveries.log`): one JSON line
/// per change, appended with `write(2)` before the broker acts on it, so that a broker killed
/// at any point leaves every activation its boards had not answered to the next one. Not
/// synced to the disk per line: a crash of the machine may lose the last lines, a crash of the
/// broker does not. Read at start (a line it cannot use is set aside) and written again
/// compact, then again whenever most of its lines, or most of its bytes, are history: the file
/// stays under twice what it keeps plus 16 MiB (``maximumHistoryBytes``).
public final class DeliveryLogFile: DeliveryJournal {
    public let path: String
    private let logger: Logger
    /// Opened for appending at the first line after a compaction.
    private var file: FileHandle?
    private var lines = 0
    /// The file's size, and what the lines of what it keeps take of it.
    private var fileBytes = 0
    private var liveBytes = 0
    private var lineBytes: [UInt64: Int] = [:]
    /// What the file holds now, to write it again compact.
    private var pending: [UInt64: JournaledDelivery] = [:]
    private var letters: [(letter: DeadLetter, envelope: Envelope)] = []

    public init(path: String, logger: Logger) {
        self.path = path
        self.logger = logger
    }

    /// Reads what an earlier broker wrote and writes it again compact; from then on the file
    /// takes this broker's changes. A line it cannot use is set aside in ``quarantinePath``,
    /// logged with its line number, and the rest is read: nothing on disk stops the broker.
    public func load() throws -> (pending: [JournaledDelivery], deadLetters: [(DeadLetter, Envelope)]) {
        var status = stat()
        if stat(path, &status) == 0, Int(status.st_size) > Self.maximumReadBytes {
            // No broker writes a file this large: it is kept aside whole.
            let aside = path + ".too-large"
            guard rename(path, aside) == 0 else { throw BusError(.storageFailed, "cannot move \(path) aside: \(String(cString: strerror(errno)))") }
            logger.error(
                "delivery journal: larger than any broker writes, set aside whole",
                metadata: ["path": "\(path)", "bytes": "\(status.st_size)", "limit": "\(Self.maximumReadBytes)", "kept": "\(aside)"])
        }
        if let text = FileManager.default.contents(atPath: path) {
            let contents = DeliveryJournalText.read(text)
            pending = contents.pending
            letters = contents.letters
            quarantine(contents.setAside)
        }
        try compact()
        return (pending.values.sorted { $0.id < $1.id }, letters.map { ($0.letter, $0.envelope) })
    }

    /// The history a file holds past twice what it keeps before it is written again compact.
    static let maximumHistoryBytes = 16 << 20
    /// The largest file read at start: past twice the most a ledger keeps (64 MiB of activations,
    /// 16 MiB of dead letters, a third more in base64) and the history.
    static let maximumReadBytes = 512 << 20

    /// Where lines that cannot be used are kept, as they were, for a person to look at.
    public var quarantinePath: String { path + ".quarantine" }
    /// The most the quarantine file grows to; lines past it are only logged.
    static let maximumQuarantineBytes = 16 << 20
    /// Lines set aside that are logged one by one; the rest are counted.
    static let loggedLines = 20

    private func quarantine(_ lines: [DeliveryJournalText.SetAside]) {
        guard !lines.isEmpty else { return }
        for entry in lines.prefix(Self.loggedLines) {
            logger.warning(
                "delivery journal: a line was set aside",
                metadata: ["path": "\(path)", "line": "\(entry.number)", "problem": "\(entry.problem)", "kept": "\(quarantinePath)"])
        }
        var kept = 0
        let descriptor = open(quarantinePath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        if descriptor >= 0 {
            let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
            var size = Int((try? handle.seekToEnd()) ?? 0)
            for entry in lines where size + entry.line.count + 1 <= Self.maximumQuarantineBytes {
                guard (try? handle.write(contentsOf: entry.line + Data([UInt8(ascii: "\n")]))) != nil else { break }
                size += entry.line.count + 1
                kept += 1
            }
        }
        logger.warning(
            "delivery journal: lines set aside",
            metadata: ["path": "\(path)", "lines": "\(lines.count)", "kept": "\(kept)", "in": "\(quarantinePath)"])
    }

    public func put(_ delivery: JournaledDelivery) throws {
        let line = try DeliveryJournalText.put(delivery)
        try append(line)
        pending[delivery.id] = delivery
        keep(delivery.id, line.count)
        do {
            try compactIfMostlyHistory()
        } catch {
            // The line is written; the file stays longer than it needs to.
            logger.error("cannot compact the delivery journal", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    public func remove(_ id: UInt64) {
        guard pending.removeValue(forKey: id) != nil else { return }
        keep(id, nil)
        appendOrLog { try DeliveryJournalText.remove(id) }
    }

    public func putDeadLetter(_ letter: DeadLetter, envelope: Envelope) {
        guard let line = try? DeliveryJournalText.dead(letter, envelope: envelope) else { return }
        appendOrLog { line }
        letters.append((letter, envelope))
        keep(letter.id, line.count)
    }

    public func removeDeadLetter(_ id: UInt64) {
        letters.removeAll { $0.letter.id == id }
        keep(id, nil)
        appendOrLog { try DeliveryJournalText.undead(id) }
    }

    /// What the line of `key` takes now (nil: nothing, it is history). Letters' ids lack the
    /// ledger's bit that activations' have: the two never share a key.
    private func keep(_ key: UInt64, _ bytes: Int?) {
        liveBytes -= lineBytes[key] ?? 0
        lineBytes[key] = bytes
        liveBytes += bytes ?? 0
    }

    private func appendOrLog(_ line: () throws -> Data) {
        do {
            try append(line())
        } catch {
            // The activation is answered or dead-lettered all the same; a broker started from this
            // file delivers it once more, which at least once allows.
            logger.error("cannot write the delivery journal", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    private func append(_ bytes: Data) throws {
        do {
            try openForAppending().write(contentsOf: bytes)
        } catch {
            throw BusError(.storageFailed, "cannot write the delivery journal \(path): \(error)")
        }
        lines += 1
        fileBytes += bytes.count
    }

    /// The file, opened to append (O_APPEND: every line goes at its end).
    private func openForAppending() throws -> FileHandle {
        if let file { return file }
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw BusError(.storageFailed, "cannot open \(path): \(String(cString: strerror(errno)))") }
        let opened = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        file = opened
        return opened
    }

    private func compactIfMostlyHistory() throws {
        let manyLines = lines > 4_096 && lines > 4 * (pending.count + letters.count)
        guard manyLines || fileBytes > 2 * liveBytes + Self.maximumHistoryBytes else { return }
        try compact()
    }

    /// Writes what is live now to a new file and puts it in the journal's place.
    private func compact() throws {
        let (text, sizes) = try DeliveryJournalText.compact(pending: pending, letters: letters)
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: text, attributes: [.posixPermissions: 0o600]) else {
            throw BusError(.storageFailed, "cannot write \(temporary)")
        }
        guard rename(temporary, path) == 0 else { throw BusError(.storageFailed, "cannot replace \(path): \(String(cString: strerror(errno)))") }
        file = nil
        lines = pending.count + letters.count
        fileBytes = text.count
        lineBytes = sizes
        liveBytes = text.count
    }
}
