import BusCore
import DequeModule
import Foundation

/// Where the broker writes its ledger's changes, so that a broker started again (after a crash
/// too) delivers what was not answered: the daemon gives a file in its state directory. Called
/// on the routing loop before the broker acts on the change.
public protocol DeliveryJournal: AnyObject {
    /// An activation kept, with its delivery count as it is about to be handed over. When this
    /// throws, the activation is refused (`storageFailed`), never delivered unkept.
    func put(_ delivery: JournaledDelivery) throws
    /// It is done with (answered, or dead-lettered: then ``putDeadLetter(_:envelope:)``).
    func remove(_ id: UInt64)
    func putDeadLetter(_ letter: DeadLetter, envelope: Envelope)
    /// A dead letter replayed.
    func removeDeadLetter(_ id: UInt64)
}

/// An activation on the ledger as the journal keeps it.
public struct JournaledDelivery: Sendable {
    public var id: UInt64
    public var board: ScopedName
    /// How many times it was handed to its board.
    public var deliveries: Int
    /// As it came (its sender's correlation id in its header).
    public var envelope: Envelope
    /// When its board failed it: when it is to be delivered again (seconds since 1970).
    public var retryAt: Double?

    public init(id: UInt64, board: ScopedName, deliveries: Int, envelope: Envelope, retryAt: Double? = nil) {
        self.id = id
        self.board = board
        self.deliveries = deliveries
        self.envelope = envelope
        self.retryAt = retryAt
    }

    /// Whether a ledger could have made `id`: its bit, and a number it counts on from without
    /// overflow.
    public static func isLedgerID(_ id: UInt64) -> Bool {
        DeliveryLedger.isLedgerID(id) && DeliveryLedger.isCountable(id & ~DeliveryLedger.idBit)
    }

    /// Whether a ledger could have made a dead letter's `id` (a ledger id without its bit).
    public static func isLetterID(_ id: UInt64) -> Bool { DeliveryLedger.isCountable(id) }
}

/// The activations of at-least-once boards that their board has not acknowledged yet, and those
/// that ran out of deliveries (PROTOCOL 5.3). Pure: the broker asks it and routes.
///
/// An activation is kept from its first delivery until its board answers it (the answer names
/// the ledger's id as correlation id, the same on every delivery). When its board ends first,
/// it is delivered again to the board's next instance with its delivery count one higher, until
/// `maxDeliveries`; then it goes on the dead-letter list. Bounded in count per board and in bytes
/// overall (a new activation past either is refused `busy`), and the dead letters in count and in
/// bytes (past either the oldest go).
struct DeliveryLedger {
    struct Pending {
        let id: UInt64
        let board: ScopedName
        /// The activation as it came (its header's correlation id is the client's).
        let envelope: Envelope
        /// How many times it was handed to its board (0 while it waits for the first).
        var deliveries: Int
        /// Who waits for its answer, and under which id.
        let client: PeerID?
        let clientCorrelationID: UInt64
        /// Its board said it has taken it (`delivery.taken`): kept only to relay the answer, never
        /// delivered again.
        var taken = false
        /// Its board failed it (a transient error): delivered again then, not when the board ends.
        var retryAt: ContinuousClock.Instant?
    }

    /// Ids the ledger makes carry this bit, so that an answer to one is told from one to a request
    /// of the reply registry.
    static let idBit = DeliveryID.bit
    static let maximumPerBoard = 1_024
    static let maximumBytes = 64 << 20
    static let maximumDeadLetters = 1_000
    /// The payload bytes the dead letters keep, all together.
    static let maximumDeadLetterBytes = 16 << 20

    private(set) var pending: [UInt64: Pending] = [:]
    /// The ids of `pending` that wait for a retry.
    private(set) var retries: Set<UInt64> = []
    private var perBoard: [ScopedName: Int] = [:]
    private(set) var bytes = 0
    private(set) var deadLetters = Deque<(letter: DeadLetter, envelope: Envelope)>()
    private(set) var deadLetterBytes = 0
    private var nextID: UInt64 = 1

