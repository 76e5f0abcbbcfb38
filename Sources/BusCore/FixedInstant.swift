/// An instant held as its offset from a fixed origin: a `Duration`, whose layout the compiler
/// knows, where `ContinuousClock.Instant`'s may change with the standard library (it is not
/// frozen). A value holding an `Instant` is copied, moved and destroyed through runtime calls;
/// one holding a `FixedInstant` inline, as any other plain value. For what is stored per message
/// (a request waiting for its answer).
@frozen
package struct FixedInstant: Comparable, Hashable, Sendable {
    @usableFromInline static let origin = ContinuousClock.Instant.now
    @usableFromInline let offset: Duration

    @inlinable
    package init(_ instant: ContinuousClock.Instant) { offset = Self.origin.duration(to: instant) }

    @inlinable
    package var instant: ContinuousClock.Instant { Self.origin.advanced(by: offset) }

    /// This instant moved by `duration`.
    @inlinable
    package func advanced(by duration: Duration) -> FixedInstant { FixedInstant(offset: offset + duration) }

    @inlinable
    init(offset: Duration) { self.offset = offset }

    /// From `earlier` to this instant.
    @inlinable
    package func duration(since earlier: FixedInstant) -> Duration { offset - earlier.offset }

    @inlinable
    package static func < (lhs: FixedInstant, rhs: FixedInstant) -> Bool { lhs.offset < rhs.offset }
}
