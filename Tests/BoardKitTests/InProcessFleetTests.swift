import BoardKit
import BoardKitTesting
import Flux
import FluxBus
import Foundation
import MotherboardCore
import Synchronization
import Testing

/// The in-process test kit, used as a board author would: boards defined here, run in this
/// process against the broker's own routing logic, in milliseconds.
@Suite("In-process fleet", .timeLimit(.minutes(1)))
struct InProcessFleetTests {
    struct Greet: BoardCommand, Hashable {
        typealias Reply = Greeting
        var name: String
    }

    struct Greeting: BusPayload, Hashable {
        var message: String
    }

    /// A command whose handler never answers by itself.
    struct Wait: BoardCommand, Hashable {
        typealias Reply = Empty
    }

    struct LoggedIn: BusPayload, Hashable {
        var user: String
    }

    struct Announcement: BoardAction, Hashable {
        static let actionName = "app.announce"
        var text: String
    }

    /// What a board saw, for the test to look at.
    final class Seen: Sendable {
        private let items = Mutex<[String]>([])
        func add(_ item: String) { items.withLock { $0.append(item) } }
        var all: [String] { items.withLock { $0 } }
    }

    func greeter(_ seen: Seen) -> Board {
        var board = Board(id: "demo.greeter", environment: [:])
        board.onCommand(Greet.self) { greet, _ in Greeting(message: "Hello, \(greet.name)!") }
        board.onActivate(LoggedIn.self) { login, _ in seen.add("welcome \(login.user)") }
        board.onAction(Announcement.self) { announcement, _ in seen.add("announced \(announcement.text)") }
        return board
    }

    @Test func aCommandAFlowAndAnActionGoThroughTheBrokersLogic() async throws {
        let seen = Seen()
        let manifest = FleetManifest(flows: ["auth.login ->> demo.greeter"])
        try await InProcessFleet.with(manifest: manifest) { fleet in
            try await fleet.start(greeter(seen))
            let greeting = try await fleet.client.interact(with: "demo.greeter", Greet(name: "Ann"))
            #expect(greeting == Greeting(message: "Hello, Ann!"))

            // An output of auth.login runs the manifest's flow to the greeter.
            var login = Board(id: "auth.login", environment: [:])
            login.onCommand(named: "login") { message, context in
                let user = try PayloadCodec.decode(LoggedIn.self, from: message.payload)
                Task { try await context.sendToMotherboard(user) }
                return Data("{}".utf8)
            }
            try await fleet.start(login)
            _ = try await fleet.client.call("auth.login", command: "login", payload: PayloadCodec.encode(LoggedIn(user: "ann")))
            #expect(await eventually { seen.all.contains("welcome ann") })

            // An acknowledged action counts the subscribers that handled it.
            #expect(try await fleet.client.send(action: Announcement(text: "hi")) == 1)
            #expect(seen.all.contains("announced hi"))

            // The broker's errors are the real ones.
            let unknown = await #expect(throws: BusError.self) { try await fleet.client.interact(with: "demo.nobody", Greet(name: "x")) }
            #expect(unknown?.code == .noSuchBoard)
        }
    }

    @Test func aBoardThatIsKilledFailsItsCallersWithATypedError() async throws {
        try await InProcessFleet.with { fleet in
            var stuck = Board(id: "demo.stuck", environment: [:])
            stuck.onCommand(Wait.self) { _, _ in
                try await Task.sleep(for: .seconds(60))
                return Empty()
            }
            try await fleet.start(stuck)
            let call = Task { try await fleet.client.interact(with: "demo.stuck", Wait(), timeout: .seconds(20)) }
            _ = await eventually { (try? await fleet.client.status("demo.stuck").commandsHandled) == 1 }
            await fleet.kill("demo.stuck")
            // The next heartbeat to it finds its connection gone, drops it and fails the call.
            let error = await #expect(throws: BusError.self) { try await call.value }
            #expect(error?.code == .outcomeUnknown)
        }
    }

