import BoardKit
import BoardBusDemoGateIO

try await BarrierBoard.make(id: GateIO.id, input: GateIO.Ticket.self, value: GateIO.Signal.self).run()
