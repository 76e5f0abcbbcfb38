import BoardInterface

/// The interface of the gate board (`demo.gate`): a BarrierBoard. Activations with a ``Ticket``
/// wait until someone sends `overcome` with a ``Signal`` (each waiter is then released as a
/// `BarrierReleased` output) or `cancel` (each is dropped as `BarrierCancelled`).
public enum GateIO {
    public static let id: BoardID = "demo.gate"
    public static let destination = BoardDestination<Ticket>(id)

    /// Input: wait at the gate.
    public struct Ticket: BusPayload, Hashable {
        public var holder: String
        public init(holder: String) { self.holder = holder }
    }

    /// What the gate is overcome with.
    public struct Signal: BusPayload, Hashable {
        public var reason: String
        public init(reason: String) { self.reason = reason }
    }

    public typealias Released = BarrierReleased<Ticket, Signal>
    public typealias Cancelled = BarrierCancelled<Ticket>
}
