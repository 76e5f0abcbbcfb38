import BusCore
import Foundation
import Logging
import MotherboardDaemon
import Testing

@testable import MotherboardCore

/// Every delivery is judged: PROTOCOL 5.10's table "Each delivery" lists exactly the kinds the
/// broker knows (`DeliveryKind`), with the operation each asks; every message a remote principal
/// can send is one of them, and asks the policy exactly the table's operation (or nothing,
/// where the table says so).
@Suite("Each delivery is judged")
struct DeliveryKindTests {
    /// The rows of the table, as (kind, operation or "—").
    static func tableRows() throws -> [(kind: String, asked: String)] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/PROTOCOL.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let start = try #require(text.range(of: "**Each delivery.**"))
        let lines = text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false)
        let table = lines.drop { !$0.hasPrefix("| delivery |") }.dropFirst(2).prefix { $0.hasPrefix("|") }
        return table.map { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            return (cells[1].trimmingCharacters(in: ["`"]), cells[2].trimmingCharacters(in: ["`"]))
        }
    }

    @Test func theProtocolsTableListsEveryKindWithTheOperationItAsks() throws {
        let rows = try Self.tableRows()
        #expect(rows.map(\.kind) == DeliveryKind.allCases.map(\.rawValue))
        for row in rows {
            let kind = try #require(DeliveryKind(rawValue: row.kind))
            #expect(row.asked == (kind.operation?.rawValue ?? "—"), "\(row.kind)")
        }
    }

    /// Every message kind, with every store and control operation name the broker knows and one
    /// it does not, is a delivery of some kind; it asks the policy when and only when its kind
    /// does, and the decision is made for the kind's operation.
    @Test func everyMessageARemotePrincipalSendsIsAKindThatAsksItsOperation() throws {
        let access = AccessControl(metrics: BrokerMetrics(series: PrometheusSeries()), logger: Logger(label: "test"))
        let stores = [
            StoreOperation.state, StoreOperation.get, StoreOperation.list, StoreOperation.subscribe, StoreOperation.renew,
            StoreOperation.unsubscribe, StoreOperation.activateQuery, StoreOperation.releaseQuery, StoreOperation.query,
            StoreOperation.change, StoreOperation.holderGone, "no.such.operation",
        ]
        let controls = [
            ControlOperation.list, ControlOperation.status, ControlOperation.registerFlow, ControlOperation.removeFlow, ControlOperation.monitor,
            ControlOperation.ping, ControlOperation.linkChain, ControlOperation.policyCheck, ControlOperation.deliveryTaken,
            ControlOperation.inputRefused, "no.such.operation",
        ]
        var reached = Set<DeliveryKind>()
        for messageKind in MessageKind.allCases {
            let names = messageKind == .store ? stores : messageKind == .control ? controls : ["Some.type"]
            for name in names {
                for fromBoard in [false, true] {
                    let header = EnvelopeHeader(kind: messageKind, source: "far.board", target: "demo.greeter", typeName: name)
                    let question = AccessControl.question(of: header, scope: .root, fromBoard: fromBoard)
                    reached.insert(question.kind)
                    guard let asked = question.asked else {
                        // Not asked here while its kind is: a registered board's own output, and a
                        // registration (judged with its id and stores, ``AccessControl/registrationForbidden``).
                        #expect(
                            question.kind.operation == nil || (question.kind == .output && fromBoard) || question.kind == .registration,
                            "\(messageKind) \(name)")
                        continue
                    }
                    let judged = access.judge("far", asked.operation, target: asked.target, command: asked.command)
                    #expect(judged.operation == question.kind.operation, "\(messageKind) \(name): \(question.kind)")
                    #expect(!judged.decision.allowed, "no policy: a remote principal may do nothing (\(messageKind) \(name))")
                }
            }
        }
        // The kinds no message is: what the broker does later on a principal's behalf, or
        // decides elsewhere; each is named where it is judged.
        let elsewhere: Set<DeliveryKind> = [
            .start, .flowSource, .flowTarget, .storeName, .monitorCopy, .monitorPayload, .ownerAction, .natsHostMessage,
        ]
        #expect(reached.union(elsewhere) == Set(DeliveryKind.allCases))
        #expect(reached.isDisjoint(with: elsewhere))
        for kind in elsewhere where kind.operation != nil {
            #expect(!access.judge("far", delivery: kind, target: "demo.greeter").decision.allowed, "\(kind)")
        }
    }
}
