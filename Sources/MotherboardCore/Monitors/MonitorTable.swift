import BusCore
import Foundation

/// The monitors attached to the broker (`busctl monitor`): what each selects, and how far each
/// has read. The broker pushes each an event per routed message it selects, at most `window`
/// beyond what it reported read; past that it drops and counts, and tells the monitor how many
/// with its next push. So a slow monitor costs the broker one comparison per message, and never
/// memory: nothing is queued for it but what its window allows.
struct MonitorTable {
    struct Monitor {
        var request: MonitorRequest
        /// The remote principal it attached as (nil: the broker's own user), which the access
        /// policy asks about each message it would see.
        var principal: String?
        var sent: UInt64 = 0
        /// Selected but not sent since the last push.
        var dropped = 0
        var renewedAt: ContinuousClock.Instant
    }

    private(set) var monitors: [PeerID: Monitor] = [:]
    /// Lines not sent to a monitor because it had not read its window, since the broker started.
    private(set) var droppedTotal = 0

    var isEmpty: Bool { monitors.isEmpty }
    var count: Int { monitors.count }

    func contains(_ peer: PeerID) -> Bool { monitors[peer] != nil }

    /// A monitor not renewed for this long is forgotten.
    static let lease: Duration = .seconds(5)

    /// Starts a monitor, or renews one (its filter may change; its counts go on).
    mutating func renew(_ peer: PeerID, _ request: MonitorRequest, principal: String?, now: ContinuousClock.Instant) {
        if var monitor = monitors[peer] {
            monitor.request = request
            monitor.principal = principal
            monitor.renewedAt = now
            monitors[peer] = monitor
        } else {
            monitors[peer] = Monitor(request: request, principal: principal, renewedAt: now)
        }
    }

    mutating func remove(_ peer: PeerID) { monitors[peer] = nil }

    /// Forgets monitors past their lease; returns how many.
    mutating func expire(now: ContinuousClock.Instant) -> Int {
        let stale = monitors.filter { $0.value.renewedAt.duration(to: now) > Self.lease }.map(\.key)
        for peer in stale { monitors[peer] = nil }
        return stale.count
    }

    /// Whether `peer` may be sent one more push now (it has read enough of what it was sent).
    func hasWindow(_ peer: PeerID) -> Bool {
        guard let monitor = monitors[peer] else { return false }
        return monitor.sent &- monitor.request.read < UInt64(monitor.request.window)
    }

    /// An event selected for `peer` is not sent: counted, to be reported.
    mutating func drop(_ peer: PeerID) {
        monitors[peer]?.dropped += 1
        droppedTotal += 1
    }

    /// A push went out: the drops it reported are cleared.
    mutating func pushed(_ peer: PeerID) {
        monitors[peer]?.sent += 1
        monitors[peer]?.dropped = 0
    }

    /// A push could not be handed to the socket (its queue is full): the drops it reported are
    /// still to report, and its event, if it had one, is one more.
    mutating func failed(_ peer: PeerID, reported: Int, hadEvent: Bool) {
        monitors[peer]?.dropped = reported + (hadEvent ? 1 : 0)
        if hadEvent { droppedTotal += 1 }
    }
}
