import BusCore
import FoundationEssentials

// What a barrier board (BoardKit's `BarrierBoard`) sends and answers, for interface libraries.

/// Output: a waiter passed the barrier, with the value it was overcome with.
public struct BarrierReleased<Input: BusPayload, Value: BusPayload>: BusPayload {
    public static var busTypeName: String { "BarrierReleased" }
    public var input: Input
    public var value: Value
    public init(input: Input, value: Value) {
        self.input = input
        self.value = value
    }
}

/// Output: a waiter was dropped by `cancel`.
public struct BarrierCancelled<Input: BusPayload>: BusPayload {
    public static var busTypeName: String { "BarrierCancelled" }
    public var input: Input
    public init(input: Input) { self.input = input }
}

/// Command `overcome`: open the barrier with a value.
public struct Overcome<Value: BusPayload>: BoardCommand {
    public static var commandName: String { "overcome" }
    public typealias Reply = BarrierStatus
    public var value: Value
    public init(value: Value) { self.value = value }
}

/// Command `cancel`: drop every waiter.
public struct CancelBarrier: BoardCommand {
    public static let commandName = "cancel"
    public typealias Reply = BarrierStatus
    public init() {}
}

/// Command `barrier`: the barrier's state.
public struct BarrierQuery: BoardCommand {
    public static let commandName = "barrier"
    public typealias Reply = BarrierStatus
    public init() {}
}

/// Reply of the barrier commands.
public struct BarrierStatus: BusPayload, Hashable {
    public var open: Bool
    public var waiting: Int
    public var released: Int
    public var cancelled: Int
    public init(open: Bool, waiting: Int, released: Int = 0, cancelled: Int = 0) {
        self.open = open
        self.waiting = waiting
        self.released = released
        self.cancelled = cancelled
    }
}
