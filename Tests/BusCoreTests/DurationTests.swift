import BusCore
import Testing

/// The whole-unit readings of a duration: rounded as each says, and saturated rather than
/// wrapped at the bounds of their integer.
@Suite struct DurationTests {
    @Test func nanosecondsRoundTowardZero() {
        #expect(Duration.nanoseconds(1_234).wholeNanoseconds == 1_234)
        #expect((Duration.nanoseconds(5) + .seconds(1) / 1_000_000_000_000).wholeNanoseconds == 5)
        #expect((Duration.nanoseconds(-5) - .seconds(1) / 1_000_000_000_000).wholeNanoseconds == -5)
        #expect(Duration.zero.wholeNanoseconds == 0)
        #expect(Duration.seconds(3).wholeNanoseconds == 3_000_000_000)
        #expect(Duration.milliseconds(-2).wholeNanoseconds == -2_000_000)
        #expect(Duration.seconds(1_000).wholeMicroseconds == 1_000_000_000)
    }

    @Test func nanosecondsSaturate() {
        #expect(Duration.seconds(Int64.max).wholeNanoseconds == .max)
        #expect(Duration.seconds(Int64.min).wholeNanoseconds == .min)
        // Just inside and just past Int64's 9.22 s × 10⁹.
        #expect(Duration.nanoseconds(Int64.max).wholeNanoseconds == .max)
        #expect((Duration.nanoseconds(Int64.max) - .nanoseconds(1)).wholeNanoseconds == .max - 1)
        #expect((Duration.nanoseconds(Int64.max) + .nanoseconds(1)).wholeNanoseconds == .max)
        #expect((Duration.nanoseconds(Int64.min) - .nanoseconds(1)).wholeNanoseconds == .min)
    }

    @Test func millisecondsRoundUp() {
        #expect(Duration.nanoseconds(1).wholeMilliseconds == 1)
        #expect(Duration.milliseconds(7).wholeMilliseconds == 7)
        #expect((Duration.milliseconds(7) + .nanoseconds(1)).wholeMilliseconds == 8)
        #expect(Duration.zero.wholeMilliseconds == 0)
    }
}

/// An instant held as an offset from a fixed origin comes back as it went in, and orders and
/// subtracts as the instants do, however far from the origin.
@Suite struct FixedInstantTests {
    @Test func itComesBackAndOrdersAsTheInstant() {
        let now = ContinuousClock.now
        let offsets: [Duration] = [.zero, .nanoseconds(1), .nanoseconds(-1), .seconds(-86_400 * 365 * 10), .seconds(86_400 * 365 * 100)]
        for first in offsets {
            #expect(FixedInstant(now + first).instant == now + first)
            for second in offsets {
                let (a, b) = (FixedInstant(now + first), FixedInstant(now + second))
                #expect((a < b) == (now + first < now + second))
                #expect((a == b) == (first == second))
                #expect(b.duration(since: a) == second - first)
            }
        }
    }
}
