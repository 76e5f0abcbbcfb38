import BusCore
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardCore

@Suite("Boardy semantics in the motherboard")
struct BoardySemanticsTests {
    let a = PeerID(Data([0xA]))
    let b = PeerID(Data([0xB]))
    let c = PeerID(Data([0xC]))
    let d = PeerID(Data([0xD]))

    static let scoped = FleetManifest(
        scopes: [.init(name: "checkout"), .init(name: "express", parent: "checkout")],
        boards: [.init(id: "pay", executable: "BoardBusDemoPayment", scope: "checkout", start: .onDemand)])

    @Test func actionsBubbleThroughEveryAncestorScope() throws {
        let harness = try Harness(manifest: Self.scoped)
        harness.register("listener", scope: "", peer: a, actions: ["go"])
        harness.register("listener", scope: "checkout", peer: b, actions: ["go"])
        harness.register("listener", scope: "express", peer: c, actions: ["go"])
        harness.register("sender", scope: "express", peer: d)
        harness.request(EnvelopeHeader(kind: .action, typeName: "go"), payload: Data("{}".utf8), from: d)
        // Inner scope first, then each ancestor.
        #expect(harness.transport.sent.filter { $0.envelope.header.kind == .action }.map(\.peer) == [c, b, a])
        // The sender's acknowledgement waits for the subscribers' (two of three answer).
        #expect(harness.transport.take(for: d).isEmpty)
        let toA = try #require(harness.transport.take(for: a).first)
        #expect(toA.header.scope == "express")
        harness.deliver(toA.reply(), from: a)
        harness.deliver(try #require(harness.transport.take(for: c).first).reply(), from: c)
        #expect(harness.transport.take(for: d).isEmpty)
        harness.deliver(try #require(harness.transport.take(for: b).first).errorReply(BusError(.handlerFailed, "no")), from: b)
        let ack = try #require(harness.transport.take(for: d).first)
        #expect(ack.header.correlationID == 77)
        #expect(try PayloadCodec.decode(Delivery.self, from: ack.payload).delivered == 2)

        // From the middle scope, the inner one is not reached.
        harness.transport.sent.removeAll()
        harness.request(EnvelopeHeader(kind: .action, scope: "checkout", typeName: "go"), from: harness.client)
        #expect(harness.transport.sent.filter { $0.envelope.header.kind == .action }.map(\.peer) == [b, a])
    }

    @Test func idsAreUniquePerScopeAndOutputsStayInTheirScope() throws {
        let manifest = FleetManifest(
            scopes: Self.scoped.scopes, boards: [],
            flows: [.rule(.init(from: ["src"], to: "dst", scope: "checkout")), .chain("src ->> dst")])
        let harness = try Harness(manifest: manifest)
        harness.register("dst", scope: "", peer: a)
        harness.register("dst", scope: "checkout", peer: b)
        harness.register("src", scope: "checkout", peer: c)
        #expect(try harness.list().boards.count == 3)
        harness.request(EnvelopeHeader(kind: .output, typeName: "T"), from: c)
        #expect(harness.transport.take(for: b).map(\.header.kind) == [.activate])
        #expect(harness.transport.take(for: a).isEmpty)
        // nextToBoard resolves in the sender's scope too.
        harness.request(EnvelopeHeader(kind: .activate, target: "dst"), from: c)
        #expect(harness.transport.take(for: b).map(\.header.kind) == [.activate])
        #expect(harness.transport.take(for: a).isEmpty)
    }

    @Test func guaranteedFlowsIgnoreOtherTypesAndFlowsRunInRegistrationOrder() throws {
        let manifest = FleetManifest(flows: [
            .rule(.init(from: ["src", "other"], output: "Paid", to: "first")), .chain("src ->> second"),
        ])
        let harness = try Harness(manifest: manifest)
        harness.register("first", scope: "", peer: a)
        harness.register("second", scope: "", peer: b)
        harness.register("src", scope: "", peer: c)
        harness.register("owner", scope: "", peer: d)
        let runtime = try harness.control(ControlOperation.registerFlow, FlowSpec(sources: ["src"]), from: d, as: FlowInfo.self)
        #expect(runtime.id == 3 && runtime.owner == "owner")

        harness.request(EnvelopeHeader(kind: .output, typeName: "Paid"), from: c)
        #expect(harness.transport.sent.map(\.peer) == [a, b, d, c])
        // The flow id travels in its own header field, and in the correlation id for boards built
        // before that field (no answer is due to a flow event).
        let event = harness.transport.take(for: d).first?.header
        #expect(event?.kind == .flowEvent && event?.flowID == 3 && event?.correlationID == 3 && !(event?.flags.contains(.replyExpected) ?? true))
        harness.transport.sent.removeAll()

        harness.request(EnvelopeHeader(kind: .output, typeName: "Refund"), from: c)
        #expect(harness.transport.sent.map(\.peer) == [b, d, c])
        #expect(harness.motherboard.counters.ignoredByType == 1)

        // Only the owner (or a tool) removes a run-time flow; removed flows stop running.
        #expect(throws: BusError.self) { try harness.control(ControlOperation.removeFlow, FlowRemoval(id: 3), from: a, as: Delivery.self) }
        _ = try harness.control(ControlOperation.removeFlow, FlowRemoval(id: 3), from: d, as: Delivery.self)
        harness.transport.sent.removeAll()
        harness.request(EnvelopeHeader(kind: .output, typeName: "Refund"), from: c)
        #expect(harness.transport.sent.map(\.peer) == [b, c])
        let flows = try harness.control(ControlOperation.flows, from: harness.client, as: FlowList.self)
        #expect(flows.flows.map(\.id) == [1, 2])
        #expect(flows.flows.map(\.runs) == [1, 3])
    }

    @Test func completionFiresItsFlowsOnceAndRetiresTheInstance() throws {
        let manifest = FleetManifest(flows: [.rule(.init(from: ["task"], on: .completion, to: "audit"))])
        let harness = try Harness(manifest: manifest)
        harness.register("audit", scope: "", peer: a)
        harness.register("task", scope: "", peer: b)
        harness.request(EnvelopeHeader(kind: .complete), payload: try PayloadCodec.encode(Completion(isDone: false)), from: b)
        let activation = try #require(harness.transport.take(for: a).first)
        #expect(activation.header.kind == .activate && activation.header.typeName == "Completion")
        #expect(try PayloadCodec.decode(Completion.self, from: activation.payload) == Completion(isDone: false))
        #expect(try PayloadCodec.decode(Delivery.self, from: harness.transport.take(for: b).first!.payload).delivered == 1)

        // The completed instance is refused `ended` (not told to register again) and fires nothing
        // again; its heartbeat is answered `ended` too, its goodbye `Delivery` 0.
        harness.request(EnvelopeHeader(kind: .complete), from: b)
        harness.request(EnvelopeHeader(kind: .output, source: "task", typeName: "X"), from: b)
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "task")), from: b)
        #expect(harness.transport.take(for: b).map { $0.carriedError?.code } == [.ended, .ended, .ended])
        harness.request(EnvelopeHeader(kind: .unregister, source: "task"), from: b)
        #expect(try harness.transport.take(for: b).map { try PayloadCodec.decode(Delivery.self, from: $0.payload).delivered } == [0])
        #expect(harness.transport.take(for: a).isEmpty)
        harness.register("task", scope: "", peer: b)
        #expect(try harness.list().boards.map(\.id) == ["audit"])
    }

    @Test func activatingAManifestBoardStartsItAndDeliversTheQueuedInputs() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.scoped, producer: producer)
        harness.request(
            EnvelopeHeader(kind: .activate, target: "pay", scope: "checkout", typeName: "Pay"), payload: Data("1".utf8), from: harness.client,
            correlation: 1)
        harness.request(
            EnvelopeHeader(kind: .activate, target: "pay", scope: "checkout", typeName: "Pay"), payload: Data("2".utf8), from: harness.client,
            correlation: 2)
        #expect(producer.started.map(\.id) == ["pay"])
        #expect(harness.transport.sent.isEmpty)
        // A command waits with them (as D-Bus starts a service on a call to its name).
        var command = EnvelopeHeader(kind: .command, target: "pay", scope: "checkout", typeName: "x")
        command.timeoutMilliseconds = 5_000
        harness.request(command, payload: Data("3".utf8), from: harness.client, correlation: 3)
        #expect(harness.transport.sent.isEmpty)
        #expect(producer.started.count == 1)

        // The queued inputs reach the board right after its registration is accepted, in order;
        // the command with what is left of its deadline.
        harness.now = harness.now.advanced(by: .seconds(2))
        let delivered = harness.register("pay", scope: "checkout", peer: a, pid: producer.nextPID).filter { $0.header.kind != .reply }
        #expect(delivered.map(\.header.kind) == [.activate, .activate, .command])
        #expect(delivered.map(\.payload) == [Data("1".utf8), Data("2".utf8), Data("3".utf8)])
        #expect(delivered.last?.header.timeoutMilliseconds == 3_000)
        for input in delivered { harness.deliver(input.reply(), from: a) }
        #expect(harness.transport.take(for: harness.client).map(\.header.correlationID) == [1, 2, 3])
        #expect(harness.motherboard.registry[ScopedName(scope: "checkout", name: "pay")]?.commandsHandled == 1)

        // A live board is reused, not started again.
        harness.request(EnvelopeHeader(kind: .activate, target: "pay", scope: "checkout"), from: harness.client)
        #expect(producer.started.count == 1)
        #expect(harness.transport.take(for: a).count == 1)

        // An id no manifest entry can produce.
        harness.request(EnvelopeHeader(kind: .activate, target: "nobody", scope: "checkout"), from: harness.client)
        #expect(harness.transport.take(for: harness.client).last?.carriedError?.code == .noSuchBoard)
    }

    /// A command held for a board that starts after the command's deadline is answered `timeout`
    /// and never delivered.
    @Test func aCommandHeldPastItsDeadlineTimesOutAndIsNotDelivered() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.scoped, producer: producer)
        var command = EnvelopeHeader(kind: .command, target: "pay", scope: "checkout", typeName: "x")
        command.timeoutMilliseconds = 1_000
        harness.request(command, from: harness.client, correlation: 8)
        harness.now = harness.now.advanced(by: .milliseconds(1_500))
        let delivered = harness.register("pay", scope: "checkout", peer: a, pid: producer.nextPID).filter { $0.header.kind == .command }
        #expect(delivered.isEmpty)
        let answer = harness.transport.take(for: harness.client).last
        #expect(answer?.carriedError?.code == .timeout && answer?.header.correlationID == 8)
    }

    @Test func theStartQueueIsBoundedAndFailsWhenTheBoardNeverComes() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: Self.scoped, producer: producer)
        let limit = harness.motherboard.settings.activationQueueLimit
        for index in 0...limit {
            harness.request(EnvelopeHeader(kind: .activate, target: "pay", scope: "checkout"), from: harness.client, correlation: UInt64(index + 1))
        }
        #expect(harness.transport.take(for: harness.client).map { $0.carriedError?.code } == [.busy])
        harness.motherboard.processExited(pid: producer.nextPID, status: "exit 1", clean: false, now: harness.now)
        let failures = harness.transport.take(for: harness.client)
        #expect(failures.count == limit)
        #expect(failures.allSatisfy { $0.carriedError?.code == .boardNotRunning })

        harness.request(EnvelopeHeader(kind: .activate, target: "pay", scope: "checkout"), from: harness.client)
        harness.now = harness.now.advanced(by: .seconds(16))
        harness.motherboard.tick(now: harness.now)
        #expect(harness.transport.take(for: harness.client).first?.carriedError?.code == .boardNotRunning)
        #expect(producer.started.count == 2)
    }

    @Test func runTimeFlowsBelongToRegisteredBoardsAndLeaveWithThem() throws {
        let harness = try Harness()
        #expect(throws: BusError.self) {
            try harness.control(ControlOperation.registerFlow, FlowSpec(sources: ["x"]), from: harness.client, as: FlowInfo.self)
        }
        harness.register("owner", scope: "", peer: a)
        _ = try harness.control(ControlOperation.registerFlow, FlowSpec(sources: ["x"], target: "y"), from: a, as: FlowInfo.self)
        #expect(try harness.control(ControlOperation.flows, from: harness.client, as: FlowList.self).flows.count == 1)
        harness.request(EnvelopeHeader(kind: .unregister), from: a)
        #expect(try harness.control(ControlOperation.flows, from: harness.client, as: FlowList.self).flows.isEmpty)
    }

    @Test func manifestsAreChecked() {
        #expect(throws: BusError.self) { try FleetManifest(scopes: [.init(name: "a", parent: "nope")]).validate() }
        #expect(throws: BusError.self) { try FleetManifest(scopes: [.init(name: "a", parent: "b"), .init(name: "b", parent: "a")]).validate() }
        #expect(throws: BusError.self) { try FleetManifest(boards: [.init(id: "x", executable: "X", scope: "missing")]).validate() }
        #expect(throws: Never.self) {
            try FleetManifest(
                scopes: [.init(name: "s")],
                boards: [.init(id: "x", executable: "X"), .init(id: "x", executable: "X", scope: "s")]
            ).validate()
        }
        let json = #"{"flows": ["a ->> b", {"from": ["a", "c"], "output": "T", "to": "d"}, {"from": "a", "on": "complete", "to": "e"}]}"#
        let decoded = try? JSONDecoder().decode(FleetManifest.self, from: Data(json.utf8))
        let specs = try? decoded?.flowSpecs()
        #expect(
            specs?.map(\.spec) == [
                FlowSpec(sources: ["a"], target: "b"), FlowSpec(sources: ["a", "c"], outputType: "T", target: "d"),
                FlowSpec(sources: ["a"], trigger: .completion, target: "e"),
            ])
    }
}
