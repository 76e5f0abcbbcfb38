import BusCore
import Foundation

/// One question to the access policy, as cached per principal.
struct PolicyQuestion: Hashable {
    let principal: String
    let operation: AccessPolicy.Operation
    let target: String
    let command: String?
}

/// Who may do what (PROTOCOL §5.10): the access policy, asked at the admission gate for every
/// message of a remote principal. The principal comes with each message from the transport (the
/// name the ZAP handler gave its connection's key), never from what the message says. A peer of
/// the broker's own user (the ipc socket) has none and is not asked: nothing changes for it.
extension Motherboard {
    /// Puts `policy` in force: decisions are asked again from the next message on; boards
    /// registered by a principal that may no longer register them are dropped, and monitors
    /// that may no longer watch are detached.
    package func install(policy: AccessPolicy, source: String?, text: String? = nil) {
        self.policy = policy
        policySource = source
        policyText = text
        decisions.removeAll()
        for board in registry.boards.values {
            guard let principal = board.principal else { continue }
            let decision = registrationDecision(principal, name: board.name).decision
            if !decision.allowed { drop(board.name, reason: "the access policy no longer lets '\(principal)' register it (\(decision.rule))") }
        }
        for (peer, monitor) in monitors.monitors {
            guard let principal = monitor.principal, !policy.allowsSome(principal: principal, .monitor) else { continue }
            monitors.remove(peer)
            logger.notice("monitor detached: the access policy no longer lets its principal watch", metadata: ["principal": "\(principal)"])
        }
    }

    /// The policy's answer, cached until the policy changes, per principal (as dbus-broker keeps
    /// a policy snapshot per peer): a principal that asks about many targets empties only its own
    /// cache at ``PolicyDecisions/maximumPerPrincipal``, and costs itself a rule walk per new one.
    func decide(_ question: PolicyQuestion) -> AccessPolicy.Decision {
        decisions.decide(question) {
            policy.decide(principal: question.principal, question.operation, target: question.target, command: question.command)
        }
    }

    /// The policy's refusal of `envelope`, if its sender's principal is remote and may not send it.
    /// Registrations are decided with their id (``registrationDecision(_:name:)``), store changes
    /// and heartbeats by the broker's own checks.
    func authorize(_ envelope: Envelope, principal: String?, sender: LiveBoard?) -> BusError? {
        guard let principal else { return nil }
        if let revoked = revocation(of: principal) { return revoked }
        let header = envelope.header
        let scope = scope(of: envelope, sender: sender)
        func named(_ name: String) -> String { ScopedName(scope: scope, name: name).description }
        let operation: AccessPolicy.Operation
        var target = named(header.target)
        var command: String?
        switch header.kind {
        case .command: (operation, command) = (.call, header.typeName)
        case .activate: operation = .activate
        case .output:
            // A registered board emits as itself (the broker ignores the source it writes), by its
            // registration.
            if sender != nil { return nil }
            (operation, target) = (.emit, named(header.source))
        case .action: (operation, target) = (.action, named(header.typeName))
        case .dispatch: operation = .dispatch
        case .store:
            switch header.typeName {
            case StoreOperation.state, StoreOperation.get, StoreOperation.list: operation = .state
            case StoreOperation.subscribe, StoreOperation.renew, StoreOperation.unsubscribe: operation = .watch
            case StoreOperation.activateQuery, StoreOperation.releaseQuery, StoreOperation.query: operation = .query
            // The owner's own changes (checked against its registration) and the broker's word.
            case StoreOperation.change, StoreOperation.holderGone: return nil
            // An operation this broker does not know may change the store: it takes what a dispatch does.
            default: operation = .dispatch
            }
        case .control:
            switch header.typeName {
            // Says only that the broker answers.
            case ControlOperation.ping: return nil
            // A board's word about what it was handed, as its reply is.
            case ControlOperation.deliveryTaken where sender != nil, ControlOperation.inputRefused where sender != nil: return nil
            // A child motherboard's link asks for the chain above: any principal that may serve.
            case ControlOperation.linkChain:
                return policy.allowsSome(principal: principal, .serve) ? nil : denial(principal, .serve, target: "*", .byDefault)
            // Attaching: what it then sees is decided per message (``monitorSees(_:scope:boards:)``).
            case ControlOperation.monitor:
                return policy.allowsSome(principal: principal, .monitor) ? nil : denial(principal, .monitor, target: "*", .byDefault)
            default: (operation, target) = (.control, header.typeName)
            }
        case .register, .unregister, .heartbeat, .complete, .reply, .error, .flowEvent:
            return nil
        }
        let question = PolicyQuestion(principal: principal, operation: operation, target: target, command: command)
        let decision = decide(question)
        guard decision.allowed else { return denial(principal, question.operation, target: question.target, decision, command: question.command) }
        if header.kind == .control { audit?(principal, "\(principal) control \(header.typeName) (\(decision.rule))") }
        return nil
    }

