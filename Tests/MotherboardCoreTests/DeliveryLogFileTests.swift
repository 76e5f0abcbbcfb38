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

    @Test func aJournalThatCannotBeWrittenRefusesToKeep() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = DeliveryLogFile(path: "\(directory)/missing/deliveries.log", logger: Logger(label: "test"))
        #expect(throws: BusError.self) { try journal.put(delivery(1, "A")) }
    }
}
