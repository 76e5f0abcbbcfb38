import Testing

@testable import BusCore

@Suite("Log throttle")
struct LogThrottleTests {
    @Test func aLineAtMostEveryIntervalEachSayingHowManySinceTheLast() {
        var throttle = LogThrottle(every: .seconds(1))
        let start = ContinuousClock.now
        #expect(throttle.note(now: start) == 1)
        for step in 1...9 { #expect(throttle.note(now: start.advanced(by: .milliseconds(100 * step))) == nil) }
        #expect(throttle.note(now: start.advanced(by: .seconds(1))) == 10)
        #expect(throttle.note(now: start.advanced(by: .milliseconds(1500))) == nil)
        #expect(throttle.total == 12)
    }
}
