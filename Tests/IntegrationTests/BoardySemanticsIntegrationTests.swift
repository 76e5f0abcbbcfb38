import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import BoardBusDemoGateIO
import BoardBusDemoPaymentIO
import BoardBusDemoRecorderIO
import BoardBusDemoTasksIO
import Testing

/// A fleet with nested scopes, on-demand task boards and recorders that show what reached them.
let boardyManifest = """
    {
      "scopes": [ { "name": "checkout" }, { "name": "express", "parent": "checkout" } ],
      "boards": [
        { "id": "demo.gate", "executable": "BoardBusDemoGate", "start": "always" },
        { "id": "demo.recorder", "executable": "BoardBusDemoRecorder", "start": "always",
          "arguments": ["--from", "demo.gate,tasks.default,tasks.latest,tasks.only,tasks.queue,tasks.concurrent",
                        "--actions", "checkout.orderPaid,app.announce"] },
        { "id": "tasks.default", "executable": "BoardBusDemoTasks", "arguments": ["--mode", "default"], "start": "on-demand" },
        { "id": "tasks.latest", "executable": "BoardBusDemoTasks", "arguments": ["--mode", "latest"], "start": "on-demand" },
        { "id": "tasks.only", "executable": "BoardBusDemoTasks", "arguments": ["--mode", "only"], "start": "on-demand" },
        { "id": "tasks.queue", "executable": "BoardBusDemoTasks", "arguments": ["--mode", "queue"], "start": "on-demand" },
        { "id": "tasks.concurrent", "executable": "BoardBusDemoTasks", "arguments": ["--mode", "concurrent:2"], "start": "on-demand" },
        { "id": "checkout.payment", "executable": "BoardBusDemoPayment", "scope": "checkout", "start": "on-demand" },
        { "id": "demo.recorder", "executable": "BoardBusDemoRecorder", "scope": "checkout", "start": "always",
          "arguments": ["--from", "checkout.payment", "--completions-of", "checkout.payment", "--actions", "app.announce"] },
        { "id": "demo.recorder", "executable": "BoardBusDemoRecorder", "scope": "express", "start": "always",
          "arguments": ["--actions", "app.announce"] }
      ],
      "flows": [
        { "scope": "checkout", "from": "checkout.payment", "output": "Paid", "to": "demo.recorder" },
        { "scope": "checkout", "from": "checkout.payment", "output": "Refund", "to": "demo.recorder" },
        { "scope": "checkout", "from": "checkout.payment", "on": "complete", "to": "demo.recorder" }
      ]
    }
    """

extension BusClient {
    func recording(scope: Scope = .root) async throws -> RecorderIO.Recording {
        try await interact(with: RecorderIO.id, RecorderIO.Recorded(), scope: scope)
    }
}

