import BoardBusTestSupport
import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// `busctl policy check` answers what the broker does: over random rule sets and requests, the
/// `policy.check` answer for a principal, an operation and a target is allowed exactly when the
/// broker, sent that request by that principal, does not refuse it with `forbidden` or
/// `unauthorized`. A manifest id, a removed key and the control operations the broker answers
/// by its own rule are among the requests.
@Suite("policy check against the broker")
struct PolicyCheckDifferentialTests {
    static let principals = ["far", "near", "gone"]
    static let operations: [AccessPolicy.Operation] = [
        .call, .activate, .emit, .action, .dispatch, .state, .watch, .query, .control, .register, .serve,
    ]
    /// Targets a request names, by operation family: boards (two of the manifest's), actions,
    /// stores, control operations.
    static let boards = ["demo.greeter", "edge/edge.sensor", "far.thing", "edge/far.other"]
    static let actions = ["app.announce", "edge/app.announce"]
    static let stores = ["orders", "edge/readings"]
    static let controls = [
        ControlOperation.list, ControlOperation.removeFlow, ControlOperation.linkChain, ControlOperation.monitor, ControlOperation.ping,
    ]
    static let patterns = ["*", "demo.*", "far.*", "edge/*", "demo.greeter", "orders", "app.*", "list", "flow.*", "link.chain", "monitor"]

    static func targets(of operation: AccessPolicy.Operation) -> [String] {
        switch operation {
        case .action: actions
        case .dispatch, .state, .watch, .query: stores
        case .control: controls
        default: boards
        }
    }

