import BoardBusDemoOrdersIO
import BoardBusDemoRecorderIO
import BoardKit
import BoardKitTesting
import BusCore
import Flux
import FluxBus
import Foundation
import Synchronization
import Testing

/// The example `shop.orders` board, a real process owning the durable keyed store `orders`.
@Suite("Keyed stores end to end", .serialized, .timeLimit(.minutes(2)))
struct KeyedStoreIntegrationTests {
    static let manifest = """
        {"boards": [
          {"id": "shop.orders", "executable": "BoardBusDemoOrders", "start": "always", "restart": "on-failure"},
          {"id": "demo.recorder", "executable": "BoardBusDemoRecorder", "start": "always", "arguments": ["--from", "shop.orders"]}
        ]}
        """

    func place(_ client: BusClient, _ id: String, cents: Int = 100) async throws -> DispatchAck {
        try await client.dispatch(
            store: OrdersIO.store, action: OrdersIO.Place.name, payload: PayloadCodec.encode(OrdersIO.Place(id: id, item: "tea", cents: cents)),
            dispatchID: "place-\(id)", retries: true)
    }

    @Test func everyAcknowledgedOrderOutlivesKill9AndIsAnnouncedOnce() async throws {
        try await TestFleet.with(manifest: Self.manifest) { fleet in
            try await fleet.withClient { client in
                _ = await eventually { fleet.pid(of: OrdersIO.id) != nil && fleet.pid(of: RecorderIO.id) != nil }
                // The recorder's run-time flow from shop.orders is registered once it is live.
                _ = try await eventually { try await client.flows().flows.contains { $0.description.contains("shop.orders") } }
                for index in 1...20 { #expect(try await place(client, "A-\(index)").sequence == UInt64(index)) }
                let pid = try #require(fleet.pid(of: OrdersIO.id))
                #expect(kill(pid, SIGKILL) == 0)
                #expect(await eventually { kill(pid, 0) != 0 })

                // Restarted (on-failure): the records are the rows as they were, nothing replayed.
                #expect(try await place(client, "A-21").sequence == 21)
                #expect(fleet.pid(of: OrdersIO.id) != pid)
                #expect(try await place(client, "A-5").applied == false)
                var keys: [String] = []
                var after: String?
                repeat {
                    let page = try await client.storeRecords(OrdersIO.Order.self, store: OrdersIO.store, after: after, limit: 7)
                    keys += page.records.map(\.key)
                    after = page.next
                } while after != nil
                #expect(Set(keys) == Set((1...21).map { "A-\($0)" }) && keys.count == 21)

                // A paid order cannot be cancelled; the refusal is the same on a retry.
                let pay = try PayloadCodec.encode(OrdersIO.Pay(id: "A-1"))
                _ = try await client.dispatch(store: OrdersIO.store, action: OrdersIO.Pay.name, payload: pay)
                let cancel = try PayloadCodec.encode(OrdersIO.Cancel(id: "A-1"))
                for _ in 0..<2 {
                    let error = await #expect(throws: BusError.self) {
                        try await client.dispatch(store: OrdersIO.store, action: OrdersIO.Cancel.name, payload: cancel, dispatchID: "cancel-1")
                    }
                    #expect(error?.code == .rejected)
                }
                // busctl watches the records under a prefix, or at one key: a snapshot line first.
                let watched = try await fleet.busctl("state", OrdersIO.store, "--watch", "--prefix", "A-2", "--count", "1")
                #expect(watched.exitCode == 0, "\(watched.standardError)")
                let line = try JSONSerialization.jsonObject(with: Data(watched.standardOutput.utf8)) as? [String: Any]
                let watchedKeys = (line?["changes"] as? [[String: Any]])?.compactMap { $0["key"] as? String }
                #expect(line?["snapshot"] as? Bool == true && watchedKeys == ["A-2", "A-20", "A-21"], "\(watched.standardOutput)")
                let one = try await fleet.busctl("state", OrdersIO.store, "--watch", "--key", "A-2", "--count", "1", "--json")
                #expect(one.standardOutput.contains(#""key":"A-2""#) && !one.standardOutput.contains("A-20"), "\(one.standardOutput)")
                // introspect shows the record's shape, the actions and the query with its shapes.
                let shapes = try await fleet.busctl("introspect", OrdersIO.id.rawValue)
                #expect(shapes.standardOutput.contains("record  {cents: integer, item: string, status: string, …}"), "\(shapes.standardOutput)")
                #expect(shapes.standardOutput.contains("query total  {prefix?: string, status?: string, …} → {cents: integer, count: integer}"))
                let mixed = try await fleet.busctl("state", OrdersIO.store, "--watch", "--limit", "3")
                #expect(mixed.exitCode == 2 || mixed.exitCode == 1, "\(mixed.standardError)")

                let total = try await client.query(
                    store: OrdersIO.store, OrdersIO.TotalRequest.name, OrdersIO.TotalRequest(status: .paid), answer: OrdersIO.Total.self)
                #expect(total == OrdersIO.Total(count: 1, cents: 100))

                // Each placed order was announced (an output, through the recorder's flow) once.
                var announced: [String] = []
                #expect(
                    await eventually {
                        let recording = try? await client.interact(with: RecorderIO.id, RecorderIO.Recorded())
                        announced = (recording?.entries ?? []).filter { $0.typeName == OrdersIO.Placed.busTypeName }.compactMap {
                            try? PayloadCodec.decode(OrdersIO.Placed.self, from: Data($0.payload.utf8)).id
                        }
                        return announced.count >= 21
                    })
                #expect(announced.sorted() == (1...21).map { "A-\($0)" }.sorted())
            }
        }
    }
}

