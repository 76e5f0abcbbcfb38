import BoardBusDemoOrdersIO
import BoardKit
import BoardKitTesting
import BusCore
import Flux
import FluxBus
import Foundation
import Histogram

/// A durable keyed store at 10, 10 000 and (full run) 1 000 000 records, each against the same
/// store with 10: the example `shop.orders` board (a real process, SQLite) answering `place`
/// dispatches from a client over the bus, the bytes a watcher is sent per change, the owner's
/// memory, its restart after `kill -9`, the file against the records' own size; and SQLite alone
/// (Python's sqlite3, `scripts/bench-peers/sqlite-alone.py`) making the same write on the same
/// database, one transaction each.
struct StoreBench {
    let sizes: [Int]
    let dispatches: Int

    /// The store sizes of a run (the first is the one the others are compared with), and the
    /// dispatches timed at each.
    init(quick: Bool) {
        sizes = quick ? [10, 10_000] : [10, 10_000, 1_000_000]
        dispatches = quick ? 300 : 2_000
    }

    struct Figures {
        var size: Int
        var p50: Double
        var p99: Double
        var bytesPerChange: Double
        var ownerKiB: Int
        var restartMilliseconds: Double
        var fileBytes: Int
        var recordBytes: Int
        var sqliteAloneMicroseconds: Double?
    }

    static let harness = "scripts/bench-peers/sqlite-alone.py"

    func run(report: Report) async throws {
        var figures: [Figures] = []
        for size in sizes { figures.append(try await measure(size: size)) }
        guard let base = figures.first else { return }
        report.note(
            "store rows: after each kill -9, every record was there (\(sizes.map { ($0 + dispatches).formatted() }.joined(separator: ", ")), counted by the owner) and 100 acknowledged dispatches sent again were not applied again"
        )
        for figure in figures {
            report.store(figure, base: base)
            if figure.sqliteAloneMicroseconds == nil, figure.size == base.size {
                report.note("SQLite alone rows skipped: python3 or \(Self.harness) is missing")
            }
        }
    }

    private func measure(size: Int) async throws -> Figures {
        let directory = try makeTemporaryDirectory("boardbus-store-bench")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = "\(directory)/state"
        let database = "\(state)/stores/root/\(OrdersIO.id).\(OrdersIO.store).sqlite"
        progress("store: filling \(size) records")
        let recordBytes = try fill(database, records: size)
        let manifest = """
            {"boards": [{"id": "\(OrdersIO.id)", "executable": "BoardBusDemoOrders", "start": "always", "restart": "on-failure"}]}
            """
        var figures = try await TestFleet.with(manifest: manifest, brokerEnvironment: ["BOARDBUS_STATE_DIR": state]) { fleet in
            try await fleet.withClient { client in
                try await measure(size: size, fleet: fleet, client: client, recordBytes: recordBytes, database: database)
            }
        }
        figures.sqliteAloneMicroseconds = try sqliteAlone(database, transactions: dispatches)
        return figures
    }

    /// Writes `records` orders into the store's database, 10 000 to a transaction, as the owner
    /// would (``SQLiteRecords``); returns the records' own size (keys and JSON records).
    private func fill(_ path: String, records: Int) throws -> Int {
        let identity = StoreIdentity(board: OrdersIO.id, scope: .root, store: OrdersIO.store)
        let store = try KeyedStore<OrdersIO.Order>(table: SQLiteRecords(StorePersistence(path: path, identity: identity)), dispatcher: Dispatcher())
        var bytes = 0
        var next = 0
        while next < records {
            let end = min(records, next + 10_000)
            try store.update {
                for index in next..<end {
                    let key = Self.key(index)
                    let order = OrdersIO.Order(item: "tea", cents: 100 + index % 900)
                    bytes += key.utf8.count + (try PayloadCodec.encode(order)).count
                    try store.put(order, at: key)
                }
            }
            next = end
        }
        return bytes
    }

    static func key(_ index: Int) -> String { "K-" + String(format: "%07d", index) }

