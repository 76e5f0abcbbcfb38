import BusCore
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// At-least-once activations: kept until their board answers them, delivered again to the next
/// instance when it ends holding them, dead-lettered after `maxDeliveries`.
@Suite("At-least-once activations")
struct DeliveryTests {
    let first = PeerID(Data([0xA1]))
    let second = PeerID(Data([0xA2]))
    let third = PeerID(Data([0xA3]))

    static func manifest(_ delivery: FleetManifest.DeliveryMode) -> FleetManifest {
        FleetManifest(boards: [.init(id: "pay", executable: "Pay", start: .onDemand, delivery: delivery, maxDeliveries: 3)])
    }

    /// Activates `pay` from the client, waiting for the answer (correlation 77).
    func activate(_ harness: Harness, _ payload: String = "A-1") {
        harness.request(EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data(payload.utf8), from: harness.client)
    }

    /// Registers `pay` as the process the producer started last; returns what it is handed.
    func start(_ harness: Harness, _ producer: RecordingProducer, as peer: PeerID) -> [Envelope] {
        harness.register("pay", scope: .root, peer: peer, pid: producer.nextPID).filter { $0.header.kind != .reply }
    }

    func crash(_ harness: Harness, _ producer: RecordingProducer) {
        harness.motherboard.processExited(pid: producer.nextPID, status: "signal 9", clean: false, now: harness.now)
    }

    @Test func anActivationHeldByABoardThatDiesIsDeliveredAgainWithItsCountAndAnsweredOnce() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        activate(harness)
        let delivered = start(harness, producer, as: first)
        #expect(delivered.map(\.header.deliveryCount) == [1])
        let id = try #require(delivered.first?.header.correlationID)
        #expect(delivered.first?.header.flags.contains(.replyExpected) == true)

        crash(harness, producer)
        #expect(producer.started.count == 2)
        let again = start(harness, producer, as: second)
        #expect(again.map(\.header.deliveryCount) == [2])
        #expect(again.map(\.header.correlationID) == [id])
        #expect(again.map(\.payload) == [Data("A-1".utf8)])
        #expect(harness.transport.take(for: harness.client).isEmpty)
        #expect(harness.motherboard.counters.redeliveries == 1)