    /// Whether a remote principal may register `name`, and as which operation: a manifest board's
    /// id only with `serve` (a child motherboard serving its scope), any other id with `register`
    /// or `serve`.
    func registrationDecision(_ principal: String, name: ScopedName) -> (operation: AccessPolicy.Operation, decision: AccessPolicy.Decision) {
        let target = name.description
        let serve = decide(PolicyQuestion(principal: principal, operation: .serve, target: target, command: nil))
        if manifest.board(named: name.name, scope: name.scope) != nil || serve.allowed { return (.serve, serve) }
        return (.register, decide(PolicyQuestion(principal: principal, operation: .register, target: target, command: nil)))
    }

    /// Whether `principal`'s name was removed from the allow-list (and not listed again).
    package func isRevoked(_ principal: String) -> Bool {
        !revokedPrincipals.isEmpty && revokedPrincipals.contains(principal)
    }

    /// The refusal of every message of a principal whose key was removed from the allow-list: its
    /// connections are closed when the removal is read, but a message read after that (one
    /// already queued, or one of a connection whose key was not known yet) must not pass.
    func revocation(of principal: String) -> BusError? {
        guard isRevoked(principal) else { return nil }
        return BusError(.unauthorized, "the key '\(principal)' was removed from the allow-list")
    }

    /// The refusal of a registration by a remote principal, if the policy refuses it.
    func registrationForbidden(_ principal: String?, name: ScopedName) -> BusError? {
        guard let principal else { return nil }
        let (operation, decision) = registrationDecision(principal, name: name)
        return decision.allowed ? nil : denial(principal, operation, target: name.description, decision)
    }

    /// Whether a monitor of `principal` sees a message of `scope` between `source` and `target`
    /// (either board), and its payload.
    func monitorSees(_ principal: String, scope: Scope, boards: (String, String)) -> (sees: Bool, payload: Bool) {
        let names = [boards.0, boards.1].map { ScopedName(scope: scope, name: $0).description }
        let sees = names.contains { decide(PolicyQuestion(principal: principal, operation: .monitor, target: $0, command: nil)).allowed }
        guard sees else { return (false, false) }
        return (true, names.contains { decide(PolicyQuestion(principal: principal, operation: .monitorPayloads, target: $0, command: nil)).allowed })
    }

    /// `forbidden`, counted and logged (at most once a second, with how many since).
    func denial(
        _ principal: String, _ operation: AccessPolicy.Operation, target: String, _ decision: AccessPolicy.Decision, command: String? = nil
    ) -> BusError {
        counters.denied += 1
        metrics.countDenied(principal: principal, operation: operation.rawValue)
        let what = "\(operation.rawValue) \(target.escapedForDisplay())\(command.map { " \($0.escapedForDisplay())" } ?? "")"
        if let count = deniedLog.note() {
            logger.notice(
                "denied by the access policy",
                metadata: ["principal": "\(principal)", "operation": "\(what)", "rule": "\(decision.rule)", "deniedSinceLastLine": "\(count)"])
        }
        return BusError(.forbidden, "'\(principal)' may not \(what): denied by \(decision.rule)")
    }

    /// `policy.check`: the policy's answer for a principal, an operation and a target.
    func answerPolicyCheck(_ envelope: Envelope, from peer: PeerID) throws {
        let request = try PayloadCodec.decode(PolicyCheck.self, from: envelope.payload)
        guard let operation = AccessPolicy.Operation(rawValue: request.operation) else {
            throw BusError(
                .badArgument,
                "unknown operation '\(request.operation.escapedForDisplay())' (one of: \(AccessPolicy.Operation.allCases.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        let decision = policy.decide(principal: request.principal, operation, target: request.target, command: request.command)
        reply(to: envelope, from: peer, with: PolicyAnswer(allowed: decision.allowed, rule: decision.rule, source: policySource))
    }

    /// `policy.show`: the policy in force, as its file says it, and where it was read.
    func answerPolicyShow(_ envelope: Envelope, from peer: PeerID) {
        reply(to: envelope, from: peer, with: PolicyText(source: policySource, text: policyText ?? ""))
    }
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