    @Test func deadlinesPassOnTheFleetsClockWithoutWaiting() async throws {
        let clock = ManualClock()
        // Boards heartbeat on the same clock; jumping 10 minutes at once would otherwise (rightly)
        // make the broker drop the board as silent before the request's deadline.
        let settings = MotherboardSettings(livenessTimeout: .seconds(3600))
        try await InProcessFleet.with(settings: settings, clock: clock.busClock) { fleet in
            var slow = Board(id: "demo.slow", environment: [:])
            slow.onCommand(Wait.self) { _, _ in
                try await Task.sleep(for: .seconds(3600))
                return Empty()
            }
            try await fleet.start(slow)
            let started = ContinuousClock.now
            let call = Task { try await fleet.client.interact(with: "demo.slow", Wait(), timeout: .seconds(600)) }
            _ = await eventually { (try? await fleet.client.status("demo.slow").commandsHandled) == 1 }
            clock.advance(by: .seconds(601))
            fleet.tick()
            let error = await #expect(throws: BusError.self) { try await call.value }
            #expect(error?.code == .timeout)
            #expect(started.duration(to: .now) < .seconds(60), "a 10-minute deadline passed on the test's clock, not the wall's")
        }
    }

    /// A Flux store hosted by a board and reached over the in-memory bus: dispatch with an id
    /// is applied once, and a watcher sees the change.
    @Test func aStoreIsDispatchedToOnceAndWatched() async throws {
        struct Add: Flux.Action, Codable { var item: String }
        final class Items: StatefulStore<[String]>, @unchecked Sendable {
            override func onDispatch(_ action: any Flux.Action) {
                if let add = action as? Add { state.append(add.item) }
            }
        }
        try await InProcessFleet.with { fleet in
            let host = try StoreHost(name: "items", store: Items(initialState: [], dispatcher: Dispatcher()))
            host.action(Add.self, named: "add")
            var owner = Board(id: "demo.items", environment: [:])
            owner.host(host)
            try await fleet.start(owner)

            var updates = fleet.client.watch("items").makeAsyncIterator()
            #expect(try await updates.next()?.isSnapshot == true)
            for _ in 0..<2 {
                _ = try await fleet.client.dispatch(store: "items", action: "add", payload: PayloadCodec.encode(Add(item: "a")), dispatchID: "once")
            }
            let change = try #require(try await updates.next())
            #expect(!change.isSnapshot && change.sequence == 1)
            let snapshot = try PayloadCodec.decode(StoreSnapshot<[String]>.self, from: try await fleet.client.storeState("items"))
            #expect(snapshot.state == ["a"] && snapshot.sequence == 1)
        }
    }

    /// An at-least-once board's handler knows which delivery it runs for, and can say it has
    /// taken it; its answer still reaches the sender.
    @Test func anAtLeastOnceHandlerSeesItsDeliveryAndTakesIt() async throws {
        let manifest = FleetManifest(boards: [.init(id: "pay", executable: "Pay", start: .always, delivery: .atLeastOnce, maxDeliveries: 3)])
        let seen = Seen()
        try await InProcessFleet.with(manifest: manifest) { fleet in
            var pay = Board(id: "pay", environment: [:])
            pay.onActivate(LoggedIn.self) { login, context in
                let delivery = try #require(context.delivery)
                try await context.takeDelivery()
                seen.add("\(login.user) \(delivery.count) \(delivery.id > 1 << 62)")
            }
            try await fleet.start(pay)
            try await fleet.client.activate("pay", typeName: LoggedIn.busTypeName, payload: PayloadCodec.encode(LoggedIn(user: "ann")))
            #expect(seen.all == ["ann 1 true"])
            // Outside an at-least-once activation there is nothing to take.
            var plain = Board(id: "plain", environment: [:])
            plain.onActivate(LoggedIn.self) { _, context in
                seen.add(context.delivery == nil ? "no delivery" : "a delivery")
                do { try await context.takeDelivery() } catch { seen.add("\((error as? BusError)?.code.name ?? "?")") }
            }
            try await fleet.start(plain)
            try await fleet.client.activate("plain", typeName: LoggedIn.busTypeName, payload: PayloadCodec.encode(LoggedIn(user: "bo")))
            #expect(seen.all.suffix(2) == ["no delivery", "badArgument"])
        }
    }