        // Its answer is the acknowledgement: relayed to the client once, and the ledger is empty.
        harness.deliver(again[0].reply(payload: Data("paid".utf8), source: "pay"), from: second)
        let answer = harness.transport.take(for: harness.client)
        #expect(answer.map(\.header.correlationID) == [77])
        #expect(answer.map(\.payload) == [Data("paid".utf8)])
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)
        // A late answer of the first instance, or a second one, changes nothing.
        harness.deliver(again[0].reply(payload: Data("again".utf8), source: "pay"), from: second)
        #expect(harness.transport.take(for: harness.client).isEmpty)
    }

    /// A poison input: every instance that takes it dies. After `maxDeliveries` it is a dead letter
    /// (the client told so), listed, and replayed as a new activation.
    @Test func aPoisonInputEndsOnTheDeadLetterListAndCanBeReplayed() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        activate(harness, "poison")
        for (attempt, peer) in [first, second, third].enumerated() {
            #expect(start(harness, producer, as: peer).map(\.header.deliveryCount) == [UInt32(attempt + 1)])
            crash(harness, producer)
        }
        #expect(producer.started.count == 3)
        let told = harness.transport.take(for: harness.client)
        #expect(told.first?.carriedError?.code == .outcomeUnknown)
        #expect(told.first?.carriedError?.message.contains("ended 3 time(s) while holding it") == true)

        harness.request(EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLetters), from: harness.client)
        let list = try PayloadCodec.decode(DeadLetterList.self, from: try #require(harness.transport.take(for: harness.client).first).payload)
        let letter = try #require(list.letters.first)
        #expect(list.letters.count == 1 && letter.board == "pay" && letter.attempts == 3 && letter.type == "Pay" && letter.payloadBytes == 6)
        #expect(harness.motherboard.counters.deadLettered == 1)

        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersReplay),
            payload: try PayloadCodec.encode(DeadLetterReplay(id: letter.id)),
            from: harness.client)
        #expect(harness.transport.take(for: harness.client).map(\.header.kind) == [.reply])
        let replayed = start(harness, producer, as: PeerID(Data([0xA4])))
        #expect(replayed.map(\.header.deliveryCount) == [1])
        #expect(replayed.map(\.payload) == [Data("poison".utf8)])
        #expect(harness.motherboard.deliveries.ledger.deadLetters.isEmpty)
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersReplay),
            payload: try PayloadCodec.encode(DeadLetterReplay(id: letter.id)),
            from: harness.client)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .badArgument)
    }

    /// A sender cannot pass its activation off as the redelivery of another's: the delivery count
    /// and the correlation id it sends are not the ledger's.
    @Test func aSenderCannotForgeARedelivery() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        activate(harness, "genuine")
        let id = try #require(start(harness, producer, as: first).first?.header.correlationID)
        var forged = EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay")
        forged.deliveryCount = 1
        harness.request(forged, payload: Data("forged".utf8), from: PeerID(Data([0xEE])), correlation: id)
        let handed = harness.transport.take(for: first)
        #expect(handed.map(\.header.deliveryCount) == [1])
        #expect(handed.first?.header.correlationID != id)
        #expect(harness.motherboard.deliveries.ledger.pending[id]?.envelope.payload == Data("genuine".utf8))
        #expect(harness.motherboard.deliveries.ledger.pending.count == 2)
    }

    /// The default is what it was: an activation lost with its board is not delivered again.
    @Test func atMostOnceIsTheDefaultAndUnchanged() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atMostOnce), producer: producer)
        activate(harness)
        let delivered = start(harness, producer, as: first)
        #expect(delivered.map(\.header.deliveryCount) == [nil])
        crash(harness, producer)
        #expect(producer.started.count == 1)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .outcomeUnknown)
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)
    }

    /// Bounded: past its share, a board's new at-least-once activation is refused `busy`.
    @Test func theLedgerIsBoundedPerBoard() throws {
        var ledger = DeliveryLedger()
        let name = ScopedName(scope: .root, name: "pay")
        for _ in 0..<DeliveryLedger.maximumPerBoard {
            #expect(ledger.add(Envelope(header: EnvelopeHeader(kind: .activate)), for: name, client: nil) != nil)
        }
        #expect(ledger.add(Envelope(header: EnvelopeHeader(kind: .activate)), for: name, client: nil) == nil)
        #expect(ledger.add(Envelope(header: EnvelopeHeader(kind: .activate)), for: ScopedName(scope: .root, name: "other"), client: nil) != nil)
        let big = Envelope(header: EnvelopeHeader(kind: .activate), payload: Data(count: DeliveryLedger.maximumBytes + 1))
        #expect(ledger.add(big, for: ScopedName(scope: .root, name: "third"), client: nil) == nil)
    }

    /// The delivery count travels in header field 7 and is refused at 0 or of another size.
    @Test func theDeliveryCountIsHeaderFieldSeven() throws {
        var header = EnvelopeHeader(kind: .activate, target: "pay")
        header.deliveryCount = 4_000_000_000
        #expect(try HeaderCodec.decode(Data(HeaderCodec.encode(header))).deliveryCount == 4_000_000_000)
        header.deliveryCount = 0
        #expect(throws: BusError.self) { try HeaderCodec.encode(header) }
        var bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .activate))
        bytes += [7, 0, 4, 0, 0, 0, 0]
        #expect((try? HeaderCodec.decode(Data(bytes))) == nil)
        bytes = try HeaderCodec.encode(EnvelopeHeader(kind: .activate)) + [7, 0, 2, 0, 1]
        #expect((try? HeaderCodec.decode(Data(bytes))) == nil)
    }

    /// A journal that keeps what it is told, and can fail.
    final class Journal: DeliveryJournal {
        var entries: [UInt64: JournaledDelivery] = [:]
        var letters: [UInt64] = []
        var failing = false
        func put(_ delivery: JournaledDelivery) throws {
            if failing { throw BusError(.storageFailed, "disk full") }
            entries[delivery.id] = delivery
        }
        func remove(_ id: UInt64) { entries[id] = nil }
        func putDeadLetter(_ letter: DeadLetter, envelope: Envelope) { letters.append(letter.id) }
        func removeDeadLetter(_ id: UInt64) { letters.removeAll { $0 == id } }
    }

    @Test func theJournalKeepsWhatIsUnansweredAndABrokerStartedFromItDeliversItAgain() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        let journal = Journal()
        harness.motherboard.deliveries.journal = journal
        activate(harness, "A-1")
        let delivered = start(harness, producer, as: first)
        let id = try #require(delivered.first?.header.correlationID)
        #expect(journal.entries[id]?.deliveries == 1 && journal.entries[id]?.envelope.payload == Data("A-1".utf8))
        activate(harness, "A-2")
        let second = try #require(harness.transport.take(for: first).first)
        harness.deliver(second.reply(payload: Data("paid".utf8), source: "pay"), from: first)
        #expect(journal.entries.keys.sorted() == [id])

        // A new broker, from the journal: the board's process lives on and registers again.
        let restarted = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        restarted.motherboard.restoreDeliveries(Array(journal.entries.values), deadLetters: [], now: restarted.now)
        let again = restarted.register("pay", scope: .root, peer: third, pid: producer.nextPID).filter { $0.header.kind != .reply }
        #expect(again.map(\.header.correlationID) == [id])
        #expect(again.map(\.header.deliveryCount) == [2])
        #expect(again.map(\.payload) == [Data("A-1".utf8)])
        // Its answer goes nowhere (nobody waits any more) and empties the ledger.
        restarted.deliver(again[0].reply(payload: Data("paid".utf8), source: "pay"), from: third)
        #expect(restarted.motherboard.deliveries.ledger.pending.isEmpty)
        // A new id from this broker does not take a restored one's.
        activate(restarted, "A-3")
        #expect(restarted.transport.take(for: third).first.map { $0.header.correlationID > id } == true)
    }

    @Test func aRestoredActivationWhoseBoardDoesNotComeBackIsStartedOrDeadLettered() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        let kept = Envelope(header: EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data("B-1".utf8))
        let gone = Envelope(header: EnvelopeHeader(kind: .activate, target: "old", typeName: "Pay"), payload: Data("C-1".utf8))
        let bit = DeliveryLedger.idBit
        harness.motherboard.restoreDeliveries(
            [
                JournaledDelivery(id: bit | 4, board: ScopedName(scope: .root, name: "pay"), deliveries: 1, envelope: kept),
                JournaledDelivery(id: bit | 9, board: ScopedName(scope: .root, name: "old"), deliveries: 1, envelope: gone),
            ], deadLetters: [], now: harness.now, grace: .seconds(5))
        harness.now = harness.now.advanced(by: .seconds(6))
        harness.motherboard.tick(now: harness.now)
        // `pay` is started on demand and handed its activation; `old` is no board any more.
        #expect(producer.started.count == 1)
        let delivered = start(harness, producer, as: first)
        #expect(delivered.map(\.header.correlationID) == [bit | 4] && delivered.map(\.header.deliveryCount) == [2])
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) == [9])
    }

    @Test func anActivationTheJournalCannotKeepIsRefusedNotDelivered() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        let journal = Journal()
        journal.failing = true
        harness.motherboard.deliveries.journal = journal
        activate(harness)
        #expect(start(harness, producer, as: first).isEmpty)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .storageFailed)
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)
    }

    /// `delivery.taken`: the board took the activation; if it then ends, the activation is not
    /// delivered again and its sender learns `outcomeUnknown`; if it answers, the sender gets the
    /// answer. Only the board it was handed to can take it.
    @Test func aTakenActivationIsNeverDeliveredAgainAndItsAnswerStillReachesItsSender() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce), producer: producer)
        let journal = Journal()
        harness.motherboard.deliveries.journal = journal
        func take(_ id: UInt64, from peer: PeerID) -> Envelope? {
            harness.request(
                EnvelopeHeader(kind: .control, source: "pay", typeName: ControlOperation.deliveryTaken),
                payload: try! PayloadCodec.encode(DeliveryTaken(id: id)), from: peer, correlation: 5)
            return harness.transport.take(for: peer).first
        }
        activate(harness, "A-1")
        let delivered = try #require(start(harness, producer, as: first).first)
        let id = delivered.header.correlationID
        #expect(take(id, from: second)?.carriedError?.code == .notRegistered)
        #expect(take(id + 1, from: first)?.carriedError?.code == .badArgument)
        #expect(take(id, from: first)?.header.kind == .reply)
        #expect(journal.entries.isEmpty)

        crash(harness, producer)
        harness.motherboard.tick(now: harness.now)
        let failed = harness.transport.take(for: harness.client)
        #expect(failed.map(\.header.correlationID) == [77] && failed.first?.carriedError?.code == .outcomeUnknown)
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)
        #expect(producer.started.count == 1)
        #expect(harness.motherboard.counters.redeliveries == 0)

        // Taken, then answered: the answer goes to its sender.
        activate(harness, "A-2")
        let next = try #require(start(harness, producer, as: third).first)
        #expect(take(next.header.correlationID, from: third)?.header.kind == .reply)
        harness.deliver(next.reply(payload: Data("paid".utf8), source: "pay"), from: third)
        #expect(harness.transport.take(for: harness.client).map(\.payload) == [Data("paid".utf8)])
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)
    }

    /// The dead-letter list is bounded, and so is what the journal keeps of it: the letter that
    /// goes past the bound goes from the journal too.
    @Test func theJournalForgetsTheDeadLettersTheLedgerDrops() throws {
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce))
        let journal = Journal()
        harness.motherboard.deliveries.journal = journal
        let board = ScopedName(scope: .root, name: "pay")
        var letters: [UInt64] = []
        for number in 0...DeliveryLedger.maximumDeadLetters {
            let envelope = Envelope(header: EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data("\(number)".utf8))
            let added = harness.motherboard.deliveries.ledger.add(envelope, for: board, client: nil)
            let letter = harness.motherboard.deadLetter(try #require(added), reason: "test")
            letters.append(try #require(letter).id)
        }
        #expect(harness.motherboard.deliveries.ledger.deadLetters.count == DeliveryLedger.maximumDeadLetters)
        #expect(journal.letters.count == DeliveryLedger.maximumDeadLetters)
        #expect(journal.letters == Array(letters.dropFirst()))
    }

    /// A replay its board cannot take keeps the letter and says why: the board reached its
    /// restart limit (`boardNotRunning`), then, restarted by hand, takes it. A replay whose
    /// on-demand start fails puts the letter back on the list rather than losing it.
    @Test func aReplayThatCannotBeDeliveredKeepsTheLetterAndSaysWhy() throws {
        let producer = RecordingProducer()
        let manifest = FleetManifest(boards: [
            .init(
                id: "pay", executable: "Pay", start: .onDemand, restart: .onFailure, restartLimit: .init(count: 0, windowSeconds: 60),
                delivery: .atLeastOnce, maxDeliveries: 1)
        ])
        let harness = try Harness(manifest: manifest, producer: producer)
        activate(harness)
        #expect(start(harness, producer, as: first).count == 1)
        crash(harness, producer)
        harness.motherboard.tick(now: harness.now)
        let letter = try #require(harness.motherboard.deliveries.ledger.deadLetters.first?.letter)
        _ = harness.transport.take(for: harness.client)
        func replay(_ id: UInt64) -> BusError? {
            harness.request(
                EnvelopeHeader(kind: .control, typeName: ControlOperation.deadLettersReplay),
                payload: try! PayloadCodec.encode(DeadLetterReplay(id: id)),
                from: harness.client, correlation: 8)
            return harness.transport.take(for: harness.client).last?.carriedError
        }
        let refused = try #require(replay(letter.id))
        #expect(refused.code == .boardNotRunning)
        #expect(refused.message.contains("restart limit") && refused.message.contains("is kept"))
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) == [letter.id])
        #expect(producer.started.count == 1)

        // Restarted by hand (its limit starts over), its start fails, and so does the replay's:
        // the letter comes back on the list, under a new id.
        producer.failure = BusError(.boardNotRunning, "no such executable")
        #expect(throws: BusError.self) {
            try harness.control(ControlOperation.restart, StatusRequest(id: "pay"), from: harness.client, as: BoardInfo.self)
        }
        #expect(replay(letter.id) == nil)
        let back = try #require(harness.motherboard.deliveries.ledger.deadLetters.first)
        #expect(harness.motherboard.deliveries.ledger.deadLetters.count == 1 && back.letter.id != letter.id)
        #expect(back.envelope.payload == Data("A-1".utf8) && back.letter.reason.contains("no such executable"))
        #expect(harness.motherboard.deliveries.ledger.pending.isEmpty)

        // Started as it should: the replay is handed over.
        producer.failure = nil
        #expect(replay(back.letter.id) == nil)
        let delivered = start(harness, producer, as: second)
        #expect(delivered.map(\.payload) == [Data("A-1".utf8)] && delivered.map(\.header.deliveryCount) == [1])
        #expect(harness.motherboard.deliveries.ledger.deadLetters.isEmpty)
        #expect(replay(back.letter.id)?.code == .badArgument)
    }

    /// Bounded in bytes too: letters of 4 MiB each keep at most 16 MiB together, the oldest going
    /// first (from the journal as well); a replay gives its bytes back.
    @Test func theDeadLettersAreBoundedInBytes() throws {
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce))
        let journal = Journal()
        harness.motherboard.deliveries.journal = journal
        let board = ScopedName(scope: .root, name: "pay")
        let size = 4 << 20
        for number in 0..<10 {
            let envelope = Envelope(
                header: EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"), payload: Data(repeating: UInt8(number), count: size))
            let added = harness.motherboard.deliveries.ledger.add(envelope, for: board, client: nil)
            _ = harness.motherboard.deadLetter(try #require(added), reason: "test")
            #expect(harness.motherboard.deliveries.ledger.deadLetterBytes <= DeliveryLedger.maximumDeadLetterBytes)
        }
        let kept = DeliveryLedger.maximumDeadLetterBytes / size
        #expect(harness.motherboard.deliveries.ledger.deadLetters.count == kept)
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map { $0.envelope.payload.first } == (10 - kept..<10).map { UInt8($0) })
        #expect(journal.letters == harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id))
        // One letter alone larger than the bound is not kept at all.
        let huge = Envelope(
            header: EnvelopeHeader(kind: .activate, target: "pay", typeName: "Pay"),
            payload: Data(count: DeliveryLedger.maximumDeadLetterBytes + 1))
        var ledger = DeliveryLedger()
        let id = ledger.add(huge, for: board, client: nil)
        let dead = ledger.deadLetter(try #require(id), reason: "test", time: 0)
        let (_, letter, dropped) = try #require(dead)
        #expect(dropped == [letter] && ledger.deadLetters.isEmpty && ledger.deadLetterBytes == 0)
        // Restored past the bound: the oldest are left out, and leave the journal.
        let restarted = try Harness(manifest: Self.manifest(.atLeastOnce))
        let second = Journal()
        restarted.motherboard.deliveries.journal = second
        let letters = harness.motherboard.deliveries.ledger.deadLetters.map { ($0.letter, $0.envelope) }
        second.letters = letters.map(\.0.id)
        let extra = DeadLetter(id: 99, board: "pay", scope: .root, type: "Pay", attempts: 3, reason: "x", payloadBytes: size, time: 1)
        restarted.motherboard.restoreDeliveries([], deadLetters: letters + [(extra, letters[0].1)], now: restarted.now)
        #expect(restarted.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) == Array(letters.dropFirst().map(\.0.id)) + [99])
        #expect(!second.letters.contains(letters[0].0.id))
    }

    /// What no broker writes, handed to a broker restored from a journal, is left out, never a
    /// trap: ids whose next id overflows or that lack the ledger's bit, an invalid board id, a
    /// letter repeated. Past the grace the valid ones are dead-lettered as usual.
    @Test func aRestoredLedgerLeavesOutWhatNoBrokerWritesAndNeverTraps() throws {
        let harness = try Harness(manifest: Self.manifest(.atLeastOnce))
        let envelope = Envelope(header: EnvelopeHeader(kind: .activate, target: "old", typeName: "Pay"), payload: Data("C-1".utf8))
        let bit = DeliveryLedger.idBit
        let letter = DeadLetter(id: .max, board: "old", scope: .root, type: "Pay", attempts: 3, reason: "x", payloadBytes: 3, time: 1)
        var fine = letter
        fine.id = 5
        harness.motherboard.restoreDeliveries(
            [
                JournaledDelivery(id: .max, board: ScopedName(scope: .root, name: "old"), deliveries: 1, envelope: envelope),
                JournaledDelivery(id: 12, board: ScopedName(scope: .root, name: "old"), deliveries: 1, envelope: envelope),
                JournaledDelivery(id: bit | 6, board: ScopedName(scope: .root, name: "bad..id"), deliveries: 1, envelope: envelope),
                JournaledDelivery(id: bit | 7, board: ScopedName(scope: .root, name: "old"), deliveries: 1, envelope: envelope),
            ], deadLetters: [(letter, envelope), (fine, envelope), (fine, envelope)], now: harness.now, grace: .seconds(5))
        #expect(harness.motherboard.deliveries.ledger.pending.keys.sorted() == [bit | 7])
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) == [5])
        harness.now = harness.now.advanced(by: .seconds(6))
        harness.motherboard.tick(now: harness.now)
        #expect(harness.motherboard.deliveries.ledger.deadLetters.map(\.letter.id) == [5, 7])
        // The next id is past every restored one.
        let next = harness.motherboard.deliveries.ledger.add(envelope, for: ScopedName(scope: .root, name: "pay"), client: nil)
        #expect(next == bit | 8)
    }

    /// `input.refused` is a board's own word, shown by `status`: what a board (or a peer that is
    /// none) writes there cannot grow the broker's memory, break a line of `busctl status`, or
    /// count for another board.
    @Test func aRefusedInputReportIsCountedForItsBoardOnlyBoundedAndOnOneLine() throws {
        let harness = try Harness()
        let board = PeerID(Data([0xB1]))
        harness.register("pay", peer: board)
        func report(_ type: String, _ message: String, from peer: PeerID) {
            let payload = try! PayloadCodec.encode(InputRefused(type: type, error: BusError(.busy, message)))
            harness.deliver(
                Envelope(header: EnvelopeHeader(kind: .control, source: "pay", typeName: ControlOperation.inputRefused), payload: payload), from: peer
            )
        }
        report("Order\n\u{1B}[2J", String(repeating: "é", count: 100_000) + "\nfake line", from: board)
        // A client naming the board as its source is not the board.
        report("Order", "forged", from: harness.client)
        let info = try #require(try harness.list().boards.first)
        #expect(info.refusedInputs == 1)
        let shown = try #require(info.lastRefusedInput)
        #expect(!shown.contains("\n") && !shown.contains("\u{1B}") && !shown.contains("forged"))
        #expect(shown.utf8.count < 2_000 && shown.contains("busy"))
    }
}
