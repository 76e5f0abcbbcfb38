/// An event that is counted every time and logged at most once an interval, each line saying how
/// many happened since the line before: what a peer can make happen thousands of times a second
/// (refused connections, refused services, looped actions) never floods the log.
package struct LogThrottle: Sendable {
    package let interval: Duration
    package private(set) var total = 0
    private var sinceLine = 0
    private var lastLine: ContinuousClock.Instant?

    package init(every interval: Duration) { self.interval = interval }

    /// Counts one; when a line is due now, returns how many to report in it.
    package mutating func note(now: ContinuousClock.Instant = .now) -> Int? {
        total += 1
        sinceLine += 1
        if let lastLine, lastLine.duration(to: now) < interval { return nil }
        lastLine = now
        defer { sinceLine = 0 }
        return sinceLine
    }
}
