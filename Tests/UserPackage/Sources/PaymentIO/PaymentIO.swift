import BoardInterface

/// The interface of a user's own payment board.
public enum PaymentIO {
    public static let id: BoardID = "shop.payment"

    /// Command `pay`: answers what was paid.
    public struct Pay: BoardCommand, Hashable {
        public static let commandName = "pay"
        public typealias Reply = Receipt
        public var cents: Int
        public init(cents: Int) { self.cents = cents }
    }

    public struct Receipt: BusPayload, Hashable {
        public var paid: Int
        public init(paid: Int) { self.paid = paid }
    }
}
