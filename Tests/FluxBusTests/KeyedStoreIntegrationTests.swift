import BoardBusDemoOrdersIO
import BoardBusDemoRecorderIO
import BoardKit
import BoardKitTesting
import BusCore
import Flux
import FluxBus
import Foundation
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
                _ = try await eventually { fleet.pid(of: OrdersIO.id) != nil && fleet.pid(of: RecorderIO.id) != nil }
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
