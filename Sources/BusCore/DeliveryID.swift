/// The correlation ids of the at-least-once deliveries the broker keeps in its ledger (PROTOCOL
/// 5.3): the top bit set and a number below it, so that an answer to one is told from an answer
/// to a request. Shown to people as `d<number>`.
public enum DeliveryID {
    // Inlinable: the broker tests it on the routing path.
    @inlinable public static var bit: UInt64 { 1 << 63 }

    /// The delivery's number when `id` is a delivery's, nil otherwise.
    public static func number(of id: UInt64) -> UInt64? { id & bit != 0 ? id & ~bit : nil }

    /// `#d3` for a delivery, `#42` for any other correlation id.
    public static func shown(_ id: UInt64) -> String { number(of: id).map { "#d\($0)" } ?? "#\(id)" }
}
