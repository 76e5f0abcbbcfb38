extension Duration {
    /// The duration in whole milliseconds, rounded up, so that a wait never ends just before its deadline.
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}

extension Duration {
    /// The duration in whole nanoseconds (rounded down), saturating at the bounds of `Int64`.
    public var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return scaled.addingReportingOverflow(attoseconds / 1_000_000_000).overflow
            ? (seconds < 0 ? .min : .max) : scaled + attoseconds / 1_000_000_000
    }

    /// The duration in whole microseconds (rounded down), saturating.
    public var wholeMicroseconds: Int64 { wholeNanoseconds / 1000 }
}