    static func isLedgerID(_ id: UInt64) -> Bool { id & idBit != 0 }

    /// A number the ledger can count on from (its next id stays below the ledger's bit).
    static func isCountable(_ number: UInt64) -> Bool { number > 0 && number < idBit - 1 }

    /// Whether a new activation of `size` bytes for `board` would be kept.
    func hasRoom(for board: ScopedName, bytes size: Int) -> Bool {
        perBoard[board, default: 0] < Self.maximumPerBoard && bytes + size <= Self.maximumBytes
    }

    /// Keeps a new activation for `board`; nil when the board's share or the bytes are spent.
    mutating func add(_ envelope: Envelope, for board: ScopedName, client: PeerID?) -> UInt64? {
        let size = envelope.payload.count
        guard hasRoom(for: board, bytes: size) else { return nil }
        let id = Self.idBit | nextID
        nextID += 1
        pending[id] = Pending(
            id: id, board: board, envelope: envelope, deliveries: 0, client: client, clientCorrelationID: envelope.header.correlationID)
        perBoard[board, default: 0] += 1
        bytes += size
        return id
    }

    /// Counts a delivery of `id`; returns its delivery count.
    mutating func delivered(_ id: UInt64) -> Int? {
        guard pending[id] != nil else { return nil }
        pending[id]!.deliveries += 1
        return pending[id]!.deliveries
    }

    /// The board answered `id`: it is done with. Nil when it is not the board's (or not kept).
    mutating func acknowledge(_ id: UInt64, by board: ScopedName) -> Pending? {
        guard let entry = pending[id], entry.board == board else { return nil }
        return remove(id)
    }

    /// What `board` held, unanswered and not taken, when it ended: oldest first. Those it failed
    /// wait for their retry instead.
    func held(by board: ScopedName) -> [Pending] {
        pending.values.filter { $0.board == board && $0.deliveries > 0 && !$0.taken && $0.retryAt == nil }.sorted { $0.id < $1.id }
    }

    /// Its board failed `id`: it is delivered again at `time` (``takeDueRetries(now:)``).
    mutating func scheduleRetry(_ id: UInt64, at time: ContinuousClock.Instant) {
        guard pending[id] != nil else { return }
        pending[id]!.retryAt = time
        retries.insert(id)
    }

    /// The failed activations whose retry is due, oldest first; no longer scheduled.
    mutating func takeDueRetries(now: ContinuousClock.Instant) -> [Pending] {
        guard !retries.isEmpty else { return [] }
        var due: [Pending] = []
        for id in retries {
            guard let time = pending[id]?.retryAt, time <= now else { continue }
            pending[id]!.retryAt = nil
            retries.remove(id)
            due.append(pending[id]!)
        }
        return due.sorted { $0.id < $1.id }
    }

    /// The board says it has taken `id`: it is not delivered again. False when it is not the
    /// board's (or not kept).
    mutating func take(_ id: UInt64, by board: ScopedName) -> Bool {
        guard pending[id]?.board == board, pending[id]!.deliveries > 0 else { return false }
        pending[id]!.taken = true
        return true
    }

    /// What `board` had taken and not answered when it ended: off the ledger.
    mutating func removeTaken(by board: ScopedName) -> [Pending] {
        let taken = pending.values.filter { $0.board == board && $0.taken }.sorted { $0.id < $1.id }
        for entry in taken { remove(entry.id) }
        return taken
    }

    @discardableResult
    mutating func remove(_ id: UInt64) -> Pending? {
        guard let entry = pending.removeValue(forKey: id) else { return nil }
        retries.remove(id)
        perBoard[entry.board, default: 1] -= 1
        if perBoard[entry.board] == 0 { perBoard[entry.board] = nil }
        bytes -= entry.envelope.payload.count
        return entry
    }

