import BusCore
import Foundation

/// The delivery journal's text (`deliveries.log`): one JSON line per change of the ledger. Read
/// whole by a broker at start, which uses every line it can and sets the others aside, so that
/// nothing on disk stops a broker: a line cut by a crash, or one holding what no broker writes
/// (an id a ledger cannot make, an invalid board, a negative count).
public enum DeliveryJournalText {
    /// What a journal's text holds.
    public struct Contents {
        /// Kept activations, by id.
        public var pending: [UInt64: JournaledDelivery] = [:]
        /// Dead letters, oldest first.
        public var letters: [(letter: DeadLetter, envelope: Envelope)] = []
        /// The lines that cannot be used, as they were.
        public var setAside: [SetAside] = []
    }

    public struct SetAside {
        /// Counted from 1.
        public var number: Int
        public var line: Data
        /// Why it cannot be used.
        public var problem: String
    }

    /// Reads a journal's text; never traps, whatever it holds.
    public static func read(_ text: Data) -> Contents {
        var contents = Contents()
        let decoder = JSONDecoder()
        for (index, line) in text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() where !line.isEmpty {
            let problem: String
            if let record = try? decoder.decode(Line.self, from: Data(line)) {
                let repeated = record.op == .dead && contents.letters.contains { $0.letter.id == record.id }
                guard let refusal = record.problem ?? (repeated ? "dead: letter \(record.id) is already on the list" : nil) else {
                    record.apply(to: &contents)
                    continue
                }
                problem = refusal
            } else {
                problem = "it does not read (cut short by a crash, or not a journal line)"
            }
            contents.setAside.append(SetAside(number: index + 1, line: Data(line), problem: problem))
        }
        return contents
    }

    /// The line of an activation kept (with its delivery count).
    public static func put(_ delivery: JournaledDelivery) throws -> Data { try Line.put(delivery).encoded() }
    /// The line of an activation done with.
    public static func remove(_ id: UInt64) throws -> Data { try Line(op: .remove, id: id).encoded() }
    /// The line of a dead letter.
    public static func dead(_ letter: DeadLetter, envelope: Envelope) throws -> Data { try Line.dead(letter, envelope).encoded() }
    /// The line of a dead letter replayed.
    public static func undead(_ id: UInt64) throws -> Data { try Line(op: .undead, id: id).encoded() }

    /// The text that holds `pending` and `letters` and nothing else, and the size of each one's
    /// line (by activation id, or by letter id: letters' lack the ledger's bit).
    public static func compact(
        pending: [UInt64: JournaledDelivery], letters: [(letter: DeadLetter, envelope: Envelope)]
    ) throws -> (text: Data, sizes: [UInt64: Int]) {
        var text = Data()
        var sizes: [UInt64: Int] = [:]
        for delivery in pending.values.sorted(by: { $0.id < $1.id }) {
            let line = try put(delivery)
            sizes[delivery.id] = line.count
            text += line
        }
        for (letter, envelope) in letters {
            let line = try dead(letter, envelope: envelope)
            sizes[letter.id] = line.count
            text += line
        }
        return (text, sizes)
    }

    struct Line: Codable {
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
        /// A `put` of an activation its board failed: when it is delivered again (seconds since 1970).
        var retryAt: Double?

        static func put(_ delivery: JournaledDelivery) throws -> Line {
            Line(
                op: .put, id: delivery.id, board: delivery.board.name, scope: delivery.board.scope.name, deliveries: delivery.deliveries,
                header: try storedHeader(delivery.envelope), payload: delivery.envelope.payload, retryAt: delivery.retryAt)
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

        /// Why a broker cannot use this line, nil when it can: the ranges a broker writes.
        var problem: String? {
            switch op {
            case .put:
                guard JournaledDelivery.isLedgerID(id) else { return "put: id \(id) is not a ledger id" }
                guard let board, BoardID.isValid(board) else { return "put: no valid board id" }
                guard (scope ?? "").utf8.count <= BoardID.maximumLength else { return "put: the scope is longer than \(BoardID.maximumLength) bytes" }
                guard (1...Int(UInt32.max)).contains(deliveries ?? 1) else {
                    return "put: deliveries \(deliveries ?? 1) is not between 1 and \(UInt32.max)"
                }
                guard envelope != nil else { return "put: its envelope does not decode" }
                guard retryAt?.isFinite ?? true else { return "put: a retry time that is not finite" }
            case .dead:
                guard let letter else { return "dead: no letter" }
                guard letter.id == id, JournaledDelivery.isLetterID(id) else { return "dead: id \(id) is not a dead letter's id" }
                guard letter.scope.name.utf8.count <= BoardID.maximumLength else {
                    return "dead: the scope is longer than \(BoardID.maximumLength) bytes"
                }
                guard letter.attempts >= 0, letter.payloadBytes >= 0, letter.time.isFinite else {
                    return "dead: a negative count or a time that is not finite"
                }
                guard let envelope else { return "dead: its envelope does not decode" }
                guard envelope.payload.count == letter.payloadBytes else { return "dead: its payload is not the size its letter says" }
            case .remove, .undead:
                break
            }
            return nil
        }

        func apply(to contents: inout Contents) {
            switch op {
            case .put:
                guard let board, let envelope else { return }
                contents.pending[id] = JournaledDelivery(
                    id: id, board: ScopedName(scope: Scope(scope ?? ""), name: board), deliveries: deliveries ?? 1, envelope: envelope,
                    retryAt: retryAt)
            case .remove:
                contents.pending[id] = nil
            case .dead:
                guard let letter, let envelope else { return }
                contents.letters.append((letter, envelope))
            case .undead:
                contents.letters.removeAll { $0.letter.id == id }
            }
        }

        /// The line as the file holds it: JSON, then a newline.
        func encoded() throws -> Data {
            try JSONEncoder().encode(self) + Data([UInt8(ascii: "\n")])
        }
    }
}