    private func measure(size: Int, fleet: TestFleet, client: BusClient, recordBytes: Int, database: String) async throws -> Figures {
        // A watcher of the new orders only (its snapshot is empty, whatever the store holds),
        // watching before the first dispatch.
        let (watching, started) = AsyncStream.makeStream(of: Void.self)
        let watched = Task {
            var (changes, bytes) = (0, 0)
            for try await update in client.watchRecords(OrdersIO.Order.self, store: OrdersIO.store, prefix: "N-") {
                guard !update.isSnapshot else {
                    started.yield()
                    continue
                }
                let sent = StoreChanges(store: OrdersIO.store, RecordChanges(sequence: update.sequence, changes: update.changes))
                bytes += try PayloadCodec.encode(sent).count
                changes += 1
                if changes == dispatches { break }
            }
            return Double(bytes) / Double(max(1, changes))
        }
        for await _ in watching { break }
        progress("store: \(dispatches) dispatches at \(size) records")
        var histogram = makeHistogram()
        for index in 0..<dispatches {
            let place = try PayloadCodec.encode(OrdersIO.Place(id: String(format: "N-%06d", index), item: "jam", cents: 250))
            let start = monotonicNanoseconds()
            _ = try await client.dispatch(store: OrdersIO.store, action: OrdersIO.Place.name, payload: place, dispatchID: "n-\(index)")
            histogram.record(monotonicNanoseconds() - start)
        }
        let bytesPerChange = try await watched.value
        guard let pid = fleet.pid(of: OrdersIO.id) else { throw BusError(.boardNotRunning, "shop.orders is not running") }
        let ownerKiB = residentKiB(of: pid) ?? 0

        progress("store: kill -9 of the owner at \(size) records")
        let killed = monotonicNanoseconds()
        kill(pid, SIGKILL)
        let back = await eventually(timeout: .seconds(120), checkingEvery: .milliseconds(5)) {
            guard let now = fleet.pid(of: OrdersIO.id), now != pid else { return false }
            return (try? await client.storeRecord(OrdersIO.Order.self, store: OrdersIO.store, key: "N-000000").record) != nil
        }
        guard back else { throw BusError(.timeout, "shop.orders did not come back after kill -9 at \(size) records") }
        let restart = Double(monotonicNanoseconds() - killed) / 1e6
        try await checkNothingLost(client, records: size + dispatches)
        let summary = LatencySummary(histogram)
        return Figures(
            size: size, p50: summary.p50, p99: summary.p99, bytesPerChange: bytesPerChange, ownerKiB: ownerKiB, restartMilliseconds: restart,
            fileBytes: Self.fileBytes(database), recordBytes: recordBytes, sqliteAloneMicroseconds: nil)
    }

    /// After the owner's `kill -9`: every record is there, once (the owner counts them, page by
    /// page), and acknowledged dispatches sent again are not applied again.
    private func checkNothingLost(_ client: BusClient, records: Int) async throws {
        let total = try await client.query(
            store: OrdersIO.store, OrdersIO.TotalRequest.name, OrdersIO.TotalRequest(), answer: OrdersIO.Total.self, timeout: .seconds(120))
        guard total.count == records else {
            throw BusError(.storageFailed, "after kill -9 the store holds \(total.count) records, not \(records)")
        }
        for index in stride(from: 0, to: dispatches, by: max(1, dispatches / 100)) {
            let place = try PayloadCodec.encode(OrdersIO.Place(id: String(format: "N-%06d", index), item: "jam", cents: 250))
            let ack = try await client.dispatch(store: OrdersIO.store, action: OrdersIO.Place.name, payload: place, dispatchID: "n-\(index)")
            guard !ack.applied else { throw BusError(.storageFailed, "dispatch n-\(index) was applied again after kill -9") }
        }
    }

    /// The database and the files SQLite keeps beside it.
    static func fileBytes(_ path: String) -> Int {
        ["", "-journal", "-wal", "-shm"].reduce(0) { total, suffix in
            total + ((try? FileManager.default.attributesOfItem(atPath: path + suffix)[.size] as? Int) ?? 0)
        }
    }

    /// SQLite alone making a `place`'s write on the same database: read the key, upsert the row,
    /// the sequence and the journal row in one `BEGIN IMMEDIATE` transaction; its median in µs.
    private func sqliteAlone(_ database: String, transactions: Int) throws -> Double? {
        guard FileManager.default.fileExists(atPath: Self.harness) else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Self.harness, database, "\(transactions)"]
        let output = Pipe()
        process.standardOutput = output
        guard (try? process.run()) != nil else { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return Double(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

func makeTemporaryDirectory(_ prefix: String) throws -> String {
    var template = Array(FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-XXXXXX").path.utf8CString)
    guard mkdtemp(&template) != nil else { throw BusError(.transport, "mkdtemp failed") }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
