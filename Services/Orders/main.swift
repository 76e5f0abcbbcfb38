import BoardBusDemoOrdersIO
import BoardKit
import Flux
import FluxBus
import Synchronization

/// The orders board owns the durable keyed store `orders` and emits `Placed` once an order is placed.
var board = Board(id: OrdersIO.id)
let store = try OrdersStore(table: SQLiteRecords(StorePersistence.forStore(OrdersIO.store, of: board)), dispatcher: Dispatcher())
let host = KeyedStoreHost(name: OrdersIO.store, store: store)
host.action(OrdersIO.Place.self, named: OrdersIO.Place.name)
host.action(OrdersIO.Pay.self, named: OrdersIO.Pay.name)
host.action(OrdersIO.Cancel.self, named: OrdersIO.Cancel.name)
host.query(OrdersIO.TotalRequest.name, OrdersIO.TotalRequest.self) { request, _ in try store.total(request) }
board.host(host)
board.declaresOutput(OrdersIO.Placed.self)

// onStart runs after every registration, again after a broker restart: observe the store once.
let observing = Mutex<Receipt?>(nil)
board.onStart { context in
    observing.withLock { receipt in
        guard receipt == nil else { return }
        // Called on the board's thread once a change is applied (and, here, written).
        receipt = store.onRecordsChange { changes in
            for change in changes.changes {
                guard let order = change.record, order.status == .placed else { continue }
                // Sent before the dispatch is acknowledged: an acknowledged order was announced.
                try? context.post(OrdersIO.Placed(id: change.key, cents: order.cents))
            }
        }
    }
}
board.runAsProcess()
