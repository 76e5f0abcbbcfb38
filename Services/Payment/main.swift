import BoardKit
import BoardBusDemoPaymentIO

/// A TaskBoard: one payment per process; a second activation while it runs is refused (`busy`).
let board = TaskBoard.make(id: PaymentIO.id) { (pay: PaymentIO.Pay, context: BoardContext) -> PaymentIO.Paid in
    guard pay.amount > 0 else { throw BusError(.badArgument, "amount must be positive") }
    try await Task.sleep(for: .milliseconds(pay.millis ?? 300))
    try await context.sendAction(PaymentIO.OrderPaid(orderID: pay.orderID))
    return PaymentIO.Paid(orderID: pay.orderID, amount: pay.amount)
}
PluginLauncher(board: board).launchAsProcess()
