extension Duration {
    /// The duration in whole milliseconds, rounded up, so that a wait never ends just before its deadline.
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}

extension Duration {
    /// The duration in whole nanoseconds (rounded toward zero), saturating at the bounds of
    /// `Int64`. (One 128-bit division: `components` costs two, and the broker takes this on every
    /// answer it relays.)
    @inlinable
    public var wholeNanoseconds: Int64 {
        Int64(clamping: attoseconds / 1_000_000_000)
    }

    /// The duration in whole microseconds (rounded down), saturating.
    public var wholeMicroseconds: Int64 { wholeNanoseconds / 1000 }
}