    /// Takes `id` off the ledger onto the dead-letter list; past the bounds the oldest letters
    /// go (the new one too, when it alone is larger than the bytes allowed), and are returned as
    /// `dropped`.
    mutating func deadLetter(_ id: UInt64, reason: String, time: Double, lastError: BusError? = nil) -> (
        entry: Pending, letter: DeadLetter, dropped: [DeadLetter]
    )? {
        guard let entry = remove(id) else { return nil }
        // Every board on the ledger has a valid id (a live board's, or one checked on restore).
        guard let board = try? BoardID(validating: entry.board.name) else { return nil }
        let letter = DeadLetter(
            id: id & ~Self.idBit, board: board, scope: entry.board.scope, type: entry.envelope.header.typeName,
            attempts: entry.deliveries, reason: reason, payloadBytes: entry.envelope.payload.count, time: time, lastError: lastError)
        return (entry, letter, keepDeadLetter(letter, entry.envelope))
    }

    /// Appends a letter; returns those that went to keep the list within its bounds.
    private mutating func keepDeadLetter(_ letter: DeadLetter, _ envelope: Envelope) -> [DeadLetter] {
        deadLetters.append((letter, envelope))
        deadLetterBytes += envelope.payload.count
        var dropped: [DeadLetter] = []
        while let oldest = deadLetters.first, deadLetters.count > Self.maximumDeadLetters || deadLetterBytes > Self.maximumDeadLetterBytes {
            deadLetters.removeFirst()
            deadLetterBytes -= oldest.envelope.payload.count
            dropped.append(oldest.letter)
        }
        return dropped
    }

    /// What a journal kept, taken back by a broker started again: no sender waits for any of
    /// them any more. Returns the dead letters that the bounds leave out; an entry whose id a
    /// broker could not have made, whose board id is invalid or that repeats a letter is left out.
    /// `now` and `wallNow` (seconds since 1970) place a journaled retry on this broker's clock, at
    /// most the longest backoff ahead.
    mutating func restore(
        _ entries: [JournaledDelivery], deadLetters letters: [(DeadLetter, Envelope)], now: ContinuousClock.Instant = .now,
        wallNow: Double = Date().timeIntervalSince1970
    ) -> [DeadLetter] {
        for entry in entries where Self.isLedgerID(entry.id) && Self.isCountable(entry.id & ~Self.idBit) && BoardID.isValid(entry.board.name) {
            pending[entry.id] = Pending(
                id: entry.id, board: entry.board, envelope: entry.envelope, deliveries: entry.deliveries, client: nil,
                clientCorrelationID: entry.envelope.header.correlationID)
            if let retryAt = entry.retryAt, retryAt.isFinite {
                let wait = min(max(0, retryAt - wallNow), FleetManifest.Board.maximumBackoffSeconds)
                scheduleRetry(entry.id, at: now + .milliseconds(Int64(wait * 1_000)))
            }
            perBoard[entry.board, default: 0] += 1
            bytes += entry.envelope.payload.count
            nextID = max(nextID, (entry.id & ~Self.idBit) + 1)
        }
        var dropped: [DeadLetter] = []
        for (letter, envelope) in letters {
            // The journal's reader sets both aside first.
            guard Self.isCountable(letter.id), !deadLetters.contains(where: { $0.letter.id == letter.id }) else { continue }
            dropped += keepDeadLetter(letter, envelope)
            nextID = max(nextID, letter.id + 1)
        }
        return dropped
    }

    /// Takes a dead letter off the list, to deliver it again.
    mutating func takeDeadLetter(_ id: UInt64) -> (letter: DeadLetter, envelope: Envelope)? {
        guard let index = deadLetters.firstIndex(where: { $0.letter.id == id }) else { return nil }
        let taken = deadLetters.remove(at: index)
        deadLetterBytes -= taken.envelope.payload.count
        return taken
    }
}
