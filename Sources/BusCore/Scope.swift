/// A motherboard scope (Boardy's nested motherboards): where a board lives, where flows and
/// `nextToBoard` stay, and where actions start bubbling from. Named by a path of board-id-like
/// segments (`checkout`, `checkout/payment`), or the root.
///
/// On the wire it is a plain string, empty for the root.
public struct Scope: Hashable, Sendable, Comparable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The wire name: empty for the root.
    public let name: String

    public init(_ name: String) { self.name = name }

    public init(stringLiteral name: String) { self.name = name }

    /// The outermost scope, which every other scope descends from.
    public static let root = Scope("")

    public var isRoot: Bool { name.isEmpty }

    /// The name, or `(root)` for the root (as busctl shows it).
    public var description: String { isRoot ? "(root)" : name }

    public static func < (left: Scope, right: Scope) -> Bool { left.name < right.name }

    public init(from decoder: any Decoder) throws {
        name = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}
