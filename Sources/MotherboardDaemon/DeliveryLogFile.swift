import BusCore
import Foundation
import Logging
import MotherboardCore

/// The at-least-once ledger's journal in the state directory (`deliveries.log`): one JSON line
/// per change, appended with `write(2)` before the broker acts on it, so that a broker killed
/// at any point leaves every activation its boards had not answered to the next one. Not
/// synced to the disk per line: a crash of the machine may lose the last lines, a crash of the
/// broker does not. Read at start (a line cut by the crash is skipped) and written again
/// compact, then again whenever most of its lines are history.
public final class DeliveryLogFile: DeliveryJournal {
    private struct Line: Codable {
        enum Operation: String, Codable { case put, remove, dead, undead }
        var op: Operation
        var id: UInt64
        var board: String?
        var scope: String?
        var deliveries: Int?
        /// The envelope's header (encoded as in version 3 of the protocol, with the version byte 3:
        /// the file's format is the same across the protocol's versions) and payload, base64 in JSON.
        var header: Data?
        var payload: Data?
        var letter: DeadLetter?

        static func put(_ delivery: JournaledDelivery) throws -> Line {
            Line(
                op: .put, id: delivery.id, board: delivery.board.name, scope: delivery.board.scope.name, deliveries: delivery.deliveries,
                header: try storedHeader(delivery.envelope), payload: delivery.envelope.payload)
        }

        static func dead(_ letter: DeadLetter, _ envelope: Envelope) throws -> Line {
            Line(op: .dead, id: letter.id, header: try storedHeader(envelope), payload: envelope.payload, letter: letter)
        }

        private static func storedHeader(_ envelope: Envelope) throws -> Data {
            Data(try HeaderCodec.encode(envelope.header, version: EnvelopeHeader.previousVersion))
        }

        /// The envelope a `put` or `dead` line carries.
        var envelope: Envelope? {
            header.flatMap { try? Envelope(frames: [$0, payload ?? Data()]) }
        }

        /// The line as the file holds it: JSON, then a newline.
        func encoded() throws -> Data {
            try JSONEncoder().encode(self) + Data([UInt8(ascii: "\n")])
        }
    }

    public let path: String
    private let logger: Logger
    /// Opened for appending at the first line after a compaction.
    private var file: FileHandle?
    private var lines = 0
    /// What the file holds now, to write it again compact.
    private var pending: [UInt64: JournaledDelivery] = [:]
    private var letters: [(letter: DeadLetter, envelope: Envelope)] = []

    public init(path: String, logger: Logger) {
        self.path = path
        self.logger = logger
    }

    /// Reads what an earlier broker wrote and writes it again compact; from then on the file
    /// takes this broker's changes.
    public func load() throws -> (pending: [JournaledDelivery], deadLetters: [(DeadLetter, Envelope)]) {
        if let text = FileManager.default.contents(atPath: path) {
            let decoder = JSONDecoder()
            var skipped = 0
            for line in text.split(separator: UInt8(ascii: "\n")) {
                guard let record = try? decoder.decode(Line.self, from: Data(line)) else {
                    skipped += 1
                    continue
                }
                apply(record)
            }
            if skipped > 0 { logger.warning("delivery journal: lines that do not read were skipped", metadata: ["lines": "\(skipped)"]) }
        }
        try compact()
        return (pending.values.sorted { $0.id < $1.id }, letters.map { ($0.letter, $0.envelope) })
    }

    public func put(_ delivery: JournaledDelivery) throws {
        try append(Line.put(delivery))
        pending[delivery.id] = delivery
        do {
            try compactIfMostlyHistory()
        } catch {
            // The line is written; the file stays longer than it needs to.
            logger.error("cannot compact the delivery journal", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    public func remove(_ id: UInt64) {
        guard pending.removeValue(forKey: id) != nil else { return }
        appendOrLog(Line(op: .remove, id: id))
    }

    public func putDeadLetter(_ letter: DeadLetter, envelope: Envelope) {
        guard let line = try? Line.dead(letter, envelope) else { return }
        appendOrLog(line)
        letters.append((letter, envelope))
    }

    public func removeDeadLetter(_ id: UInt64) {
        letters.removeAll { $0.letter.id == id }
        appendOrLog(Line(op: .undead, id: id))
    }

    private func apply(_ line: Line) {
        switch line.op {
        case .put:
            guard let board = line.board, let envelope = line.envelope else { return }
            pending[line.id] = JournaledDelivery(
                id: line.id, board: ScopedName(scope: Scope(line.scope ?? ""), name: board), deliveries: line.deliveries ?? 1, envelope: envelope)
        case .remove:
            pending[line.id] = nil
        case .dead:
            guard let letter = line.letter, let envelope = line.envelope else { return }
            letters.append((letter, envelope))
        case .undead:
            letters.removeAll { $0.letter.id == line.id }
        }
    }

    private func appendOrLog(_ line: Line) {
        do {
            try append(line)
        } catch {
            // The activation is answered or dead-lettered all the same; a broker started from this
            // file delivers it once more, which at least once allows.
            logger.error("cannot write the delivery journal", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    private func append(_ line: Line) throws {
        let bytes = try line.encoded()
        do {
            try openForAppending().write(contentsOf: bytes)
        } catch {
            throw BusError(.storageFailed, "cannot write the delivery journal \(path): \(error)")
        }
        lines += 1
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
        guard lines > 4_096, lines > 4 * (pending.count + letters.count) else { return }
        try compact()
    }

    /// Writes what is live now to a new file and puts it in the journal's place.
    private func compact() throws {
        var text = Data()
        for delivery in pending.values.sorted(by: { $0.id < $1.id }) { text += try Line.put(delivery).encoded() }
        for (letter, envelope) in letters { text += try Line.dead(letter, envelope).encoded() }
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: text, attributes: [.posixPermissions: 0o600]) else {
            throw BusError(.storageFailed, "cannot write \(temporary)")
        }
        guard rename(temporary, path) == 0 else { throw BusError(.storageFailed, "cannot replace \(path): \(String(cString: strerror(errno)))") }
        file = nil
        lines = pending.count + letters.count
    }
}
