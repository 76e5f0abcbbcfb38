import BoardKit
import BusCore
import BoardKitTesting
import Flux
import FluxBus
import Foundation
import GRDB
import MotherboardCore
import Testing

/// Keyed stores: records by key, a change is the keys it touched — in its write, in what watchers
/// are sent, in what a watcher that fell behind catches up with.
@Suite("Keyed stores", .timeLimit(.minutes(2)))
struct KeyedStoreTests {
    struct Order: Codable, Sendable, Hashable {
        var cents: Int
        var paid = false
    }

    struct Place: Flux.Action, Codable {
        var id: String
        var cents: Int
    }

    struct Cancel: Flux.Action, Codable {
        var id: String
    }

    struct Pay: Flux.Action, Codable {
        var id: String
    }

    /// Two orders in one change.
    struct PlacePair: Flux.Action, Codable {
        var id: String
    }

    struct Total: Codable, Sendable, Hashable {
        var count: Int
        var cents: Int
    }

    struct Prefix: Codable, Sendable {
        var prefix: String
    }

    /// The `orders` kind: placing an order twice, cancelling a paid one, paying a missing one are refused.
    final class Orders: KeyedStore<Order>, @unchecked Sendable {
        override func onDispatch(_ action: any Flux.Action) throws {
            switch action {
            case let place as Place:
                guard try record(place.id) == nil else { throw Refusal("order \(place.id) exists") }
                try put(Order(cents: place.cents), at: place.id)
            case let cancel as Cancel:
                guard let order = try record(cancel.id) else { throw Refusal("no order \(cancel.id)") }
                guard !order.paid else { throw Refusal("order \(cancel.id) is paid") }
                try remove(cancel.id)
            case let pair as PlacePair:
                try put(Order(cents: 1), at: pair.id + "-a")
                try put(Order(cents: 1), at: pair.id + "-b")
            case let pay as Pay:
                guard var order = try record(pay.id) else { throw Refusal("no order \(pay.id)") }
                order.paid = true
                try put(order, at: pay.id)
            default:
                break
            }
        }
    }

    static func host(_ table: (any RecordTable<Order>)? = nil, keepingChanges: Int = 1_000) throws -> KeyedStoreHost<Order> {
        let host = KeyedStoreHost(name: "orders", store: try Orders(table: table, dispatcher: Dispatcher()), keepingChanges: keepingChanges)
        host.action(Place.self, named: "place")
        host.action(Cancel.self, named: "cancel")
        host.action(Pay.self, named: "pay")
        host.action(PlacePair.self, named: "pair")
        host.query("total", Prefix.self) { request, store in
            var total = Total(count: 0, cents: 0)
            var after: String?
            while true {
                let page = try store.records(prefix: request.prefix, after: after, limit: 500)
                for entry in page {
                    total.count += 1
                    total.cents += entry.record.cents
                }
                guard page.count == 500 else { return total }
                after = page.last?.key
            }
        }
        return host
    }

    static func owner(_ host: KeyedStoreHost<Order>) -> Board {
        var board = Board(id: "shop.orders", environment: [:])
        board.host(host)
        return board
    }

    func dispatch(_ fleet: InProcessFleet, _ action: String, _ payload: some Encodable, id: String? = nil) async throws -> DispatchAck {
        try await fleet.client.dispatch(store: "orders", action: action, payload: PayloadCodec.encode(payload), dispatchID: id)
    }

