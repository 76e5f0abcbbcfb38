import BusCore
import Foundation

/// A board on another host whose link failed, kept as it was last seen.
struct UnreachableBoard {
    let board: LiveBoard
    let since: ContinuousClock.Instant
}

/// What a motherboard keeps of its links to other motherboards: its uplink (when it serves scopes
/// of a parent one) and the NATS gateway, the secrets they prove themselves with, its mark in the
/// link trail of actions and the chain above it (loop detection), and the boards on other hosts
/// whose link failed.
package struct Links {
    /// The uplink, once attached.
    var uplink: PeerID?
    /// The secret the uplink proves itself with (``UplinkAttach``); nil: no uplink may attach.
    package var uplinkSecret: String?
    /// The NATS gateway, once attached (`export.attach`): it is told of every board here.
    var exporter: PeerID?
    /// The secret the NATS gateway proves itself with; nil: none may attach.
    package var exportSecret: String?
    /// This motherboard's mark in the link trail of the actions it sends up (random per process).
    package let linkID = UInt64.random(in: 1...UInt64.max)
    /// The link ids of the motherboards above this one (its parent first), as its uplink learned
    /// them when its link came up: a motherboard among them may not attach here.
    package internal(set) var ancestors: [UInt64] = []
    /// Actions dropped because they came back around a cycle of attached motherboards, and when
    /// that was last logged.
    var loopedActions = LogThrottle(every: .seconds(10))
    /// Boards on other hosts whose link failed: kept, shown `unreachable`, until they register again.
    var unreachable: [ScopedName: UnreachableBoard] = [:]

    /// Whether `peer` is one of this motherboard's own links (the uplink or the NATS gateway).
    func isLink(_ peer: PeerID) -> Bool { peer == uplink || peer == exporter }

    /// The link id among `asking` (the chain of a motherboard attaching here) that would close a
    /// cycle: this motherboard's own, or one above it.
    func cycle(in asking: [UInt64]) -> UInt64? {
        let chain = [linkID] + ancestors
        return asking.first(where: chain.contains)
    }

    /// Whether an action's link trail shows it went up from here before (it came back around).
    func hasPassedHere(_ trail: [UInt64]?) -> Bool {
        trail?.contains(linkID) == true
    }

    /// Forgets the unreachable boards lost for longer than `retention`; returns their names.
    mutating func forgetUnreachable(olderThan retention: Duration, now: ContinuousClock.Instant) -> [ScopedName] {
        guard !unreachable.isEmpty else { return [] }
        let old = unreachable.filter { $0.value.since.duration(to: now) > retention }.map(\.key)
        for name in old { unreachable[name] = nil }
        return old.sorted()
    }

    /// Forgets the unreachable boards that registered over a connection of one of `keys`.
    mutating func forgetUnreachable(ofKeys keys: Set<String>) {
        for (name, lost) in unreachable where lost.board.remote.map({ keys.contains($0.keyName) }) == true {
            unreachable[name] = nil
        }
    }
}
