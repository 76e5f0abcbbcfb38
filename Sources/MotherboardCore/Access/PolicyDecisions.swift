import BusCore

/// One question to the access policy, as cached per principal.
struct PolicyQuestion: Hashable {
    let principal: String
    let operation: AccessPolicy.Operation
    let target: String
    let command: String?
}

/// The access policy's answers, cached per principal; each principal's cache is bounded, and so
/// is the number of principals (the allow-list's keys: more than the bound empties them all).
struct PolicyDecisions {
    static let maximumPerPrincipal = 1_024
    static let maximumPrincipals = 4_096

    private var byPrincipal: [String: [PolicyQuestion: AccessPolicy.Decision]] = [:]

    /// The cached answer to `question`, or `decide`'s, cached.
    mutating func decide(_ question: PolicyQuestion, _ decide: () -> AccessPolicy.Decision) -> AccessPolicy.Decision {
        if let known = byPrincipal[question.principal]?[question] { return known }
        let decision = decide()
        if byPrincipal[question.principal] == nil, byPrincipal.count >= Self.maximumPrincipals { byPrincipal.removeAll(keepingCapacity: true) }
        if byPrincipal[question.principal, default: [:]].count >= Self.maximumPerPrincipal {
            byPrincipal[question.principal]?.removeAll(keepingCapacity: true)
        }
        byPrincipal[question.principal, default: [:]][question] = decision
        return decision
    }

    /// The answers cached for `principal`.
    func count(of principal: String) -> Int { byPrincipal[principal]?.count ?? 0 }

    mutating func removeAll() { byPrincipal.removeAll(keepingCapacity: true) }
}
