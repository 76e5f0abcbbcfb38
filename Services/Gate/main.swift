import BoardKit
import BoardBusDemoGateIO

BarrierBoard.make(id: GateIO.id, input: GateIO.Ticket.self, value: GateIO.Signal.self).runAsProcess()
