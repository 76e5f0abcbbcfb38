import BusCore
import Foundation

/// What the broker keeps of at-least-once activations (PROTOCOL 5.3): the ledger of those not
/// answered yet and the dead letters, the journal its changes are written to, the boards that
/// ended holding some, and those a broker before this one left.
package struct Deliveries {
    /// At-least-once activations not acknowledged yet, and the dead letters.
    var ledger = DeliveryLedger()
    /// Where the ledger's changes are written (the daemon's file); nil: the ledger is lost with
    /// the broker.
    package var journal: (any DeliveryJournal)?
    /// At-least-once boards that ended holding activations, to deliver them again.
    var endedHolding: [(board: LiveBoard, reason: String)] = []
    /// Boards holding activations a broker before this one kept, and when those still not live
    /// are activated (started, or their activations dead-lettered).
    var restoredHolders: Set<ScopedName> = []
    var restoredDeadline: ContinuousClock.Instant?
    /// `input.refused` reports, logged once a second at most.
    var refusedInputLog = LogThrottle(every: .seconds(1))

    /// The boards that ended holding activations since the last call.
    mutating func takeEndedHolding() -> [(board: LiveBoard, reason: String)] {
        guard !endedHolding.isEmpty else { return [] }
        defer { endedHolding = [] }
        return endedHolding
    }

    /// Restored activations whose boards are to be activated now (their grace is over), once.
    mutating func takeRestoredDue(now: ContinuousClock.Instant) -> [ScopedName] {
        guard let restoredDeadline, restoredDeadline <= now else { return [] }
        self.restoredDeadline = nil
        return restoredHolders.sorted()
    }

    /// Restored activations are to be delivered to `boards` as they register, and to those not
    /// live by `deadline` then.
    mutating func expectRestored(_ boards: Set<ScopedName>, until deadline: ContinuousClock.Instant?) {
        restoredHolders = boards
        restoredDeadline = boards.isEmpty ? nil : deadline
    }
}
