import BusCore
import Foundation
import Logging
import MotherboardDaemon
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// Who may do what, decided on its own: no broker, no transport. Each test is a principal trying
/// to get past a decision, next to what it may do.
@Suite("Access control")
struct AccessControlTests {
    static let policy = try! AccessPolicy.parse(
        Data(
            """
            {
              "rules": [
                { "name": "greet", "allow": [ "call" ], "principals": [ "edge-b" ], "targets": [ "demo.greeter" ], "commands": [ "greet" ] },
                { "name": "lists", "allow": [ "control" ], "principals": [ "edge-b" ], "targets": [ "list" ] },
                { "name": "sensors", "allow": [ "register" ], "principals": [ "edge-b" ], "targets": [ "edge/*" ] },
                { "name": "payments", "allow": [ "start" ], "principals": [ "ops" ], "targets": [ "pay" ] }
              ]
            }
            """.utf8), source: "test")

    func access(audit: (@Sendable (String, String) -> Void)? = nil) -> AccessControl {
        let access = AccessControl(metrics: BrokerMetrics(series: PrometheusSeries()), logger: Logger(label: "test"))
        access.install(Self.policy, source: "policy.json", text: nil)
        access.audit = audit
        return access
    }

    func header(_ kind: MessageKind, target: String = "", typeName: String = "", source: String = "") -> EnvelopeHeader {
        EnvelopeHeader(kind: kind, source: source, target: target, typeName: typeName)
    }

    @Test func aCommandIsAskedWithItsNameAndAnotherCommandOfTheSameBoardIsRefused() {
        let access = access()
        #expect(
            access.authorize(header(.command, target: "demo.greeter", typeName: "greet"), principal: "edge-b", scope: .root, fromBoard: false) == nil)
        let refused = access.authorize(
            header(.command, target: "demo.greeter", typeName: "wipe"), principal: "edge-b", scope: .root, fromBoard: false)
        #expect(refused?.code == .forbidden)
        #expect(refused?.message.contains("'edge-b' may not call demo.greeter wipe") == true)
        // The same target named in another scope is another board.
        #expect(
            access.authorize(header(.command, target: "demo.greeter", typeName: "greet"), principal: "edge-b", scope: "edge", fromBoard: false)?.code
                == .forbidden)
        #expect(access.denied == 2)
    }

    /// A client that writes a board's id as the source of an output emits as that board: asked as
    /// `emit`; a registered board emits as itself, by its registration.
    @Test func anOutputFromAClientIsAskedAsTheBoardItNamesAndOneFromABoardIsNot() {
        let access = access()
        let output = header(.output, typeName: "done", source: "auth.login")
        #expect(access.authorize(output, principal: "edge-b", scope: .root, fromBoard: false)?.code == .forbidden)
        #expect(access.authorize(output, principal: "edge-b", scope: .root, fromBoard: true) == nil)
    }

    @Test func aRevokedNameIsRefusedWhateverThePolicySaysUntilItIsListedAgain() {
        let access = access()
        let greet = header(.command, target: "demo.greeter", typeName: "greet")
        access.allowListChanged(removed: ["edge-b"], listed: ["ops"])
        #expect(access.authorize(greet, principal: "edge-b", scope: .root, fromBoard: false)?.code == .unauthorized)
        // Even what the policy never asks about (a ping).
        #expect(access.authorize(header(.control, typeName: ControlOperation.ping), principal: "edge-b", scope: .root, fromBoard: false) != nil)
        #expect(access.isRevoked("edge-b") && !access.isRevoked("ops"))
        access.allowListChanged(removed: [], listed: ["edge-b", "ops"])
        #expect(!access.hasRevoked)
        #expect(access.authorize(greet, principal: "edge-b", scope: .root, fromBoard: false) == nil)
    }

    @Test func anAllowedControlOperationIsAuditedAndARefusedOneIsNot() {
        let lines = Lines()
        let access = access(audit: { _, line in lines.append(line) })
        #expect(access.authorize(header(.control, typeName: ControlOperation.list), principal: "edge-b", scope: .root, fromBoard: false) == nil)
        #expect(access.authorize(header(.control, typeName: ControlOperation.restart), principal: "edge-b", scope: .root, fromBoard: false) != nil)
        #expect(lines.all == ["edge-b control list (rule 'lists')"])
    }

    /// A manifest board's id is served by a child motherboard, never registered by a principal
    /// that may only register: `register` on `edge/*` does not reach a manifest board there.
    @Test func aManifestBoardsIDTakesServeNotRegister() {
        let access = access()
        let sensor = ScopedName(scope: "edge", name: "sensor")
        #expect(access.registrationForbidden("edge-b", name: sensor, isManifestBoard: false) == nil)
        #expect(access.registrationForbidden("edge-b", name: sensor, isManifestBoard: true)?.code == .forbidden)
        #expect(access.registrationDecision("edge-b", name: sensor, isManifestBoard: true).operation == .serve)
    }

    @Test func aStartOnDemandIsItsOwnPermission() {
        let access = access()
        #expect(access.startForbidden("ops", name: ScopedName(scope: .root, name: "pay")) == nil)
        #expect(access.startForbidden("edge-b", name: ScopedName(scope: .root, name: "pay"))?.code == .forbidden)
    }

    @Test func aNewPolicyIsAskedAgainNotAnsweredFromTheCache() throws {
        let access = access()
        let greet = header(.command, target: "demo.greeter", typeName: "greet")
        #expect(access.authorize(greet, principal: "edge-b", scope: .root, fromBoard: false) == nil)
        access.install(AccessPolicy(), source: nil, text: nil)
        #expect(access.authorize(greet, principal: "edge-b", scope: .root, fromBoard: false)?.code == .forbidden)
        #expect(
            try access.check(
                PolicyCheck(principal: "edge-b", operation: "call", target: "demo.greeter", command: "greet"), isManifestBoard: { _ in false }
            ).allowed == false)
        #expect(throws: BusError.self) {
            try access.check(PolicyCheck(principal: "edge-b", operation: "fly", target: "x", command: nil), isManifestBoard: { _ in false })
        }
    }

    final class Lines: @unchecked Sendable {
        private(set) var all: [String] = []
        func append(_ line: String) { all.append(line) }
    }
}

@Suite("Bounded set")
struct BoundedSetTests {
    @Test func theOldestIsForgottenPastTheCapacityAndAMemberIsNotInsertedTwice() {
        var set = BoundedSet<Int>(capacity: 3)
        let firsts = [1, 2, 3].map { set.insert($0) }
        #expect(firsts == [true, true, true])
        let again = set.insert(2)
        #expect(!again)
        let fourth = set.insert(4)
        #expect(fourth)
        #expect(!set.contains(1) && set.contains(2) && set.contains(4))
    }
}
