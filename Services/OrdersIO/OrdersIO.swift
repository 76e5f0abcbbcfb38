import BoardInterface
import Flux

/// The interface of the orders board (`shop.orders`), which owns the durable keyed store `orders`:
/// one record per order, by order id.
public enum OrdersIO {
    public static let id: BoardID = "shop.orders"
    public static let store = "orders"

    public enum Status: String, Codable, Sendable, Hashable {
        case placed, paid, cancelled
    }

    /// One record of the store.
    public struct Order: Codable, Sendable, Hashable {
        public var item: String
        public var cents: Int
        public var status: Status
        public init(item: String, cents: Int, status: Status = .placed) {
            self.item = item
            self.cents = cents
            self.status = status
        }
    }

    /// Action `place`: a new order (refused when the id is taken or the amount is not positive).
    public struct Place: Action, Codable, Hashable {
        public static let name = "place"
        public var id: String
        public var item: String
        public var cents: Int
        public init(id: String, item: String, cents: Int) {
            self.id = id
            self.item = item
            self.cents = cents
        }
    }

    /// Action `pay` (refused for an order that is not placed).
    public struct Pay: Action, Codable, Hashable {
        public static let name = "pay"
        public var id: String
        public init(id: String) { self.id = id }
    }

    /// Action `cancel` (refused for a paid order).
    public struct Cancel: Action, Codable, Hashable {
        public static let name = "cancel"
        public var id: String
        public init(id: String) { self.id = id }
    }

    /// Query `total`: how many orders, and how many cents, with ids under a prefix (and a status).
    public struct TotalRequest: Codable, Sendable, Hashable {
        public static let name = "total"
        public var prefix: String?
        public var status: Status?
        public init(prefix: String? = nil, status: Status? = nil) {
            self.prefix = prefix
            self.status = status
        }
    }

    public struct Total: Codable, Sendable, Hashable {
        public var count: Int
        public var cents: Int
        public init(count: Int, cents: Int) {
            self.count = count
            self.cents = cents
        }
    }

    /// The board's output once an order is placed (after the store applied it).
    public struct Placed: BusPayload, Hashable {
        public var id: String
        public var cents: Int
        public init(id: String, cents: Int) {
            self.id = id
            self.cents = cents
        }
    }
}
