import BusCore

/// The tree of motherboard scopes declared by the manifest.
struct ScopeTable {
    /// Parent of each scope; the root has none.
    private(set) var parents: [Scope: Scope] = [:]
    /// Scopes in declaration order, root first.
    private(set) var names: [Scope] = [.root]

    init(_ manifest: FleetManifest) throws {
        for scope in manifest.scopes {
            guard !scope.name.isRoot, BoardID.isValid(scope.name.name) else {
                throw BusError(.badArgument, "invalid scope name '\(scope.name)'")
            }
            guard parents[scope.name] == nil else { throw BusError(.badArgument, "scope '\(scope.name)' declared twice") }
            parents[scope.name] = scope.parent
            names.append(scope.name)
        }
        for name in names.dropFirst() {
            guard let parent = parents[name], parent.isRoot || parents[parent] != nil else {
                throw BusError(.badArgument, "scope '\(name)' has an unknown parent '\(parents[name]?.name ?? "")'")
            }
            // A cycle would make bubbling loop forever.
            guard chain(from: name).count <= names.count else { throw BusError(.badArgument, "scope '\(name)' is in a cycle") }
        }
        for board in manifest.boards where !contains(board.scope) {
            throw BusError(.badArgument, "board '\(board.id)' is in undeclared scope '\(board.scope)'")
        }
    }

    func contains(_ scope: Scope) -> Bool {
        scope.isRoot || parents[scope] != nil
    }

    func parent(of scope: Scope) -> Scope? {
        scope.isRoot ? nil : parents[scope]
    }

    /// The scope, then each ancestor up to the root: the path of a bubbling action.
    func chain(from scope: Scope) -> [Scope] {
        var result: [Scope] = []
        var current: Scope? = scope
        while let name = current, result.count <= names.count {
            result.append(name)
            current = parent(of: name)
        }
        return result
    }
}
