import BoardKit
import PaymentIO

var board = Board(id: PaymentIO.id)
board.onCommand(PaymentIO.Pay.self) { pay, _ in PaymentIO.Receipt(paid: pay.cents) }
try await board.run()