    @Test func recordsAreReadByKeyAndInPagesAndRefusalsChangeNothing() async throws {
        try await InProcessFleet.with { fleet in
            try await fleet.start(Self.owner(Self.host()))
            for (id, cents) in [("A-2", 200), ("A-1", 100), ("B-1", 50), ("A-10", 1000)] {
                _ = try await dispatch(fleet, "place", Place(id: id, cents: cents))
            }
            let one = try await fleet.client.storeRecord(Order.self, store: "orders", key: "A-1")
            #expect(one.record == Order(cents: 100) && one.sequence == 4)
            #expect(try await fleet.client.storeRecord(Order.self, store: "orders", key: "Z").record == nil)

            // Pages in key order (bytes of UTF-8), by prefix, each naming the next.
            let first = try await fleet.client.storeRecords(Order.self, store: "orders", prefix: "A-", limit: 2)
            #expect(first.records.map(\.key) == ["A-1", "A-10"] && first.next == "A-10")
            let second = try await fleet.client.storeRecords(Order.self, store: "orders", prefix: "A-", after: first.next, limit: 2)
            #expect(second.records.map(\.key) == ["A-2"] && second.next == nil)
            for limit in [0, -1, 1_001] {
                let error = await #expect(throws: BusError.self) { try await fleet.client.storeRecords(Order.self, store: "orders", limit: limit) }
                #expect(error?.code == .badArgument)
            }

            // A refusal: nothing applied, no sequence spent, its retry refused the same way.
            _ = try await dispatch(fleet, "pay", Pay(id: "A-1"))
            for _ in 0..<2 {
                let error = await #expect(throws: BusError.self) { try await dispatch(fleet, "cancel", Cancel(id: "A-1"), id: "c-1") }
                #expect(error?.code == .rejected && error?.message.contains("order A-1 is paid") == true)
            }
            #expect(try await fleet.client.storeRecord(Order.self, store: "orders", key: "A-1").sequence == 5)

            // A query, answered at the owner.
            let total = try await fleet.client.query(store: "orders", "total", Prefix(prefix: "A-"), answer: Total.self)
            #expect(total == Total(count: 3, cents: 1300))
            let unknown = await #expect(throws: BusError.self) {
                try await fleet.client.query(store: "orders", "nope", Prefix(prefix: ""), answer: Total.self)
            }
            #expect(unknown?.code == .unknownAction && unknown?.message.contains("(it has: total)") == true)
            let mistyped = await #expect(throws: BusError.self) {
                try await fleet.client.query(store: "orders", "total", ["prefix": 5], answer: Total.self)
            }
            #expect(mistyped?.code == .typeMismatch && mistyped?.message.contains("query 'total' expects") == true)

