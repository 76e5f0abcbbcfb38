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

    /// What the broker decided for one request of a remote principal: the operation it asked the
    /// policy (a registration of a manifest id is asked as `serve`), and the answer; or that the
    /// principal's key was removed from the allow-list.
    struct Judgement {
        var operation: AccessPolicy.Operation
        var target: String
        var command: String?
        var decision: AccessPolicy.Decision
        var revoked = false
    }

    /// The one decision about a remote principal asking `operation` on `target` (`scope/name`, or
    /// a control operation's name), which the broker acts on and `policy.check` answers with:
    /// a removed key is refused whatever the policy says; a registration is asked as `serve` for
    /// a manifest id (`isManifestBoard`) and as `serve`, else `register`, for any other; asking
    /// above a link (`control link.chain`) needs some `serve`, attaching a monitor
    /// (`control monitor`) some `monitor` (what it then sees is decided per message); a `ping`
    /// is always answered.
    func judge(
        _ principal: String, _ operation: AccessPolicy.Operation, target: String, command: String? = nil, isManifestBoard: Bool = false
    ) -> Judgement {
        var judgement = Judgement(operation: operation, target: target, command: command, decision: .byDefault)
        if isRevoked(principal) {
            judgement.revoked = true
            judgement.decision = AccessPolicy.Decision(allowed: false, rule: "the key '\(principal)' was removed from the allow-list")
            return judgement
        }
        switch (operation, target) {
        case (.register, _), (.serve, _):
            let serve = decide(principal, .serve, target: target)
            if isManifestBoard || serve.allowed {
                (judgement.operation, judgement.decision) = (.serve, serve)
            } else {
                (judgement.operation, judgement.decision) = (.register, decide(principal, .register, target: target))
            }
        case (.control, ControlOperation.ping):
            judgement.decision = AccessPolicy.Decision(allowed: true, rule: "a ping is always answered")
        case (.control, ControlOperation.linkChain):
            (judgement.operation, judgement.target) = (.serve, "*")
            judgement.decision =
                policy.allowsSome(principal: principal, .serve) ? AccessPolicy.Decision(allowed: true, rule: "some serve") : .byDefault
        case (.control, ControlOperation.monitor):
            (judgement.operation, judgement.target) = (.monitor, "*")
            judgement.decision =
                policy.allowsSome(principal: principal, .monitor) ? AccessPolicy.Decision(allowed: true, rule: "some monitor") : .byDefault
        default:
            judgement.decision = decide(PolicyQuestion(principal: principal, operation: operation, target: target, command: command))
        }
        return judgement
    }

    /// What a message with `header` asks of the policy when a remote principal sends it, acting
    /// in `scope` (`fromBoard`: its sender is a registered board): the kind of delivery it is,
    /// and the operation, target and command asked (nil when it asks nothing: registrations are
    /// judged with their id by ``registrationForbidden(_:name:kind:isManifestBoard:)``, answers,
    /// heartbeats and store changes by the broker's own checks).
    static func question(of header: EnvelopeHeader, scope: Scope, fromBoard: Bool) -> (
        kind: DeliveryKind, asked: (operation: AccessPolicy.Operation, target: String, command: String?)?
    ) {
        func named(_ name: String) -> String { ScopedName(scope: scope, name: name).description }
        switch header.kind {
        case .command: return (.command, (.call, named(header.target), header.typeName))
        case .activate: return (.activation, (.activate, named(header.target), nil))
        // A registered board emits as itself (the broker ignores the source it writes), by its
        // registration.
        case .output: return (.output, fromBoard ? nil : (.emit, named(header.source), nil))
        case .action: return (.action, (.action, named(header.typeName), nil))
        case .dispatch: return (.dispatch, (.dispatch, named(header.target), nil))
        case .store:
            let store = named(header.target)
            switch header.typeName {
            case StoreOperation.state, StoreOperation.get, StoreOperation.list: return (.storeRead, (.state, store, nil))
            case StoreOperation.subscribe, StoreOperation.renew, StoreOperation.unsubscribe: return (.storeWatch, (.watch, store, nil))
            case StoreOperation.activateQuery, StoreOperation.releaseQuery, StoreOperation.query: return (.storeQuery, (.query, store, nil))
            // The owner's own changes (checked against its registration) and the broker's word.
            case StoreOperation.change, StoreOperation.holderGone: return (.storeChange, nil)
            // An operation this broker does not know may change the store: it takes what a dispatch does.
            default: return (.dispatch, (.dispatch, store, nil))
            }
        case .control:
            switch header.typeName {
            // A board's word about what it was handed, as its reply is.
            case ControlOperation.deliveryTaken where fromBoard, ControlOperation.inputRefused where fromBoard: return (.deliveryReport, nil)
            case ControlOperation.ping: return (.ping, nil)
            case ControlOperation.linkChain: return (.linkChain, (.control, header.typeName, nil))
            case ControlOperation.monitor: return (.monitorAttach, (.control, header.typeName, nil))
            default: return (.control, (.control, header.typeName, nil))
            }
        case .register: return (.registration, nil)
        case .unregister: return (.unregister, nil)
        case .heartbeat: return (.heartbeat, nil)
        case .complete: return (.complete, nil)
        case .reply, .error: return (.answer, nil)
        case .flowEvent: return (.flowEvent, nil)
        }
    }

    /// The policy's refusal of a message with `header` from remote `principal`, acting in `scope`;
    /// `fromBoard`: its sender is a registered board. Allowed control operations are audited.
    func authorize(_ header: EnvelopeHeader, principal: String, scope: Scope, fromBoard: Bool) -> BusError? {
        guard let question = Self.question(of: header, scope: scope, fromBoard: fromBoard).asked else { return revocation(of: principal) }
        let judgement = judge(principal, question.operation, target: question.target, command: question.command)
        if let refusal = refusal(principal, judgement) { return refusal }
        if header.kind == .control, judgement.operation == .control {
            audit?(principal, "\(principal) control \(header.typeName) (\(judgement.decision.rule))")
        }
        return nil
    }

    /// ``judge(_:_:target:command:isManifestBoard:)`` for a delivery of `kind`, asked as its
    /// operation (one the policy is not asked about is allowed).
    func judge(_ principal: String, delivery kind: DeliveryKind, target: String, isManifestBoard: Bool = false) -> Judgement {
        guard let operation = kind.operation else {
            return Judgement(operation: .control, target: target, command: nil, decision: AccessPolicy.Decision(allowed: true, rule: "not asked"))
        }
        return judge(principal, operation, target: target, isManifestBoard: isManifestBoard)
    }

    /// The answer the broker gives for `judgement`: nil when allowed, `unauthorized` for a
    /// removed key, else `forbidden` (counted and logged).
    func refusal(_ principal: String, _ judgement: Judgement) -> BusError? {
        if judgement.revoked { return revocation(of: principal) }
        guard !judgement.decision.allowed else { return nil }
        return denial(principal, judgement.operation, target: judgement.target, judgement.decision, command: judgement.command)
    }

    /// Whether a remote principal may register `name`, and as which operation: a manifest board's
    /// id only with `serve` (a child motherboard serving its scope), any other id with `register`
    /// or `serve`.
    func registrationDecision(_ principal: String, name: ScopedName, isManifestBoard: Bool) -> (
        operation: AccessPolicy.Operation, decision: AccessPolicy.Decision
    ) {
        let judgement = judge(principal, delivery: .registration, target: name.description, isManifestBoard: isManifestBoard)
        return (judgement.operation, judgement.decision)
    }

    /// The refusal of a registration by a remote principal (of a board id, or of a store name it
    /// lists: `kind`), if the policy refuses it.
    func registrationForbidden(_ principal: String, name: ScopedName, kind: DeliveryKind = .registration, isManifestBoard: Bool) -> BusError? {
        refusal(principal, judge(principal, delivery: kind, target: name.description, isManifestBoard: isManifestBoard))
    }

    /// The refusal of a start on demand of `name` by remote `principal`, if the policy refuses it.
    func startForbidden(_ principal: String, name: ScopedName) -> BusError? {
        refusal(principal, judge(principal, delivery: .start, target: name.description))
    }

    /// Whether a monitor of `principal` sees a message of `scope` between `source` and `target`
    /// (either board), and its payload.
    func monitorSees(_ principal: String, scope: Scope, boards: (String, String)) -> (sees: Bool, payload: Bool) {
        let names = [boards.0, boards.1].map { ScopedName(scope: scope, name: $0).description }
        guard names.contains(where: { judge(principal, delivery: .monitorCopy, target: $0).decision.allowed }) else { return (false, false) }
        return (true, names.contains { judge(principal, delivery: .monitorPayload, target: $0).decision.allowed })
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

    /// `policy.check`: what the broker would decide for a principal, an operation and a target,
    /// by the same ``judge(_:_:target:command:isManifestBoard:)`` (`isManifestBoard` says whether
    /// the manifest names a target).
    func check(_ request: PolicyCheck, isManifestBoard: (ScopedName) -> Bool) throws -> PolicyAnswer {
        guard let operation = AccessPolicy.Operation(rawValue: request.operation) else {
            throw BusError(
                .badArgument,
                "unknown operation '\(request.operation.escapedForDisplay())' (one of: \(AccessPolicy.Operation.allCases.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        let named = ScopedName(policyTarget: request.target)
        let judgement = judge(
            request.principal, operation, target: request.target, command: request.command,
            isManifestBoard: [.register, .serve].contains(operation) && isManifestBoard(named))
        var rule = judgement.decision.rule
        if judgement.operation != operation { rule += " (asked as \(judgement.operation.rawValue): the manifest declares \(request.target))" }
        return PolicyAnswer(allowed: judgement.decision.allowed, rule: rule, source: source)
    }

    /// `policy.show`: the policy in force, as its file says it, and where it was read.
    var shown: PolicyText { PolicyText(source: source, text: text ?? "") }
}