/// A model of what was acknowledged, checked against the real `shop.orders` in two scopes while
/// owners and the broker are killed: random places, payments and cancellations (each refused or
/// applied as the model says), fresh and repeated dispatch ids, pages, a query, and a watcher per
/// scope that must end holding what the model holds.
@Suite(
    "Keyed stores against a model", .serialized,
    .timeLimit(.minutes(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_STEPS"] == nil ? 4 : 60)))
struct KeyedStoreModelTests {
    static let manifest = """
        {
          "scopes": [{ "name": "eu" }],
          "boards": [
            { "id": "shop.orders", "executable": "BoardBusDemoOrders", "start": "always", "restart": "always",
              "restartLimit": { "count": 100, "windowSeconds": 1 } },
            { "id": "shop.orders", "executable": "BoardBusDemoOrders", "scope": "eu", "start": "always", "restart": "always",
              "restartLimit": { "count": 100, "windowSeconds": 1 } }
          ]
        }
        """

    enum Step {
        case place(String, cents: Int)
        case pay(String)
        case cancel(String)

        var action: String {
            switch self {
            case .place: OrdersIO.Place.name
            case .pay: OrdersIO.Pay.name
            case .cancel: OrdersIO.Cancel.name
            }
        }

        func payload() throws -> Data {
            switch self {
            case .place(let id, let cents): try PayloadCodec.encode(OrdersIO.Place(id: id, item: "x", cents: cents))
            case .pay(let id): try PayloadCodec.encode(OrdersIO.Pay(id: id))
            case .cancel(let id): try PayloadCodec.encode(OrdersIO.Cancel(id: id))
            }
        }

        /// The model's decision: the orders after it, or nil when the store must refuse it.
        func applied(to orders: [String: OrdersIO.Order]) -> [String: OrdersIO.Order]? {
            var orders = orders
            switch self {
            case .place(let id, let cents):
                guard cents > 0, orders[id] == nil else { return nil }
                orders[id] = OrdersIO.Order(item: "x", cents: cents)
            case .pay(let id):
                guard orders[id]?.status == .placed else { return nil }
                orders[id]?.status = .paid
            case .cancel(let id):
                guard let order = orders[id], order.status != .paid else { return nil }
                orders[id]?.status = .cancelled
            }
            return orders
        }
    }

    enum Outcome: Equatable {
        case applied, refused
    }

    @Test func randomActionsWithKill9OfOwnersAndBrokerMatchAModelOfWhatWasAcknowledged() async throws {
        let steps = Int(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_STEPS"] ?? "") ?? 2_000
        var random = SeededRandom(seed: UInt64(ProcessInfo.processInfo.environment["BOARDBUS_MODEL_SEED"] ?? "") ?? 39)
        try await TestFleet.with(manifest: Self.manifest) { fleet in
            let scopes: [Scope] = [.root, "eu"]
            var model: [Scope: [String: OrdersIO.Order]] = [.root: [:], "eu": [:]]
            var outcomes: [Scope: [String: Outcome]] = [.root: [:], "eu": [:]]
            var lastSequence: [Scope: UInt64] = [.root: 0, "eu": 0]
            var usedIDs: [String] = []
            var divergences: [String] = []
            var kills = Kills()
            var (unknownOutcomes, refusals) = (0, 0)
            try await fleet.withClient { client in
                // One watcher per scope, for the whole run: what it holds must end as the model.
                let watched = scopes.map { scope in
                    let held = WatchedRecords()
                    let task = Task {
                        do {
                            for try await update in client.watchRecords(OrdersIO.Order.self, store: OrdersIO.store, scope: scope) {
                                held.apply(update)
                            }
                        } catch {
                            held.ended(error)
                        }
                    }
                    return (scope, held, task)
                }
                defer { for (_, _, task) in watched { task.cancel() } }

                func check(_ when: String) async throws {
                    for scope in scopes {
                        var records: [String: OrdersIO.Order] = [:]
                        var after: String?
                        var sequence: UInt64?
                        repeat {
                            let range = try PayloadCodec.encode(RecordRange(after: after, limit: 7))
                            let header = EnvelopeHeader(kind: .store, target: OrdersIO.store, scope: scope, typeName: StoreOperation.list)
                            let answer = try await client.request(
                                Envelope(header: header, payload: range), timeout: .seconds(30),
                                retryingOn: BusClient.retryable.union([.timeout, .outcomeUnknown]))
                            let page = try PayloadCodec.decode(RecordPage<OrdersIO.Order>.self, from: answer.payload)
                            sequence = sequence ?? page.sequence
                            for entry in page.records { records[entry.key] = entry.record }
                            after = page.next
                        } while after != nil
                        if records != model[scope]! {
                            divergences.append("\(scope) \(when): holds \(records.count), the model \(model[scope]!.count)")
                        }
                        if let sequence, sequence < lastSequence[scope]! { divergences.append("\(scope) \(when): sequence went back") }
                        lastSequence[scope] = max(lastSequence[scope]!, sequence ?? 0)
                        let total = try await client.query(
                            store: OrdersIO.store, OrdersIO.TotalRequest.name, OrdersIO.TotalRequest(status: .paid), answer: OrdersIO.Total.self,
                            scope: scope, timeout: .seconds(30))
                        let paid = model[scope]!.values.filter { $0.status == .paid }
                        if total != OrdersIO.Total(count: paid.count, cents: paid.reduce(0) { $0 + $1.cents }) {
                            divergences.append("\(scope) \(when): query total \(total), the model \(paid.count) paid")
                        }
                    }
                }

                for index in 0..<steps {
                    let scope = scopes[Int(random.next() % 2)]
                    // New keys keep coming, old ones stay in play: places, payments and cancellations all apply now and then.
                    let key = "K-\(random.next() % UInt64(20 + index / 5))"
                    let step: Step =
                        switch random.next() % 4 {
                        case 0, 1: .place(key, cents: Int(random.next() % 10) - 1)  // now and then 0 or -1: refused
                        case 2: .pay(key)
                        default: .cancel(key)
                        }
                    let repeated = !usedIDs.isEmpty && random.next() % 10 < 2
                    let id = repeated ? usedIDs[Int(random.next() % UInt64(usedIDs.count))] : "s\(index)"
                    if !repeated { usedIDs.append(id) }
                    let payload = try step.payload()
                    let action = step.action
                    let attacked = try await dispatchUnderAttack(
                        fleet: fleet, owner: OrdersIO.id, scope: scope, attack: random.next() % 60, random: &random, kills: &kills
                    ) {
                        try await client.dispatch(
                            store: OrdersIO.store, action: action, payload: payload, dispatchID: id, scope: scope, timeout: .seconds(5))
                    }
                    let (result, maybeApplied) = (attacked.result, attacked.maybeApplied)
                    unknownOutcomes += attacked.unknownOutcomes
                    if let unexpected = attacked.unexpected { divergences.append("step \(index): \(unexpected)") }
                    let outcome: Outcome
                    switch result {
                    case .success(let ack):
                        outcome = .applied
                        if !ack.applied && outcomes[scope]![id] == nil && !maybeApplied {
                            divergences.append("step \(index): \(id) already applied in \(scope), never acknowledged there")
                        }
                    case .failure(let error) where (error as? BusError)?.code == .rejected:
                        outcome = .refused
                        refusals += 1
                    case .failure(let error):
                        divergences.append("step \(index): no answer for \(id) in \(scope): \(error)")
                        continue
                    }
                    if let earlier = outcomes[scope]![id] {
                        // A repeated id gets what its first dispatch got, and changes nothing.
                        if earlier != outcome { divergences.append("step \(index): \(id) was \(earlier), now \(outcome) in \(scope)") }
                    } else {
                        let next = step.applied(to: model[scope]!)
                        if (next != nil) != (outcome == .applied) {
                            divergences.append("step \(index): \(step) was \(outcome) in \(scope); the model says otherwise")
                        }
                        if let next, outcome == .applied { model[scope] = next }
                        outcomes[scope]![id] = outcome
                    }
                    if index % 100 == 99 || attacked.attacked { try await check("after step \(index)") }
                }
                try await check("at the end")
                for (scope, held, _) in watched {
                    let expected = model[scope]!
                    if await !eventually(timeout: .seconds(20), { held.records == expected }) {
                        divergences.append(
                            "\(scope): the watcher holds \(held.records.count) records, the model \(expected.count) (\(held.end ?? "still watching"))"
                        )
                    }
                }
            }
            #expect(divergences.isEmpty, "\(divergences.prefix(20))")
            #expect(kills.owners > 0 && kills.brokers > 0)
            print(
                "keyed model: \(steps) steps, \(model.values.reduce(0) { $0 + $1.count }) orders, \(kills.owners) owner kills, \(kills.brokers) broker kills, \(unknownOutcomes) unknown outcomes, \(refusals) refusals, \(divergences.count) divergences"
            )
        }
    }
}

/// What a watcher holds: its snapshots and changes applied in order.
final class WatchedRecords: Sendable {
    private let held = Mutex<[String: OrdersIO.Order]>([:])
    private let failure = Mutex<String?>(nil)

    func ended(_ error: any Error) { failure.withLock { $0 = "its watch failed: \(error)" } }
    var end: String? { failure.withLock { $0 } }

    func apply(_ update: RecordUpdate<OrdersIO.Order>) {
        held.withLock { records in
            if update.isSnapshot { records.removeAll() }
            for change in update.changes { records[change.key] = change.record }
        }
    }

    var records: [String: OrdersIO.Order] { held.withLock { $0 } }
}