            // Introspection shows the record's shape, the actions and the query.
            let info = try await fleet.client.introspect("shop.orders")
            let schema = try #require(info.schemas?.stores?["orders"])
            #expect(schema.record != nil && schema.actions.keys.sorted() == ["cancel", "pair", "pay", "place"] && schema.queries?["total"] != nil)
        }
    }

    @Test func keysAtAndPastTheirLimitsAndRecordsJSONCannotHold() async throws {
        struct Put: Flux.Action, Codable {
            var key: String
            var cents: Double
        }
        final class Raw: KeyedStore<[String: Double]>, @unchecked Sendable {
            override func onDispatch(_ action: any Flux.Action) throws {
                guard let put = action as? Put else { return }
                try self.put(["cents": put.cents], at: put.key)
            }
        }
        try await InProcessFleet.with { fleet in
            let host = KeyedStoreHost(name: "raw", store: try Raw(dispatcher: Dispatcher()))
            host.action(Put.self, named: "put")
            var board = Board(id: "shop.raw", environment: [:])
            board.host(host)
            try await fleet.start(board)
            func put(_ key: String, _ cents: Double = 1) async throws -> DispatchAck {
                try await fleet.client.dispatch(store: "raw", action: "put", payload: PayloadCodec.encode(Put(key: key, cents: cents)))
            }
            // 1 024 bytes, the last character two bytes: taken; one byte more, or none, refused.
            let atLimit = String(repeating: "a", count: 1_022) + "é"
            #expect(try await put(atLimit).sequence == 1)
            for key in [atLimit + "a", "", "a\u{0}b"] {
                let error = await #expect(throws: BusError.self) { try await put(key) }
                #expect(error?.code == .rejected, "\(key.utf8.count) bytes")
            }
            // -0 and 1e20 are kept as they are; nan cannot be written as JSON: nothing applied.
            #expect(try await put("neg", -0.0).sequence == 2)
            #expect(try await put("big", 1e20).sequence == 3)
            let nan = await #expect(throws: BusError.self) {
                try await fleet.client.dispatch(store: "raw", action: "put", payload: Data(#"{"key":"n","cents":1e999}"#.utf8))
            }
            #expect(nan?.code == .typeMismatch || nan?.code == .badArgument)
            let big = try await fleet.client.storeRecord([String: Double].self, store: "raw", key: "big")
            #expect(big.record == ["cents": 1e20] && big.sequence == 3)
        }
    }

    /// "café" composed (NFC) and decomposed (NFD) is one key for every read and write: one record
    /// for `get`, `list`, a query, the snapshot and the count, stored composed (the database, which
    /// compares bytes, held two records that Swift's dictionaries then merged into one). The
    /// length limit is the composed form's: a key of 1 025 bytes decomposed, 1 024 composed, is taken.
    @Test func composedAndDecomposedKeysAreOneRecordEverywhere() async throws {
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed.utf8.count != decomposed.utf8.count)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyed-nfc-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = StoreIdentity(board: "shop.orders", scope: .root, store: "orders")
        let persistence = try StorePersistence(path: "\(directory)/orders.sqlite", identity: identity)
        try await InProcessFleet.with { fleet in
            let host = try Self.host(SQLiteRecords<Order>(persistence))
            try await fleet.start(Self.owner(host))
            _ = try await dispatch(fleet, "place", Place(id: composed, cents: 100))
            let again = await #expect(throws: BusError.self) { try await dispatch(fleet, "place", Place(id: decomposed, cents: 200)) }
            #expect(again?.message.contains("exists") == true)
            _ = try await dispatch(fleet, "pay", Pay(id: decomposed))
            for key in [composed, decomposed] {
                let record = try await fleet.client.storeRecord(Order.self, store: "orders", key: key)
                #expect(record.record == Order(cents: 100, paid: true) && record.key == composed)
            }
            for prefix in ["caf", composed, decomposed] {
                let page = try await fleet.client.storeRecords(Order.self, store: "orders", prefix: prefix, limit: 10)
                #expect(page.records.map(\.key) == [composed], "prefix \(prefix.unicodeScalars.map(\.value))")
            }
            let total = try await fleet.client.query(store: "orders", "total", Prefix(prefix: ""), answer: Total.self)
            #expect(total == Total(count: 1, cents: 100))
            // The database's rows, read by bytes: one.
            let rows = try await fleet.client.storeRecords(Order.self, store: "orders", limit: 10)
            #expect(rows.records.map { Array($0.key.utf8) } == [Array(composed.utf8)])
            // Removed by its other spelling.
            let cancel = await #expect(throws: BusError.self) { try await dispatch(fleet, "cancel", Cancel(id: decomposed)) }
            #expect(cancel?.message.contains("is paid") == true)
            // At the limit in its composed form.
            let long = String(repeating: "a", count: 1_022) + "e\u{301}"
            #expect(long.utf8.count == 1_025)
            _ = try await dispatch(fleet, "place", Place(id: long, cents: 1))
            let stored = try await fleet.client.storeRecords(Order.self, store: "orders", prefix: "aaa", limit: 10)
            #expect(stored.records.map(\.key.utf8.count) == [1_024])
        }
    }

    @Test func aDurableStoreWritesWhatChangedAndKeepsItsIDsAcrossAReopen() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyed-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = StoreIdentity(board: "shop.orders", scope: .root, store: "orders")
        func open() throws -> KeyedStoreHost<Order> {
            try Self.host(SQLiteRecords<Order>(StorePersistence(path: "\(directory)/orders.sqlite", identity: identity)))
        }
        try await InProcessFleet.with { fleet in
            try await fleet.start(Self.owner(try open()))
            _ = try await dispatch(fleet, "place", Place(id: "A-1", cents: 100), id: "p-1")
            _ = try await dispatch(fleet, "place", Place(id: "A-2", cents: 200), id: "p-2")
            _ = try await dispatch(fleet, "cancel", Cancel(id: "A-2"), id: "c-2")
            let refused = await #expect(throws: BusError.self) { try await dispatch(fleet, "pay", Pay(id: "A-9"), id: "x-9") }
            #expect(refused?.code == .rejected)
            await fleet.stop("shop.orders")

            // Another owner on the same file: the records, the sequence and every id are there.
            try await fleet.start(Self.owner(try open()))
            let again = try await dispatch(fleet, "place", Place(id: "A-1", cents: 100), id: "p-1")
            #expect(again.applied == false && again.sequence == 1)
            let stillRefused = await #expect(throws: BusError.self) { try await dispatch(fleet, "pay", Pay(id: "A-9"), id: "x-9") }
            #expect(stillRefused?.message.contains("no order A-9") == true)
            let page = try await fleet.client.storeRecords(Order.self, store: "orders")
            #expect(page.records.map(\.key) == ["A-1"] && page.sequence == 3)
            #expect(try await dispatch(fleet, "pay", Pay(id: "A-1")).sequence == 4)
        }
    }

    /// A change's rows and its journal row are one transaction: a database that cannot be written
    /// leaves the records, the sequence and the id as they were, and the retry is applied once.
    @Test func aChangeTheDatabaseRefusesIsNotAppliedAndItsRetryIsAppliedOnce() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyed-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/orders.sqlite"
        let identity = StoreIdentity(board: "shop.orders", scope: .root, store: "orders")
        // The owner waits for the lock on its own thread, heartbeats included: not taken for dead.
        try await InProcessFleet.with(settings: MotherboardSettings(livenessTimeout: .seconds(3600))) { fleet in
            try await fleet.start(Self.owner(try Self.host(SQLiteRecords<Order>(StorePersistence(path: path, identity: identity)))))
            _ = try await dispatch(fleet, "place", Place(id: "A-1", cents: 100))
            let other = try lockingConnection(path)
            try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
            let error = await #expect(throws: BusError.self) {
                try await fleet.client.dispatch(
                    store: "orders", action: "place", payload: PayloadCodec.encode(Place(id: "A-2", cents: 1)), dispatchID: "p-2",
                    // The lock is waited for 4 s of it: 1 s is left for the answer, on a loaded machine too.
                    timeout: .seconds(5))
            }
            #expect(error?.code == .storageFailed)
            try await other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
            #expect(try await fleet.client.storeRecord(Order.self, store: "orders", key: "A-2").record == nil)
            let retried = try await dispatch(fleet, "place", Place(id: "A-2", cents: 1), id: "p-2")
            #expect(retried.applied && retried.sequence == 2)
            #expect(try await dispatch(fleet, "place", Place(id: "A-2", cents: 1), id: "p-2").applied == false)
        }
    }

    @Test func aWatcherGetsTheKeysEachChangeTouchedAndCatchesUpFromKeptChanges() async throws {
        let clock = ManualClock()
        let settings = MotherboardSettings(livenessTimeout: .seconds(3600))
        try await InProcessFleet.with(settings: settings, clock: clock.busClock) { fleet in
            try await fleet.start(Self.owner(Self.host(keepingChanges: 100)))
            _ = try await dispatch(fleet, "place", Place(id: "A-1", cents: 1))
            var updates = fleet.client.watchRecords(Order.self, store: "orders", prefix: "A-").makeAsyncIterator()
            let snapshot = try #require(try await updates.next())
            #expect(snapshot.isSnapshot && snapshot.sequence == 1 && snapshot.changes.map(\.key) == ["A-1"])

            _ = try await dispatch(fleet, "place", Place(id: "B-1", cents: 2))  // not under the prefix
            _ = try await dispatch(fleet, "place", Place(id: "A-2", cents: 3))
            _ = try await dispatch(fleet, "cancel", Cancel(id: "A-1"))
            let put = try #require(try await updates.next())
            #expect(!put.isSnapshot && put.sequence == 3 && put.changes == [RecordChange(key: "A-2", record: Order(cents: 3))])
            let removal = try #require(try await updates.next())
            #expect(removal.sequence == 4 && removal.changes == [RecordChange(key: "A-1", record: nil)])

            // Cut off from the store's changes (as a full queue or a lost link would) for 50 of
            // them: the next one shows the gap, and the owner's kept changes fill it, no snapshot.
            let off = EnvelopeHeader(kind: .store, target: "orders", typeName: StoreOperation.unsubscribe)
            _ = try await fleet.client.request(Envelope(header: off))
            for index in 0..<50 { _ = try await dispatch(fleet, "place", Place(id: "A-\(100 + index)", cents: index)) }
            try fleet.client.send(Envelope(header: EnvelopeHeader(kind: .store, target: "orders", typeName: StoreOperation.renew)))
            _ = try await dispatch(fleet, "pay", Pay(id: "A-2"))
            var sequences: [UInt64] = []
            while sequences.last != 55 {
                let update = try #require(try await updates.next())
                #expect(!update.isSnapshot)
                sequences.append(update.sequence)
            }
            #expect(sequences == Array(5...55))

            // Cut off for 10 000 changes, more than the owner keeps: a new snapshot, read in pages.
            _ = try await fleet.client.request(Envelope(header: off))
            for index in 0..<10_000 { _ = try await dispatch(fleet, "pay", Pay(id: "A-\(100 + index % 50)")) }
            try fleet.client.send(Envelope(header: EnvelopeHeader(kind: .store, target: "orders", typeName: StoreOperation.renew)))
            _ = try await dispatch(fleet, "place", Place(id: "A-999", cents: 9))
            let fresh = try #require(try await updates.next())
            #expect(fresh.isSnapshot && fresh.sequence >= 10_055 && fresh.changes.count >= 51)
            #expect(fresh.changes.allSatisfy { $0.record?.paid == true || $0.key == "A-999" })
        }
    }

    @Test func aTestWaitsForAStoreToReachAStateWithinADeadline() async throws {
        try await InProcessFleet.with { fleet in
            try await fleet.start(Self.owner(Self.host()))
            let paid = Task {
                try await fleet.client.waitForRecords(of: "orders", as: Order.self, prefix: "A-") { $0["A-1"]?.paid == true }
            }
            _ = try await dispatch(fleet, "place", Place(id: "A-1", cents: 5))
            _ = try await dispatch(fleet, "pay", Pay(id: "A-1"))
            #expect(try await paid.value == ["A-1": Order(cents: 5, paid: true)])
            let never = await #expect(throws: BusError.self) {
                try await fleet.client.waitForRecords(of: "orders", as: Order.self, timeout: .milliseconds(300)) { $0.count > 5 }
            }
            #expect(never?.code == .timeout && never?.message.contains("store 'orders'") == true)

            // A plain store's whole state, the same way.
            final class Counter: StatefulStore<Int>, @unchecked Sendable {
                override func onDispatch(_ action: any Flux.Action) { if action is Pay { state += 1 } }
            }
            let counter = try StoreHost(name: "counter", store: Counter(initialState: 0, dispatcher: Dispatcher()))
            counter.action(Pay.self, named: "add")
            var board = Board(id: "shop.counter", environment: [:])
            board.host(counter)
            try await fleet.start(board)
            let three = Task { try await fleet.client.waitForState(of: "counter", as: Int.self) { $0 == 3 } }
            for _ in 0..<3 { _ = try await fleet.client.dispatch(store: "counter", action: "add", payload: PayloadCodec.encode(Pay(id: ""))) }
            #expect(try await three.value == 3)
        }
    }

    /// A query runs between two dispatches, never inside one: under a stream of changes that each
    /// place two orders, every total it answers counts an even number, and never fewer than before.
    @Test func aQueryUnderConcurrentDispatchesSeesWholeChanges() async throws {
        try await InProcessFleet.with { fleet in
            try await fleet.start(Self.owner(Self.host()))
            let totals = try await withThrowingTaskGroup(of: [Total].self) { group in
                group.addTask {
                    for index in 0..<300 { _ = try await dispatch(fleet, "pair", PlacePair(id: "P-\(index)")) }
                    return []
                }
                group.addTask {
                    var seen: [Total] = []
                    while seen.last?.count != 600 {
                        seen.append(try await fleet.client.query(store: "orders", "total", Prefix(prefix: "P-"), answer: Total.self))
                    }
                    return seen
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(totals.count > 2, "the query ran while the dispatches did")
            #expect(totals.allSatisfy { $0.count % 2 == 0 && $0.cents == $0.count }, "\(totals.filter { $0.count % 2 != 0 }.prefix(5))")
            #expect(zip(totals, totals.dropFirst()).allSatisfy { $0.count <= $1.count })
        }
    }

    /// A watcher that kept the records up to a sequence starts from it: the changes after it,
    /// no snapshot, while the owner keeps them; a snapshot when it does not.
    @Test func aWatcherThatHasTheRecordsStartsAfterItsSequence() async throws {
        try await InProcessFleet.with { fleet in
            try await fleet.start(Self.owner(Self.host(keepingChanges: 2)))
            for index in 1...3 { _ = try await dispatch(fleet, "place", Place(id: "A-\(index)", cents: index)) }
            var fromTwo = fleet.client.watchRecords(Order.self, store: "orders", after: 2).makeAsyncIterator()
            let next = try #require(try await fromTwo.next())
            #expect(!next.isSnapshot && next.sequence == 3 && next.changes.map(\.key) == ["A-3"])
            var fromZero = fleet.client.watchRecords(Order.self, store: "orders", after: 0).makeAsyncIterator()
            let snapshot = try #require(try await fromZero.next())
            #expect(snapshot.isSnapshot && snapshot.sequence == 3 && snapshot.changes.map(\.key) == ["A-1", "A-2", "A-3"])
        }
    }

    @Test func changesSinceAreKeptUpToTheirBoundAndAResetBeyondIt() throws {
        let host = try Self.host(keepingChanges: 3)
        let store = host.store
        for index in 1...5 { try store.put(Order(cents: index), at: "K-\(index)") }
        func changes(since: UInt64) throws -> StoreChangeLog<Order> {
            let request = StoreRequest(
                kind: .store, operation: StoreOperation.state, sender: "", payload: try PayloadCodec.encode(ChangesSince(since: since)))
            return try PayloadCodec.decode(StoreChangeLog<Order>.self, from: host.handle(request))
        }
        #expect(try changes(since: 5).entries.isEmpty && !changes(since: 5).reset && changes(since: 5).sequence == 5)
        #expect(try changes(since: 2).entries.map(\.sequence) == [3, 4, 5])
        #expect(try changes(since: 2).entries.last?.changes.map(\.key) == ["K-5"])
        #expect(try changes(since: 1).reset && changes(since: 0).reset)
        #expect(try changes(since: 9).reset, "a watcher ahead of the store has another store's history")
    }
}
