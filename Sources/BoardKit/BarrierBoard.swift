import BusCore
import FoundationEssentials
import Glibc

/// Boardy's BarrierBoard: activations wait at a closed barrier until it is overcome or cancelled.
///
/// - activate(`Input`): wait. At an open barrier (already overcome) the waiter passes at once.
/// - command `overcome` with a `Value`: opens the barrier; every waiter, in arrival order, is
///   released as an output `BarrierReleased` (`sendToMotherboard`).
/// - command `cancel`: every waiter is dropped as an output `BarrierCancelled`; the barrier
///   stays closed.
/// - command `barrier`: the state.
public enum BarrierBoard {
    public static func make<Input: BusPayload, Value: BusPayload>(
        id: BoardID, input: Input.Type, value: Value.Type,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Board {
        let barrier = BarrierState<Input, Value>()
        var board = Board(id: id, environment: environment)
        board.declaresOutput(BarrierReleased<Input, Value>.self)
        board.declaresOutput(BarrierCancelled<Input>.self)
        board.onActivate(Input.self) { input, context in
            if let value = await barrier.wait(input) {
                try await context.sendToMotherboard(BarrierReleased(input: input, value: value))
            }
        }
        board.onCommand(Overcome<Value>.self) { overcome, context in
            let released = await barrier.overcome(with: overcome.value)
            for input in released {
                try await context.sendToMotherboard(BarrierReleased(input: input, value: overcome.value))
            }
            return BarrierStatus(open: true, waiting: 0, released: released.count)
        }
        board.onCommand(CancelBarrier.self) { _, context in
            let cancelled = await barrier.cancel()
            for input in cancelled {
                try await context.sendToMotherboard(BarrierCancelled(input: input))
            }
            return BarrierStatus(open: false, waiting: 0, released: 0, cancelled: cancelled.count)
        }
        board.onCommand(BarrierQuery.self) { _, _ in await barrier.status }
        return board
    }
}

actor BarrierState<Input: BusPayload, Value: BusPayload> {
    private var value: Value?
    private var waiters: [Input] = []

    /// Adds a waiter; returns the value at once when the barrier is open.
    func wait(_ input: Input) -> Value? {
        if let value { return value }
        waiters.append(input)
        return nil
    }

    func overcome(with value: Value) -> [Input] {
        self.value = value
        defer { waiters.removeAll() }
        return waiters
    }

    func cancel() -> [Input] {
        defer { waiters.removeAll() }
        return waiters
    }

    var status: BarrierStatus {
        BarrierStatus(open: value != nil, waiting: waiters.count)
    }
}
