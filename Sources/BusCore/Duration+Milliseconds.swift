extension Duration {
    /// The duration in whole milliseconds, rounded up, so that a wait never ends just before its deadline.
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}
