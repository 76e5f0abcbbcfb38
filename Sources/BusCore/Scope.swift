/// A motherboard scope (Boardy's nested motherboards): where a board lives, where flows and
/// `nextToBoard` stay, and where actions start bubbling from. Named like a board id (`checkout`,
/// `express`; the manifest says which scope is inside which), or the root.
///
/// On the wire it is a plain string, empty for the root.
public struct Scope: RawRepresentable, Hashable, Sendable, Comparable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The wire name: empty for the root.
    public let name: String

    public init(_ name: String) { self.name = name }

    /// The wire name (Codable as a plain string through `RawRepresentable`).
    public init(rawValue: String) { name = rawValue }
    public var rawValue: String { name }

    public init(stringLiteral name: String) { self.name = name }

    /// The outermost scope, which every other scope descends from.
    public static let root = Scope("")

    public var isRoot: Bool { name.isEmpty }

    /// The name, or `(root)` for the root (as busctl shows it).
    public var description: String { isRoot ? "(root)" : name }

    public static func < (left: Scope, right: Scope) -> Bool { left.name < right.name }
}

/// A board's name within a scope: ids are unique per scope, not across the fleet.
public struct ScopedName: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var scope: Scope
    public var name: String

    public init(scope: Scope, name: String) {
        self.scope = scope
        self.name = name
    }

    public var description: String { scope.isRoot ? name : "\(scope.name)/\(name)" }

    /// A name as the access policy writes it (`scope/name`, or `name` in the root scope): the
    /// inverse of ``description``.
    public init(policyTarget text: String) {
        guard let slash = text.lastIndex(of: "/") else {
            self.init(scope: .root, name: text)
            return
        }
        self.init(scope: Scope(String(text[..<slash])), name: String(text[text.index(after: slash)...]))
    }

    public static func < (left: ScopedName, right: ScopedName) -> Bool {
        (left.scope, left.name) < (right.scope, right.name)
    }
}
