/// The correlation ids a gateway gives what it sends to its motherboard and its peers: one
/// source per gateway, never 0 (the id of what waits for no answer).
package struct IDSource: Sendable {
    private var next: UInt64 = 1

    package init() {}

    package mutating func make() -> UInt64 {
        defer { next = next == .max ? 1 : next + 1 }
        return next
    }
}
