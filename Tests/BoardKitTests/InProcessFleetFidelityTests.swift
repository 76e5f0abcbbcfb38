import BoardKit
import BoardKitTesting
import Foundation
import MotherboardCore
import Synchronization
import Testing

/// Where the in-process fleet behaves as the real broker and board processes do: one serial
/// executor per board, and manifest boards produced, held for, restarted and redelivered to.
@Suite("In-process fleet: as in production", .timeLimit(.minutes(1)))
struct InProcessFleetFidelityTests {
    struct Order: BusPayload, Hashable {
        var id: String
    }

    struct Charge: BoardCommand, Hashable {
        typealias Reply = Charged
        var id: String
    }

    struct Charged: BusPayload, Hashable {
        var id: String
        var instance: Int
    }

    /// What boards saw, and how many handlers ran at once at most.
    final class Log: Sendable {
        private let state = Mutex<(items: [String], running: Int, mostAtOnce: Int, instances: Int)>(([], 0, 0, 0))
        func add(_ item: String) { state.withLock { $0.items.append(item) } }
        var items: [String] { state.withLock { $0.items } }
        func enter() {
            state.withLock {
                $0.running += 1
                $0.mostAtOnce = max($0.mostAtOnce, $0.running)
            }
        }
        func leave() { state.withLock { $0.running -= 1 } }
        var mostAtOnce: Int { state.withLock { $0.mostAtOnce } }
        /// Counts a board's start (one per process a real broker would start).
        func started() -> Int {
            state.withLock {
                $0.instances += 1
                return $0.instances
            }
        }
    }

