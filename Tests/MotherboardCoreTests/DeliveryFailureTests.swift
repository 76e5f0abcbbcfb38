import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// An at-least-once board's error answer is not an acknowledgement: a transient error is a
/// failure, delivered again after the manifest's backoff until its deliveries are spent; an error
/// the board gives up with goes to the dead letters at once.
@Suite("At-least-once activations a board fails")
struct DeliveryFailureTests {
    let first = PeerID(Data([0xB1]))
    let second = PeerID(Data([0xB2]))

    static let manifest = FleetManifest(boards: [
        .init(id: "pay", executable: "Pay", start: .onDemand, delivery: .atLeastOnce, maxDeliveries: 3, backoff: [2, 10])
    ])

    func activate(_ harness: Harness, _ payload: String) {
        harness.request(EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data(payload.utf8), from: harness.client)
    }

    func start(_ harness: Harness, _ producer: RecordingProducer, as peer: PeerID) -> [Envelope] {
        harness.register("pay", scope: .root, peer: peer, pid: producer.nextPID).filter { $0.header.kind != .reply }
    }

    /// Moves the fleet's clock on (`peer`'s board, if it is live, heartbeating as it goes) and
    /// ticks; returns the activations `peer` was handed meanwhile.
    func wait(_ harness: Harness, _ duration: Duration, peer: PeerID) -> [Envelope] {
        harness.now = harness.now.advanced(by: duration)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "pay")), from: peer)
        harness.motherboard.tick(now: harness.now)
        return harness.transport.take(for: peer).filter { $0.header.kind == .activate }
    }

    @Test func aTransientErrorIsDeliveredAgainAfterItsBackoffUntilItsDeliveriesAreSpent() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest, producer: producer)
        let journal = DeliveryTests.Journal()
        harness.motherboard.deliveries.journal = journal
        activate(harness, "A-1")
        let delivered = start(harness, producer, as: first)
        let id = try #require(delivered.first?.header.correlationID)

        harness.deliver(delivered[0].errorReply(BusError(.handlerFailed, "the store's owner is down"), source: "pay"), from: first)
        #expect(harness.transport.take(for: harness.client).isEmpty, "the sender waits for the outcome")
        #expect(harness.motherboard.deliveries.ledger.pending[id] != nil)
        let retryAt = try #require(journal.entries[id]?.retryAt)
        #expect(abs(retryAt - (Date().timeIntervalSince1970 + 2)) < 1)
        #expect(wait(harness, .milliseconds(1_900), peer: first).isEmpty, "not before its backoff")
        let again = wait(harness, .milliseconds(200), peer: first)
        #expect(again.map(\.header.correlationID) == [id] && again.map(\.header.deliveryCount) == [2])

        // The second failure waits the second backoff; the board ending meanwhile does not hurry it.
        harness.deliver(again[0].errorReply(BusError(.storageFailed, "disk full"), source: "pay"), from: first)
        harness.motherboard.processExited(pid: producer.nextPID, status: "signal 9", clean: false, now: harness.now)
        #expect(wait(harness, .seconds(9), peer: first).isEmpty)
        #expect(producer.started.count == 1, "not started again before the retry is due")
        _ = wait(harness, .seconds(1), peer: first)
        #expect(producer.started.count == 2, "the due retry starts the on-demand board")
        let third = start(harness, producer, as: second)
        #expect(third.map(\.header.correlationID) == [id] && third.map(\.header.deliveryCount) == [3])

        // Its last delivery fails: a dead letter, and the sender gets the board's error saying so.
        harness.deliver(third[0].errorReply(BusError(.handlerFailed, "still down"), source: "pay"), from: second)
        let told = try #require(harness.transport.take(for: harness.client).first?.carriedError)
        #expect(told.code == .handlerFailed && told.message.contains("still down") && told.message.contains("dead letter"), "\(told)")
        let letter = try #require(harness.motherboard.deliveries.ledger.deadLetters.first?.letter)
        #expect(letter.attempts == 3 && letter.reason.contains("failed it 3 time(s) (last: handlerFailed: still down)"), "\(letter.reason)")
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty && journal.entries.isEmpty)
        #expect(harness.motherboard.counters.failedDeliveries == 2 && harness.motherboard.counters.deadLettered == 1)
    }

    @Test func anErrorTheBoardGivesUpWithIsADeadLetterAtOnceAndItsSenderGetsIt() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest, producer: producer)
        for (code, payload) in [(BusError.Code.typeMismatch, "B-1"), (.rejected, "B-2")] {
            let running = !producer.started.isEmpty
            activate(harness, payload)
            let delivered = running ? harness.transport.take(for: first) : start(harness, producer, as: first)
            let activation = try #require(delivered.first { $0.payload == Data(payload.utf8) })
            harness.deliver(activation.errorReply(BusError(code, "no"), source: "pay"), from: first)
            let told = try #require(harness.transport.take(for: harness.client).first?.carriedError)
            #expect(told == BusError(code, "no"))
            #expect(harness.motherboard.deliveries.ledger.deadLetters.last?.letter.reason == "its board gave it up (\(code.name): no)")
            #expect(wait(harness, .seconds(60), peer: first).isEmpty)
        }
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty && harness.motherboard.counters.failedDeliveries == 0)

        // A letter can be acted on: shown whole (its payload, its board's last error, an ISO time),
        // dropped for good; an id that is no letter's is named.
        let letter = try #require(harness.motherboard.deliveries.ledger.deadLetters.first?.letter)
        func control(_ operation: String, _ id: UInt64) -> Envelope? {
            harness.request(
                EnvelopeHeader(kind: .control, typeName: operation), payload: try! PayloadCodec.encode(DeadLetterReplay(id: id)),
                from: harness.client)
            return harness.transport.take(for: harness.client).first
        }
        let shown = try PayloadCodec.decode(DeadLetterDetail.self, from: try #require(control(ControlOperation.deadLettersShow, letter.id)).payload)
        #expect(shown.payloadBase64 == Data("B-1".utf8).base64EncodedString() && shown.payloadJSON == nil, "B-1 is not JSON")
        #expect(shown.letter.lastError == BusError(.typeMismatch, "no"))
        #expect(shown.letter.at?.wholeMatch(of: #/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/#) != nil, "\(shown.letter.at ?? "")")
        #expect(control(ControlOperation.deadLettersDrop, letter.id)?.header.kind == .reply)
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) != [letter.id])
        #expect(control(ControlOperation.deadLettersDrop, letter.id)?.carriedError?.code == .badArgument)
        #expect(control(ControlOperation.deadLettersShow, .max)?.carriedError?.message.contains("no dead letter") == true)
        #expect(DeadLetter.isoTime(.infinity) == "-" && DeadLetter.isoTime(1e20) == "-" && DeadLetter.isoTime(-0.0) == "1970-01-01T00:00:00.000Z")
    }

    /// A broker started from the journal keeps a failed activation's backoff (from its wall-clock
    /// time, at most the longest backoff there is): not delivered when its board registers, but
    /// when the retry is due.
    @Test func aRestoredFailedActivationWaitsForItsRetry() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest, producer: producer)
        let envelope = Envelope(header: EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data("C-1".utf8))
        let id = DeliveryLedger.idBit | 7
        let soon = JournaledDelivery(
            id: id, board: ScopedName(scope: .root, name: "pay"), deliveries: 1, envelope: envelope, retryAt: Date().timeIntervalSince1970 + 5)
        var never = soon
        never.id = DeliveryLedger.idBit | 8
        never.retryAt = 1e20
        // Through the journal's text, as a broker reads it.
        let text = try DeliveryJournalText.put(soon) + DeliveryJournalText.put(never)
        let read = DeliveryJournalText.read(text)
        #expect(read.setAside.isEmpty && read.pending[id]?.retryAt == soon.retryAt)
        harness.motherboard.restoreDeliveries(Array(read.pending.values), deadLetters: [], now: harness.now)
        #expect(start(harness, producer, as: first).isEmpty, "held for its retry, not delivered at registration")
        #expect(wait(harness, .seconds(4), peer: first).isEmpty)
        let due = wait(harness, .seconds(2), peer: first)
        #expect(due.map(\.header.correlationID) == [id] && due.map(\.header.deliveryCount) == [2])
        // 1e20 seconds from now is at most the longest backoff there is.
        let clamped = wait(harness, .seconds(FleetManifest.Board.maximumBackoffSeconds), peer: first)
        #expect(clamped.map(\.header.correlationID) == [DeliveryLedger.idBit | 8])
    }
}
