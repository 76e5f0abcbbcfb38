import BusCore

/// A board's name within a scope: ids are unique per scope, not across the fleet.
public struct ScopedName: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// Empty for the root scope.
    public var scope: String
    public var name: String

    public init(scope: String, name: String) {
        self.scope = scope
        self.name = name
    }

    public var description: String { scope.isEmpty ? name : "\(scope)/\(name)" }

    public static func < (left: ScopedName, right: ScopedName) -> Bool {
        (left.scope, left.name) < (right.scope, right.name)
    }
}

/// The tree of motherboard scopes declared by the manifest.
struct ScopeTable {
    /// Parent of each scope; the root ("") has none.
    private(set) var parents: [String: String] = [:]
    /// Scope names in declaration order, root first.
    private(set) var names: [String] = [""]

    init(_ manifest: FleetManifest) throws {
        for scope in manifest.scopes {
            guard !scope.name.isEmpty, BoardID.isValid(scope.name) else {
                throw BusError(.badArgument, "invalid scope name '\(scope.name)'")
            }
            guard parents[scope.name] == nil else { throw BusError(.badArgument, "scope '\(scope.name)' declared twice") }
            parents[scope.name] = scope.parent
            names.append(scope.name)
        }
        for name in names.dropFirst() {
            guard let parent = parents[name], parent.isEmpty || parents[parent] != nil else {
                throw BusError(.badArgument, "scope '\(name)' has an unknown parent '\(parents[name] ?? "")'")
            }
            // A cycle would make bubbling loop forever.
            guard chain(from: name).count <= names.count else { throw BusError(.badArgument, "scope '\(name)' is in a cycle") }
        }
        for board in manifest.boards where !contains(board.scope) {
            throw BusError(.badArgument, "board '\(board.id)' is in undeclared scope '\(board.scope)'")
        }
    }

    func contains(_ scope: String) -> Bool {
        scope.isEmpty || parents[scope] != nil
    }

    func parent(of scope: String) -> String? {
        scope.isEmpty ? nil : parents[scope]
    }

    /// The scope, then each ancestor up to the root: the path of a bubbling action.
    func chain(from scope: String) -> [String] {
        var result: [String] = []
        var current: String? = scope
        while let name = current, result.count <= names.count {
            result.append(name)
            current = parent(of: name)
        }
        return result
    }
}