    @Test func aBoardsHandlersNeverRunInParallel() async throws {
        let log = Log()
        try await InProcessFleet.with { fleet in
            var board = Board(id: "shop.counter", environment: [:])
            board.onActivate(Order.self) { order, _ in
                // No suspension in here: on one serial executor, the next handler waits for this one.
                log.enter()
                usleep(2_000)
                log.add(order.id)
                log.leave()
            }
            try await fleet.start(board)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<24 {
                    group.addTask {
                        let order = try PayloadCodec.encode(Order(id: "\(index)"))
                        try await fleet.client.activate("shop.counter", typeName: Order.busTypeName, payload: order)
                    }
                }
                try await group.waitForAll()
            }
            #expect(await eventually { log.items.count == 24 })
            #expect(log.mostAtOnce == 1, "handlers of one board ran \(log.mostAtOnce) at once")
        }
    }

    func payment(_ log: Log) -> InProcessFleet.Program {
        { environment in
            var board = Board(id: "shop.payment", environment: environment)
            let instance = log.started()
            board.onActivate(Order.self) { order, context in
                log.add("paid \(order.id) in \(context.scope.name.isEmpty ? "root" : context.scope.name) by \(instance)")
            }
            board.onCommand(Charge.self) { charge, _ in Charged(id: charge.id, instance: instance) }
            return board
        }
    }

    @Test func aFlowToAnOnDemandBoardStartsItAndWaitsUntilItRegisters() async throws {
        let log = Log()
        let manifest = FleetManifest(
            boards: [FleetManifest.Board(id: "shop.payment", executable: "payment", start: .onDemand)], flows: ["shop.orders ->> shop.payment"])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": payment(log)]) { fleet in
            #expect(!fleet.isRunning("shop.payment"))
            let order = try PayloadCodec.encode(Order(id: "A-1"))
            let delivery = try await fleet.client.emit(from: "shop.orders", typeName: Order.busTypeName, payload: order)
            #expect(delivery.delivered == 1)
            #expect(await eventually { log.items == ["paid A-1 in root by 1"] })
            #expect(fleet.isRunning("shop.payment"))
        }
    }

    @Test func aCommandToAStoppedOnDemandBoardStartsItAndIsAnswered() async throws {
        let log = Log()
        let manifest = FleetManifest(boards: [FleetManifest.Board(id: "shop.payment", executable: "payment", start: .onDemand)])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": payment(log)]) { fleet in
            let first = try await fleet.client.interact(with: "shop.payment", Charge(id: "A-1"))
            #expect(first == Charged(id: "A-1", instance: 1))
            // Stopped as SIGTERM would (a clean end, policy `no`): the next command starts it again.
            await fleet.stop("shop.payment")
            let second = try await fleet.client.interact(with: "shop.payment", Charge(id: "A-2"))
            #expect(second == Charged(id: "A-2", instance: 2))
        }
    }

    @Test func alwaysOnBoardsStartWithTheFleetInEveryScopeTheManifestNames() async throws {
        let log = Log()
        let manifest = FleetManifest(
            scopes: [FleetManifest.ScopeEntry(name: "eu")],
            boards: [
                FleetManifest.Board(id: "shop.payment", executable: "payment"),
                FleetManifest.Board(id: "shop.payment", executable: "payment", scope: "eu"),
            ])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": payment(log)]) { fleet in
            #expect(await eventually { fleet.isRunning("shop.payment") && fleet.isRunning("shop.payment", scope: "eu") })
            try await fleet.client.activate("shop.payment", typeName: Order.busTypeName, payload: PayloadCodec.encode(Order(id: "E-1")), scope: "eu")
            #expect(await eventually { log.items.contains { $0.hasPrefix("paid E-1 in eu by ") } })
        }
    }

    /// Issue (#64): a call right after `with` began its body failed about half the time
    /// (`boardNotRunning: board 'jobs.api' is in the manifest but not running`): the broker had
    /// started the always-on board, which had not registered yet. `with` waits until it has; 40
    /// fleets in parallel, each calling its board first thing, are all answered.
    @Test func anAlwaysOnBoardAnswersTheFirstCallOfTheBody() async throws {
        let manifest = FleetManifest(boards: [FleetManifest.Board(id: "shop.payment", executable: "payment")])
        let program: InProcessFleet.Program = { environment in
            var board = Board(id: "shop.payment", environment: environment)
            board.onCommand(Charge.self) { charge, _ in Charged(id: charge.id, instance: 0) }
            return board
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<40 {
                group.addTask {
                    try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": program]) { fleet in
                        let charged = try await fleet.client.interact(with: "shop.payment", Charge(id: "C-\(index)"))
                        #expect(charged.id == "C-\(index)")
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// A board without a program is not started: its input is refused as by a broker that cannot start it.
    @Test func anOnDemandBoardWithoutAProgramIsRefusedNotDroppedSilently() async throws {
        let manifest = FleetManifest(boards: [
            FleetManifest.Board(id: "shop.payment", executable: "payment", start: .onDemand),
            FleetManifest.Board(id: "shop.other", executable: "other", start: .onDemand),
        ])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": payment(Log())]) { fleet in
            let error = await #expect(throws: BusError.self) { try await fleet.client.interact(with: "shop.other", Charge(id: "A-1")) }
            #expect(error?.code == .boardNotRunning)
            #expect(error?.message.contains("no program") == true, "\(error?.message ?? "")")
        }
    }

    /// Killed holding an at-least-once activation: the broker restarts the board (its policy is
    /// `on-failure`) and delivers the activation again, the second time with delivery count 2.
    @Test func aKilledAtLeastOnceBoardIsRestartedAndGetsItsActivationAgain() async throws {
        let log = Log()
        let program: InProcessFleet.Program = { environment in
            var board = Board(id: "shop.payment", environment: environment)
            let instance = log.started()
            board.onActivate(Order.self) { order, context in
                log.add("\(order.id) delivery \(context.delivery?.count ?? 0) instance \(instance)")
                if instance == 1 { try await Task.sleep(for: .seconds(60)) }
            }
            return board
        }
        let manifest = FleetManifest(
            boards: [
                FleetManifest.Board(id: "shop.payment", executable: "payment", start: .onDemand, restart: .onFailure, delivery: .atLeastOnce)
            ], flows: ["shop.orders ->> shop.payment"])
        try await InProcessFleet.with(manifest: manifest, programs: ["shop.payment": program]) { fleet in
            _ = try await fleet.client.emit(from: "shop.orders", typeName: Order.busTypeName, payload: PayloadCodec.encode(Order(id: "A-1")))
            #expect(await eventually { log.items == ["A-1 delivery 1 instance 1"] })
            await fleet.kill("shop.payment")
            #expect(await eventually { log.items == ["A-1 delivery 1 instance 1", "A-1 delivery 2 instance 2"] }, "\(log.items)")
        }
    }
}
