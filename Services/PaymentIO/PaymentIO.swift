import BoardInterface

/// The interface of the payment board (`checkout.payment` in scope `checkout`): a task board
/// started on demand, which takes one payment, emits ``Paid`` and completes.
public enum PaymentIO {
    public static let id: BoardID = "checkout.payment"
    public static let scope = "checkout"
    public static let destination = BoardDestination<Pay>(id)

    /// Input: pay for an order. `millis` is how long the payment takes (default 300).
    public struct Pay: BusPayload, Hashable {
        public var orderID: String
        public var amount: Int
        public var millis: Int?
        public init(orderID: String, amount: Int, millis: Int? = nil) {
            self.orderID = orderID
            self.amount = amount
            self.millis = millis
        }
    }

    /// Output: the order is paid.
    public struct Paid: BusPayload, Hashable {
        public var orderID: String
        public var amount: Int
        public init(orderID: String, amount: Int) {
            self.orderID = orderID
            self.amount = amount
        }
    }

    /// Action sent when an order is paid; it bubbles from `checkout` to the root scope.
    public struct OrderPaid: BoardAction, Hashable {
        public static let actionName = "checkout.orderPaid"
        public var orderID: String
        public init(orderID: String) { self.orderID = orderID }
    }
}
