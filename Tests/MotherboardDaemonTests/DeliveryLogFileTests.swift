import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon

/// The at-least-once ledger's journal file: what one broker wrote, the next one reads, whatever
/// the last line looks like.
@Suite("Delivery journal file")
struct DeliveryLogFileTests {
    let directory: String
    var path: String { "\(directory)/deliveries.log" }
    let bit = DeliveryLedger.idBit

    init() throws {
        var template = Array("\(NSTemporaryDirectory())/boardbus-journal-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw BusError(.transport, "mkdtemp failed") }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func delivery(_ number: UInt64, _ payload: String, deliveries: Int = 1) -> JournaledDelivery {
        var header = EnvelopeHeader(
            kind: .activate, correlationID: 70 + number, target: "pay", scope: "shop", typeName: "Pay",
            trace: TraceContext(traceIDHigh: 1, traceIDLow: 2, spanID: 3))
        header.traceState = "vendor=a1"
        return JournaledDelivery(
            id: bit | number, board: ScopedName(scope: "shop", name: "pay"), deliveries: deliveries,
            envelope: Envelope(header: header, payload: Data(payload.utf8)))
    }

    @Test func whatOneBrokerWroteTheNextReadsAndACutLastLineIsSkipped() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        #expect(try first.load().pending.isEmpty)
        try first.put(delivery(1, "A"))
        try first.put(delivery(2, "B"))
        try first.put(delivery(1, "A", deliveries: 2))
        first.remove(bit | 2)
        let letter = DeadLetter(id: 3, board: "pay", scope: "shop", type: "Pay", attempts: 3, reason: "poison", payloadBytes: 1, time: 1)
        first.putDeadLetter(letter, envelope: delivery(3, "C").envelope)
        first.putDeadLetter(
            DeadLetter(id: 4, board: "pay", scope: "shop", type: "Pay", attempts: 3, reason: "x", payloadBytes: 1, time: 1),
            envelope: delivery(4, "D").envelope)
        first.removeDeadLetter(4)
        // The broker was killed in the middle of a line.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"op":"put","id":9223372036854775813,"boa"#.utf8))
        handle.closeFile()

        let second = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        let read = try second.load()
        #expect(read.pending.map(\.id) == [bit | 1])
        #expect(read.pending.first?.deliveries == 2)
        #expect(read.pending.first?.envelope == delivery(1, "A").envelope)
        #expect(read.deadLetters.map(\.0) == [letter])
        #expect(read.deadLetters.first?.1.payload == Data("C".utf8))
        // Written again compact: one line for each thing still kept.
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2)
    }

    /// Every line a broker cannot use is set aside, kept as it was in the quarantine file, and the
    /// rest is read: a dead letter with id 2^64-1 (its next id overflows), a put for an invalid
    /// board id, with a negative or a zero delivery count, with an id without the ledger's bit, a
    /// letter repeated, and lines that are not a journal's. Read again, nothing more is set aside.
    @Test func linesNoBrokerWritesAreSetAsideAndTheRestIsRead() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let writer = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        _ = try writer.load()
        try writer.put(delivery(1, "A"))
        let letter = DeadLetter(id: 3, board: "pay", scope: "shop", type: "Pay", attempts: 3, reason: "poison", payloadBytes: 1, time: 1)
        writer.putDeadLetter(letter, envelope: delivery(3, "C").envelope)
        let good = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(good.count == 2)
        func edited(_ line: String, _ change: (inout [String: Any]) -> Void) throws -> String {
            var object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            change(&object)
            return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        }
        let hostile = [
            try edited(good[1]) { object in
                object["id"] = UInt64.max
                var letter = object["letter"] as! [String: Any]
                letter["id"] = UInt64.max
                object["letter"] = letter
            },
            try edited(good[0]) { $0["board"] = "bad..id" },
            try edited(good[0]) { $0["deliveries"] = -5 },
            try edited(good[0]) { $0["deliveries"] = 0 },
            try edited(good[0]) { $0["id"] = 7 },
            try edited(good[0]) { $0["id"] = UInt64.max },
            try edited(good[0]) { $0["header"] = "AAAA" },
            good[1],
            #"{"op":"drop","id":1}"#,
            "not json at all é",
            #"{"op":"put","id":9223372036854775813,"boa"#,
        ]
        let text = ([good[0]] + hostile[0..<6] + [good[1]] + hostile[6...]).joined(separator: "\n")
        try text.write(toFile: path, atomically: true, encoding: .utf8)

        let reader = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        let read = try reader.load()
        #expect(read.pending.map(\.id) == [bit | 1])
        #expect(read.deadLetters.map(\.0) == [letter])
        let quarantined = try String(contentsOfFile: reader.quarantinePath, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(quarantined == hostile)
        // Compacted: only what was read.
        #expect(try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").count == 2)
        let again = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        #expect(try again.load().pending.map(\.id) == [bit | 1])
        #expect(try String(contentsOfFile: reader.quarantinePath, encoding: .utf8).split(separator: "\n").count == hostile.count)
    }

    /// The line numbers and problems the reader gives, counted from 1 with empty lines counted.
    @Test func whatIsSetAsideIsNamedByItsLineNumber() {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let contents = DeliveryJournalText.read(Data("\n{\"op\":\"remove\",\"id\":1}\n\ngarbage\n{\"op\":\"put\",\"id\":5}".utf8))
        #expect(contents.setAside.map(\.number) == [4, 5])
        #expect(contents.setAside[1].problem == "put: id 5 is not a ledger id")
    }

    /// A file larger than any broker writes is moved aside whole; the broker starts empty.
    @Test func aJournalLargerThanAnyBrokerWritesIsSetAsideWhole() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let descriptor = open(path, O_WRONLY | O_CREAT, 0o600)
        #expect(ftruncate(descriptor, off_t(DeliveryLogFile.maximumReadBytes + 1)) == 0)
        close(descriptor)
        let journal = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        #expect(try journal.load().pending.isEmpty)
        #expect(FileManager.default.fileExists(atPath: path + ".too-large"))
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 0)
    }

    /// Redeliveries write the whole activation again: the file is written compact once its
    /// history passes twice what it keeps plus 16 MiB, whatever the count of lines.
    @Test func aJournalOfLargeRedeliveriesStaysBoundedInBytes() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = DeliveryLogFile(path: path, logger: Logger(label: "test"))
        _ = try journal.load()
        let large = String(repeating: "x", count: 1 << 20)
        for count in 1...60 { try journal.put(delivery(1, large, deliveries: count)) }
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        let line = try DeliveryJournalText.put(delivery(1, large, deliveries: 60)).count
        #expect(size <= 3 * line + DeliveryLogFile.maximumHistoryBytes)
        #expect(try DeliveryLogFile(path: path, logger: Logger(label: "test")).load().pending.first?.deliveries == 60)
    }

    @Test func aJournalThatCannotBeWrittenRefusesToKeep() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = DeliveryLogFile(path: "\(directory)/missing/deliveries.log", logger: Logger(label: "test"))
        #expect(throws: BusError.self) { try journal.put(delivery(1, "A")) }
    }
}