@Suite("Boardy semantics between processes", .serialized, .timeLimit(.minutes(3)))
struct BoardySemanticsIntegrationTests {
    @Test func onDemandTaskBoardQueuesInputRefusesBusyAndCompletesOnce() async throws {
        try await TestFleet.with(manifest: boardyManifest) { fleet in
            try await fleet.withClient { client in
                #expect(try await client.status(PaymentIO.id, scope: "checkout").state == .stopped)
                // Not running: the broker starts it and delivers the queued input once it registers.
                try await client.activate(PaymentIO.destination, with: PaymentIO.Pay(orderID: "o1", amount: 5, millis: 400), scope: "checkout")
                let firstPID = try #require(fleet.pid(of: PaymentIO.id, scope: "checkout"))
                // One task at a time.
                let busy = await #expect(throws: BusError.self) {
                    try await client.activate(PaymentIO.destination, with: PaymentIO.Pay(orderID: "o2", amount: 5), scope: "checkout")
                }
                #expect(busy?.code == .busy)

                // Output through the manifest flow, then the recorder's run-time flow, in that
                // order; the Refund-typed flow ignores it; the completion flows fire once each.
                let done = try await eventually {
                    try await client.recording(scope: "checkout").entries.count >= 4
                }
                #expect(done)
                // The completed process exits and leaves the registry.
                let exited = await eventually { kill(firstPID, 0) != 0 }
                #expect(exited)
                #expect(try await client.status(PaymentIO.id, scope: "checkout").state == .stopped)
                // Nothing else comes: everything the broker routed to the recorder before a marker
                // sent now (after the payment board is gone) arrives before the marker.
                try await client.activate(RecorderIO.id, typeName: "Marker", payload: Data("{}".utf8), scope: "checkout")
                let marked = try await eventually { try await client.recording(scope: "checkout").entries.last?.typeName == "Marker" }
                #expect(marked)
                let entries = try await client.recording(scope: "checkout").entries
                #expect(
                    entries.map { "\($0.kind):\($0.typeName)" } == [
                        "activation:Paid", "flow:Paid", "activation:Completion", "completion:Completion", "activation:Marker",
                    ])
                #expect(entries[3].payload == #"{"isDone":true}"#)
                // The action bubbled from checkout to the root scope.
                #expect(try await client.recording().of("action").map(\.typeName) == ["checkout.orderPaid"])

                // Activating the id again starts a fresh instance.
                try await client.activate(PaymentIO.destination, with: PaymentIO.Pay(orderID: "o3", amount: 7, millis: 10), scope: "checkout")
                let again = try await eventually { try await client.recording(scope: "checkout").of("completion").count == 2 }
                #expect(again)
                #expect(
                    try await client.recording(scope: "checkout").of("activation").map(\.typeName) == [
                        "Paid", "Completion", "Marker", "Paid", "Completion",
                    ])
            }
            let flows = try await fleet.busctl("flows")
            #expect(flows.standardOutput.contains("checkout.payment [Refund] ->> demo.recorder"))
        }
    }

    @Test func aWrongInputTypeIsRefusedWithBothTypeNames() async throws {
        try await TestFleet.with(manifest: boardyManifest) { fleet in
            let result = try await fleet.busctl("activate", "checkout.payment", "--scope", "checkout", "--type", "Refund", "{}")
            #expect(result.exitCode != 0)
            #expect(result.standardError.contains("typeMismatch"))
            #expect(result.standardError.contains("expects input Pay, received Refund"))
            let interaction = try await fleet.busctl("call", "demo.recorder", "nothing", "--scope", "checkout")
            #expect(interaction.standardError.hasPrefix("busctl: unknownCommand:"))
        }
    }

    @Test func actionsBubbleThroughTwoScopeLevels() async throws {
        try await TestFleet.with(manifest: boardyManifest) { fleet in
            let result = try await fleet.busctl("action", "app.announce", #"{"text":"hi"}"#, "--scope", "express", "--json")
            #expect(result.exitCode == 0, "\(result.standardError)")
            #expect(try decode(Delivery.self, from: result).delivered == 3)
            try await fleet.withClient { client in
                for scope: Scope in ["express", "checkout", .root] {
                    let heard = try await eventually { try await client.recording(scope: scope).of("action").count == 1 }
                    #expect(heard, "scope '\(scope)'")
                }
                // From the middle scope the inner scope is not reached.
                #expect(try await client.action("app.announce", payload: Data("{}".utf8), scope: "checkout").delivered == 2)
            }
            let tree = try await fleet.busctl("tree")
            #expect(tree.standardOutput.contains("(root)\n"))
            #expect(tree.standardOutput.contains("\n  checkout\n"))
            #expect(tree.standardOutput.contains("\n    express\n"))
        }
    }

    @Test func blockTaskBoardsFollowTheirExecutionMode() async throws {
        try await TestFleet.with(manifest: boardyManifest) { fleet in
            try await fleet.withClient { client in
                func run(_ board: BoardID, _ jobs: [(String, Int)]) async throws {
                    for (tag, millis) in jobs {
                        try await client.activate(BoardDestination<TasksIO.Job>(board), with: TasksIO.Job(tag: tag, millis: millis))
                    }
                }
                func done(by board: String, count: Int) async throws -> [String] {
                    _ = try await eventually(timeout: .seconds(20)) {
                        try await client.recording().of("flow").filter { $0.source == board }.count >= count
                    }
                    return try await client.recording().of("flow").filter { $0.source == board }.map {
                        try PayloadCodec.decode(TasksIO.Done.self, from: Data($0.payload.utf8)).tag
                    }
                }

                try await run("tasks.default", [("slow", 400), ("fast", 1)])
                try await run("tasks.queue", [("a", 300), ("b", 50), ("c", 1)])
                try await run("tasks.latest", [("first", 300), ("second", 300)])
                try await run("tasks.concurrent", [("a", 400), ("b", 400), ("c", 1)])
                try await run("tasks.only", [("first", 300)])
                let refused = await #expect(throws: BusError.self) { try await run("tasks.only", [("second", 1)]) }
                #expect(refused?.code == .busy)

                #expect(try await done(by: "tasks.default", count: 2) == ["fast", "slow"])
                #expect(try await done(by: "tasks.queue", count: 3) == ["a", "b", "c"])
                // "first" would have finished before "second" had it not been cancelled.
                #expect(try await done(by: "tasks.latest", count: 1) == ["second"])
                let concurrent = try await done(by: "tasks.concurrent", count: 3)
                #expect(concurrent.count == 3 && concurrent.first != "c", "\(concurrent)")
                #expect(try await done(by: "tasks.only", count: 1) == ["first"])
            }
            let introspection = try await fleet.busctl("introspect", "tasks.queue", "--json")
            let found = try decode(Introspection.self, from: introspection)
            #expect(found.outputTypes == ["Done"])
            #expect(found.board.inputType == "Job")
            #expect(found.flows.map(\.owner) == ["demo.recorder"])
        }
    }

    @Test func aBarrierHoldsWaitersUntilOvercomeOrCancelled() async throws {
        try await TestFleet.with(manifest: boardyManifest) { fleet in
            try await fleet.withClient { client in
                for holder in ["ann", "bo"] {
                    try await client.activate(GateIO.destination, with: GateIO.Ticket(holder: holder))
                }
                #expect(try await client.interact(with: GateIO.id, BarrierQuery()) == BarrierStatus(open: false, waiting: 2))
                let cancelled = try await client.interact(with: GateIO.id, CancelBarrier())
                #expect(cancelled.cancelled == 2)
                try await client.activate(GateIO.destination, with: GateIO.Ticket(holder: "cy"))
                let released = try await client.interact(with: GateIO.id, Overcome(value: GateIO.Signal(reason: "open")))
                #expect(released.released == 1)
                // Once open, a waiter passes at once.
                try await client.activate(GateIO.destination, with: GateIO.Ticket(holder: "dee"))
                let all = try await eventually {
                    try await client.recording().of("flow").filter { $0.source == "demo.gate" }.count == 4
                }
                #expect(all)
                let outputs = try await client.recording().of("flow").filter { $0.source == "demo.gate" }
                #expect(outputs.map(\.typeName) == ["BarrierCancelled", "BarrierCancelled", "BarrierReleased", "BarrierReleased"])
                let passed = try outputs.suffix(2).map { try PayloadCodec.decode(GateIO.Released.self, from: Data($0.payload.utf8)) }
                #expect(passed.map(\.input.holder) == ["cy", "dee"])
                #expect(passed.allSatisfy { $0.value.reason == "open" })
            }
            let status = try await fleet.busctl("call", "demo.gate", "barrier", "--json")
            #expect(status.standardOutput.contains(#""open":true"#))
        }
    }
}