    /// A random policy as its file says it: allow and deny rules over the universe above (never
    /// `start`, which the broker asks besides `call` and `activate` of a board not running; the
    /// manifest's boards are always-on, so it is never asked).
    static func randomPolicy(_ random: inout SeededRandom) -> String {
        var rules: [String] = []
        for index in 0..<Int.random(in: 2...6, using: &random) {
            let operations = (0..<Int.random(in: 1...3, using: &random)).map { _ in Self.operations.randomElement(using: &random)!.rawValue }
            let principals = Bool.random(using: &random) ? ["*"] : [Self.principals.randomElement(using: &random)!]
            let targets =
                Bool.random(using: &random)
                ? ["*"] : (0..<Int.random(in: 1...2, using: &random)).map { _ in Self.patterns.randomElement(using: &random)! }
            let verb = Int.random(in: 0..<4, using: &random) == 0 ? "deny" : "allow"
            var rule =
                #"{"name": "r\#(index)", "\#(verb)": \#(json(operations)), "principals": \#(json(principals)), "targets": \#(json(targets))"#
            if Bool.random(using: &random), operations.allSatisfy({ $0 == "call" }) { rule += #", "commands": ["gre*"]"# }
            rules.append(rule + "}")
        }
        return #"{"rules": [\#(rules.joined(separator: ", "))]}"#
    }

    static func json(_ words: [String]) -> String { "[" + words.map { "\"\($0)\"" }.joined(separator: ", ") + "]" }

    /// The message a remote principal sends for `operation` on `target`.
    static func request(_ operation: AccessPolicy.Operation, _ target: String, command: String) throws -> (EnvelopeHeader, Data) {
        let name = ScopedName(policyTarget: target)
        switch operation {
        case .call: return (EnvelopeHeader(kind: .command, target: name.name, scope: name.scope, typeName: command), Data("{}".utf8))
        case .activate: return (EnvelopeHeader(kind: .activate, target: name.name, scope: name.scope), Data("{}".utf8))
        case .emit: return (EnvelopeHeader(kind: .output, source: name.name, scope: name.scope, typeName: "Done"), Data("{}".utf8))
        case .action: return (EnvelopeHeader(kind: .action, scope: name.scope, typeName: name.name), Data("{}".utf8))
        case .dispatch: return (EnvelopeHeader(kind: .dispatch, target: name.name, scope: name.scope, typeName: "cancel"), Data("{}".utf8))
        case .state: return (EnvelopeHeader(kind: .store, target: name.name, scope: name.scope, typeName: StoreOperation.state), Data())
        case .watch: return (EnvelopeHeader(kind: .store, target: name.name, scope: name.scope, typeName: StoreOperation.subscribe), Data())
        case .query: return (EnvelopeHeader(kind: .store, target: name.name, scope: name.scope, typeName: StoreOperation.query), Data("{}".utf8))
        case .control: return (EnvelopeHeader(kind: .control, typeName: target), Data("{}".utf8))
        case .register, .serve:
            let registration = Registration(id: try BoardID(validating: name.name), pid: 42, scope: name.scope, commands: ["greet"], secret: "s")
            return (EnvelopeHeader(kind: .register, source: name.name, scope: name.scope), try PayloadCodec.encode(registration))
        case .start, .monitor, .monitorPayloads: preconditionFailure("not a request of this test")
        }
    }

    @Test func policyCheckSaysAllowedExactlyWhenTheBrokerLetsTheRequestThrough() throws {
        var random = SeededRandom(seed: 62)
        let manifest = FleetManifest(
            scopes: [.init(name: "edge")],
            boards: [.init(id: "demo.greeter", executable: "Greeter"), .init(id: "edge.sensor", executable: "Sensor", scope: "edge")])
        var (checked, allowed, peerByte) = (0, 0, UInt8(0))
        for _ in 0..<120 {
            let text = Self.randomPolicy(&random)
            let harness = try Harness(manifest: manifest)
            harness.motherboard.install(policy: try AccessPolicy.parse(Data(text.utf8), source: "test"), source: "test")
            harness.motherboard.allowListChanged(removed: ["gone"], listed: ["far", "near"])
            for _ in 0..<25 {
                let principal = Self.principals.randomElement(using: &random)!
                let operation = Self.operations.randomElement(using: &random)!
                let target = Self.targets(of: operation).randomElement(using: &random)!
                let command = ["greet", "ping"].randomElement(using: &random)!
                let answer = try harness.control(
                    ControlOperation.policyCheck,
                    PolicyCheck(principal: principal, operation: operation.rawValue, target: target, command: operation == .call ? command : nil),
                    from: harness.client, as: PolicyAnswer.self)
                var (header, payload) = try Self.request(operation, target, command: command)
                header.flags.insert(.replyExpected)
                header.correlationID = 5
                peerByte &+= 1
                let peer = PeerID(Data([0xA0, peerByte]))
                harness.motherboard.receive(
                    .success(Envelope(header: header, payload: payload)), from: peer, now: harness.now,
                    remote: RemotePeer(address: "10.0.0.9", keyName: principal), principal: principal)
                let refusal = harness.transport.take(for: peer).first { $0.header.kind == .error }?.carriedError?.code
                let refused = refusal == .forbidden || refusal == .unauthorized
                #expect(
                    answer.allowed == !refused,
                    "\(principal) \(operation.rawValue) \(target): policy check says \(answer.allowed ? "allowed" : "denied") (\(answer.rule)), the broker answered \(refusal?.name ?? "no refusal") under \(text)"
                )
                checked += 1
                if answer.allowed { allowed += 1 }
                harness.transport.sent.removeAll()
            }
        }
        // Both answers were met often enough to mean something.
        #expect(allowed > checked / 10 && allowed < checked * 9 / 10, "\(allowed) of \(checked) allowed")
    }

    /// The case that was found: `register` of a manifest id is asked as `serve`, and `policy check`
    /// says so.
    @Test func registeringAManifestIDIsCheckedAsServe() throws {
        let manifest = FleetManifest(boards: [.init(id: "demo.tasks", executable: "Tasks")])
        let harness = try Harness(manifest: manifest)
        let text = #"{"rules": [{"name": "far boards", "allow": ["register"], "principals": ["far"], "targets": ["*"]}]}"#
        harness.motherboard.install(policy: try AccessPolicy.parse(Data(text.utf8), source: "test"), source: "test")
        let answer = try harness.control(
            ControlOperation.policyCheck, PolicyCheck(principal: "far", operation: "register", target: "demo.tasks"), from: harness.client,
            as: PolicyAnswer.self)
        #expect(!answer.allowed)
        #expect(answer.rule.contains("asked as serve: the manifest declares demo.tasks"))
        let other = try harness.control(
            ControlOperation.policyCheck, PolicyCheck(principal: "far", operation: "register", target: "far.thing"), from: harness.client,
            as: PolicyAnswer.self)
        #expect(other.allowed && other.rule == "rule 'far boards'")
    }
}
