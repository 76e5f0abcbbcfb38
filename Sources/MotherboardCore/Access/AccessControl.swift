import BusCore
import Foundation
import Logging

/// Who may do what (PROTOCOL §5.10): the access policy in force, its cached decisions, the
/// principals whose keys were removed from the allow-list, the admission rules, the denied log
/// and the audit of allowed control operations. Every decision about a remote principal is made
/// here; the broker asks, and carries out what follows (dropping a board, detaching a monitor).
///
/// The principal comes with each message from the transport (the name the ZAP handler gave its
/// connection's key), never from what the message says. A peer of the broker's own user (the
/// ipc socket) has none and is not asked.
package final class AccessControl {
    package private(set) var policy = AccessPolicy()
    private(set) var source: String?
    private(set) var text: String?
    private var decisions = PolicyDecisions()
    /// Names removed from the allow-list (``allowListChanged(removed:listed:)``) and not listed again: a message of one of
    /// them is refused whatever the policy says.
    package private(set) var revoked: Set<String> = []
    /// Rules every message must pass at the admission gate, after the broker's own.
    @exclusivity(unchecked) package var admissionRules: [AdmissionRule] = []
    /// Where each control operation a remote principal was allowed is written (the audit log).
    package var audit: ((_ principal: String, _ line: String) -> Void)?
    /// Refusals so far (`forbidden`).
    private(set) var denied = 0
    private var deniedLog = LogThrottle(every: .seconds(1))
    private let metrics: BrokerMetrics
    private let logger: Logger

    init(metrics: BrokerMetrics, logger: Logger) {
        self.metrics = metrics
        self.logger = logger
    }

    /// Puts `policy` in force: every decision is asked again from the next message on.
    func install(_ policy: AccessPolicy, source: String?, text: String?) {
        self.policy = policy
        self.source = source
        self.text = text
        decisions.removeAll()
    }

    /// The policy's answer, cached until the policy changes, per principal (as dbus-broker keeps
    /// a policy snapshot per peer): a principal that asks about many targets empties only its own
    /// cache at ``PolicyDecisions/maximumPerPrincipal``, and costs itself a rule walk per new one.
    func decide(_ question: PolicyQuestion) -> AccessPolicy.Decision {
        decisions.decide(question) {
            policy.decide(principal: question.principal, question.operation, target: question.target, command: question.command)
        }
    }

    func decide(_ principal: String, _ operation: AccessPolicy.Operation, target: String) -> AccessPolicy.Decision {
        decide(PolicyQuestion(principal: principal, operation: operation, target: target, command: nil))
    }

    /// The policy's refusal of a message with `header` from remote `principal`, acting in `scope`;
    /// `fromBoard`: its sender is a registered board. Registrations are decided with their id
    /// (``registrationDecision(_:name:isManifestBoard:)``), store changes and heartbeats by the
    /// broker's own checks.
    func authorize(_ header: EnvelopeHeader, principal: String, scope: Scope, fromBoard: Bool) -> BusError? {
        if let revoked = revocation(of: principal) { return revoked }
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
            if fromBoard { return nil }
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
            case ControlOperation.deliveryTaken where fromBoard, ControlOperation.inputRefused where fromBoard: return nil
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
    func registrationDecision(_ principal: String, name: ScopedName, isManifestBoard: Bool) -> (
        operation: AccessPolicy.Operation, decision: AccessPolicy.Decision
    ) {
        let serve = decide(principal, .serve, target: name.description)
        if isManifestBoard || serve.allowed { return (.serve, serve) }
        return (.register, decide(principal, .register, target: name.description))
    }

    /// The refusal of a registration by a remote principal, if the policy refuses it.
    func registrationForbidden(_ principal: String, name: ScopedName, isManifestBoard: Bool) -> BusError? {
        let (operation, decision) = registrationDecision(principal, name: name, isManifestBoard: isManifestBoard)
        return decision.allowed ? nil : denial(principal, operation, target: name.description, decision)
    }

    /// The refusal of a start on demand of `name` by remote `principal`, if the policy refuses it.
    func startForbidden(_ principal: String, name: ScopedName) -> BusError? {
        let decision = decide(principal, .start, target: name.description)
        return decision.allowed ? nil : denial(principal, .start, target: name.description, decision)
    }

    /// Whether a monitor of `principal` sees a message of `scope` between `source` and `target`
    /// (either board), and its payload.
    func monitorSees(_ principal: String, scope: Scope, boards: (String, String)) -> (sees: Bool, payload: Bool) {
        let names = [boards.0, boards.1].map { ScopedName(scope: scope, name: $0).description }
        guard names.contains(where: { decide(principal, .monitor, target: $0).allowed }) else { return (false, false) }
        return (true, names.contains { decide(principal, .monitorPayloads, target: $0).allowed })
    }

    /// Whether a monitor of `principal` may still watch anything.
    func mayMonitor(_ principal: String) -> Bool {
        policy.allowsSome(principal: principal, .monitor)
    }

    // MARK: - The allow-list

    /// Whether `principal`'s name was removed from the allow-list (and not listed again).
    @inline(__always) package func isRevoked(_ principal: String) -> Bool {
        !revoked.isEmpty && revoked.contains(principal)
    }

    package var hasRevoked: Bool { !revoked.isEmpty }

    /// The refusal of every message of a principal whose key was removed from the allow-list: its
    /// connections are closed when the removal is read, but a message read after that (one
    /// already queued, or one of a connection whose key was not known yet) must not pass.
    func revocation(of principal: String) -> BusError? {
        guard isRevoked(principal) else { return nil }
        return BusError(.unauthorized, "the key '\(principal)' was removed from the allow-list")
    }

    /// Names removed from the allow-list, and the names it lists now (a name removed and put back
    /// between two reads is no longer refused).
    func allowListChanged(removed: Set<String>, listed: Set<String>) {
        revoked.formUnion(removed)
        if !revoked.isEmpty { revoked.subtract(listed) }
    }

    // MARK: - Answers

    /// `forbidden`, counted and logged (at most once a second, with how many since).
    func denial(
        _ principal: String, _ operation: AccessPolicy.Operation, target: String, _ decision: AccessPolicy.Decision, command: String? = nil
    ) -> BusError {
        denied += 1
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
    func check(_ request: PolicyCheck) throws -> PolicyAnswer {
        guard let operation = AccessPolicy.Operation(rawValue: request.operation) else {
            throw BusError(
                .badArgument,
                "unknown operation '\(request.operation.escapedForDisplay())' (one of: \(AccessPolicy.Operation.allCases.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        let decision = policy.decide(principal: request.principal, operation, target: request.target, command: request.command)
        return PolicyAnswer(allowed: decision.allowed, rule: decision.rule, source: source)
    }

    /// `policy.show`: the policy in force, as its file says it, and where it was read.
    var shown: PolicyText { PolicyText(source: source, text: text ?? "") }
}
