import BoardKit
import BoardKitTesting
import Foundation
import MotherboardCore
import Synchronization
import Testing

/// Task boards that emit more than one output type: each outcome takes its own flows.
@Suite("Task boards with several outputs", .timeLimit(.minutes(1)))
struct TaskOutputsTests {
    struct Pay: BusPayload, Hashable {
        var order: String
        var cents: Int
    }

    struct Paid: BusPayload, Hashable {
        var order: String
    }

    struct Declined: BusPayload, Hashable {
        var order: String
        var reason: String
    }

    /// Not declared by the payment board.
    struct Refund: BusPayload, Hashable {
        var order: String
    }

    final class Seen: Sendable {
        private let items = Mutex<[String]>([])
        func add(_ item: String) { items.withLock { $0.append(item) } }
        var all: [String] { items.withLock { $0 } }
    }

    /// A board that records what reaches it, under its own name.
    func recorder<Input: BusPayload>(_ id: BoardID, _: Input.Type, _ seen: Seen) -> Board {
        var board = Board(id: id, environment: [:])
        board.onActivate(Input.self) { input, _ in seen.add("\(id) got \(input)") }
        return board
    }

    static let manifest = FleetManifest(
        boards: [FleetManifest.Board(id: "shop.payment", executable: "payment", start: .onDemand)],
        flows: [
            .rule(.init(from: ["shop.orders"], to: "shop.payment")),
            .rule(.init(from: ["shop.payment"], output: Paid.busTypeName, to: "shop.ledger")),
            .rule(.init(from: ["shop.payment"], output: Declined.busTypeName, to: "shop.support")),
        ])

    @Test func aTaskBoardsOutcomesTakeTheirOwnFlowsAndItDeclaresThemAll() async throws {
        let seen = Seen()
        let release = AsyncStream<Void>.makeStream()
        let payment: InProcessFleet.Program = { environment in
            TaskBoard.make(id: "shop.payment", emits: Paid.self, Declined.self, environment: environment) { (pay: Pay, outputs) in
                if pay.order == "A-1" { for await _ in release.stream { break } }
                if pay.cents > 0 {
                    try await outputs.emit(Paid(order: pay.order))
                } else {
                    try await outputs.emit(Declined(order: pay.order, reason: "no amount"))
                }
            }
        }
        try await InProcessFleet.with(manifest: Self.manifest, programs: ["shop.payment": payment]) { fleet in
            try await fleet.start(recorder("shop.ledger", Paid.self, seen))
            try await fleet.start(recorder("shop.support", Declined.self, seen))
            _ = try await fleet.client.emit(from: "shop.orders", typeName: Pay.busTypeName, payload: PayloadCodec.encode(Pay(order: "A-1", cents: 5)))
            // Once it registered, introspection shows both of its outputs.
            let both = [Paid.busTypeName, Declined.busTypeName]
            #expect(await eventually { (try? await fleet.client.introspect("shop.payment").outputTypes) == both })
            release.continuation.finish()
            #expect(await eventually { seen.all == ["shop.ledger got \(Paid(order: "A-1"))"] })
            // The task board completed and ended; the next input starts a new one.
            #expect(await eventually { !fleet.isRunning("shop.payment") })
            _ = try await fleet.client.emit(from: "shop.orders", typeName: Pay.busTypeName, payload: PayloadCodec.encode(Pay(order: "A-2", cents: 0)))
            #expect(await eventually { seen.all.count == 2 })
            #expect(seen.all.last == "shop.support got \(Declined(order: "A-2", reason: "no amount"))")
        }
    }

    @Test func anOutputTheBoardDidNotDeclareIsRefusedAndNotEmitted() async throws {
        let seen = Seen()
        let payment: InProcessFleet.Program = { environment in
            BlockTaskBoard.make(id: "shop.payment", mode: .queue, emits: Paid.self, Declined.self, environment: environment) {
                (pay: Pay, outputs) in
                do {
                    try await outputs.emit(Refund(order: pay.order))
                } catch let error as BusError {
                    seen.add("\(error.code): \(error.message)")
                }
            }
        }
        let manifest = FleetManifest(
            boards: Self.manifest.boards,
            flows: Self.manifest.flows + [.rule(.init(from: ["shop.payment"], output: Refund.busTypeName, to: "shop.ledger"))])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": payment]) { fleet in
            try await fleet.start(recorder("shop.ledger", Refund.self, seen))
            _ = try await fleet.client.emit(from: "shop.orders", typeName: Pay.busTypeName, payload: PayloadCodec.encode(Pay(order: "A-1", cents: 5)))
            #expect(await eventually { !seen.all.isEmpty })
            #expect(seen.all == ["badArgument: 'Refund' is not an output of board 'shop.payment' (it declares Declined, Paid)"])
        }
    }
}