    struct Order: BusPayload, Hashable {
        var id: String
        var cents: Int
    }

    struct Cancellation: BusPayload, Hashable {
        var id: String
    }

    struct Charge: BoardCommand, Hashable {
        typealias Reply = Receipt
        var cents: Int
    }

    struct Receipt: BusPayload, Hashable {
        var reference: String
    }

    /// A board takes two input types, each with its own typed handler, and refuses a third
    /// naming both; inside one it asks another board a typed question and gets a typed answer
    /// (the round trip between boards, no untyped switch on a type name).
    @Test func aBoardTakesSeveralInputTypesAndAsksAnotherBoardATypedQuestion() async throws {
        let seen = Seen()
        try await InProcessFleet.with { fleet in
            var payment = Board(id: "shop.payment", environment: [:])
            payment.onCommand(Charge.self) { charge, _ in Receipt(reference: "R-\(charge.cents)") }
            try await fleet.start(payment)

            var orders = Board(id: "shop.orders", environment: [:])
            orders.onActivate(Order.self) { order, context in
                let receipt = try await context.interact(with: "shop.payment", Charge(cents: order.cents))
                seen.add("\(order.id) paid \(receipt.reference)")
            }
            orders.onActivate(Cancellation.self) { cancellation, _ in seen.add("\(cancellation.id) cancelled") }
            try await fleet.start(orders)

            try await fleet.client.activate(
                "shop.orders", typeName: Order.busTypeName, payload: PayloadCodec.encode(Order(id: "A-1", cents: 1200)))
            try await fleet.client.activate(
                "shop.orders", typeName: Cancellation.busTypeName, payload: PayloadCodec.encode(Cancellation(id: "A-1")))
            #expect(seen.all == ["A-1 paid R-1200", "A-1 cancelled"])

            let refused = await #expect(throws: BusError.self) {
                try await fleet.client.activate("shop.orders", typeName: LoggedIn.busTypeName, payload: PayloadCodec.encode(LoggedIn(user: "x")))
            }
            #expect(refused?.code == .typeMismatch)
            #expect(
                refused?.message.contains("expects input \(Order.busTypeName) or \(Cancellation.busTypeName)") == true, "\(refused?.message ?? "")")

            let info = try await fleet.client.status("shop.orders")
            #expect(info.inputType == Order.busTypeName)
            #expect(info.inputTypes == [Order.busTypeName, Cancellation.busTypeName])
        }
    }

    /// A task board too busy for a flow's input (nobody waits for it) reports the refusal: the
    /// broker counts it and `status` shows it, instead of it being lost unseen.
    @Test func aFlowInputABusyTaskBoardRefusesIsCountedAndShown() async throws {
        let release = AsyncStream<Void>.makeStream()
        let seen = Seen()
        try await InProcessFleet.with(manifest: FleetManifest(flows: ["shop.source ->> shop.task"])) { fleet in
            let task = BlockTaskBoard.make(id: "shop.task", mode: .only, environment: [:]) { (order: Order, _: BoardContext) -> Receipt in
                seen.add("started \(order.id)")
                for await _ in release.stream { break }
                return Receipt(reference: order.id)
            }
            try await fleet.start(task)
            let first = try PayloadCodec.encode(Order(id: "A-1", cents: 1))
            #expect(try await fleet.client.emit(from: "shop.source", typeName: Order.busTypeName, payload: first).delivered == 1)
            #expect(await eventually { seen.all == ["started A-1"] })
            let second = try PayloadCodec.encode(Order(id: "A-2", cents: 2))
            _ = try await fleet.client.emit(from: "shop.source", typeName: Order.busTypeName, payload: second)
            var info = try await fleet.client.status("shop.task")
            #expect(
                await eventually {
                    info = (try? await fleet.client.status("shop.task")) ?? info
                    return info.refusedInputs == 1
                })
            #expect(info.lastRefusedInput?.contains("busy") == true, "\(info.lastRefusedInput ?? "nil")")
            release.continuation.finish()
        }
    }
}
