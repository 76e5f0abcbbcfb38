import BoardBusDemoOrdersIO
import Flux

/// Orders by id: a change puts or removes the orders it touches, nothing else.
final class OrdersStore: KeyedStore<OrdersIO.Order>, @unchecked Sendable {
    override func onDispatch(_ action: any Action) throws {
        switch action {
        case let place as OrdersIO.Place:
            guard place.cents > 0 else { throw Refusal("an order costs more than 0 cents") }
            guard try record(place.id) == nil else { throw Refusal("order \(place.id) exists") }
            try put(OrdersIO.Order(item: place.item, cents: place.cents), at: place.id)
        case let pay as OrdersIO.Pay:
            guard var order = try record(pay.id) else { throw Refusal("no order \(pay.id)") }
            guard order.status == .placed else { throw Refusal("order \(pay.id) is \(order.status.rawValue)") }
            order.status = .paid
            try put(order, at: pay.id)
        case let cancel as OrdersIO.Cancel:
            guard var order = try record(cancel.id) else { throw Refusal("no order \(cancel.id)") }
            guard order.status != .paid else { throw Refusal("order \(cancel.id) is paid") }
            order.status = .cancelled
            try put(order, at: cancel.id)
        default:
            break
        }
    }

    /// The `total` query: read page by page, so it never holds the whole store.
    func total(_ request: OrdersIO.TotalRequest) throws -> OrdersIO.Total {
        var total = OrdersIO.Total(count: 0, cents: 0)
        var after: String?
        while true {
            let page = try records(prefix: request.prefix ?? "", after: after, limit: 1_000)
            for (_, order) in page where request.status == nil || order.status == request.status {
                total.count += 1
                total.cents += order.cents
            }
            guard page.count == 1_000, let last = page.last else { return total }
            after = last.key
        }
    }
}
