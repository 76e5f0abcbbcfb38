import Foundation
import BoardKit

/// The interface of the counter board: its id, its commands and the action it sends.
public enum CounterIO {
    public static let id: BoardID = "example.counter"

    /// Command `add`: adds to the count; answers the new count.
    public struct Add: BoardCommand, Hashable {
        public static let commandName = "add"
        public typealias Reply = Count
        public var amount: Int
        public init(amount: Int) { self.amount = amount }
    }

    /// Command `count`: the count so far.
    public struct Read: BoardCommand, Hashable {
        public static let commandName = "count"
        public typealias Reply = Count
        public init() {}
    }

    public struct Count: BusPayload, Hashable {
        public var value: Int
        public init(value: Int) { self.value = value }
    }

    /// Action `example.reset`: any board or `busctl action example.reset '{}'` resets the count.
    public struct Reset: BoardAction, Hashable {
        public static let actionName = "example.reset"
        public init() {}
    }

    /// The board: the same definition runs in its own process (`Counter`) and in an
    /// `InProcessFleet` in unit tests.
    public static func board(environment: [String: String] = ProcessInfo.processInfo.environment) -> Board {
        let count = Counter()
        var board = Board(id: id, environment: environment)
        board.onCommand(Add.self) { add, _ in Count(value: await count.add(add.amount)) }
        board.onCommand(Read.self) { _, _ in Count(value: await count.value) }
        board.onAction(Reset.self) { _, _ in await count.reset() }
        return board
    }

    actor Counter {
        private(set) var value = 0
        func add(_ amount: Int) -> Int {
            value += amount
            return value
        }
        func reset() { value = 0 }
    }
}
