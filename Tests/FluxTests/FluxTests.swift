import Foundation
import Testing

@testable import Flux

struct Increment: Action { var by: Int }
struct Noop: Action {}

final class CounterStore: StatefulStore<Int>, @unchecked Sendable {
    var dispatchedFromInside: (any Error)?
    override func onDispatch(_ action: any Action) {
        if let increment = action as? Increment { state += increment.by }
        if action is Noop {
            do { try dispatcher.dispatch(Increment(by: 100)) } catch { dispatchedFromInside = error }
        }
    }
}

final class PostQueries: QueryStore<[Int], Int>, @unchecked Sendable {
    var changes: [[Int]] = []
    override func queriesChanged() { changes.append(activeQueries) }
}

@Suite("Flux in one process")
struct FluxTests {
    @Test func theDispatcherReachesEveryStoreInOrderAndUnregisters() throws {
        let dispatcher = Dispatcher()
        var seen: [String] = []
        let first = dispatcher.register { _ in seen.append("first") }
        _ = dispatcher.register { _ in seen.append("second") }
        try dispatcher.dispatch(Noop())
        dispatcher.unregister(first)
        try dispatcher.dispatch(Noop())
        #expect(seen == ["first", "second", "second"])
    }

    /// A store that refuses stops the dispatch there: later stores do not get the action, and
    /// the dispatcher may dispatch again.
    @Test func aRefusalStopsTheDispatch() throws {
        let dispatcher = Dispatcher()
        var seen: [String] = []
        _ = dispatcher.register { _ in
            seen.append("first")
            throw Refusal("not now")
        }
        _ = dispatcher.register { _ in seen.append("second") }
        #expect(throws: Refusal("not now")) { try dispatcher.dispatch(Noop()) }
        #expect(seen == ["first"])
        #expect(!dispatcher.isDispatching)
        #expect(throws: Refusal("not now")) { try dispatcher.dispatch(Noop()) }
    }

    @Test func dispatchingWhileDispatchingIsRefused() throws {
        let store = CounterStore(initialState: 0, dispatcher: Dispatcher())
        try store.dispatcher.dispatch(Noop())
        #expect(store.dispatchedFromInside as? FluxError == .dispatchInProgress)
        #expect(store.state == 0)
        #expect(!store.dispatcher.isDispatching)
    }

    @Test func observersLeaveWhenTheirReceiptIsReleased() throws {
        let store = CounterStore(initialState: 0, dispatcher: Dispatcher())
        var changes = 0
        var receipt: Receipt? = store.onChange { changes += 1 }
        try store.dispatcher.dispatch(Increment(by: 1))
        #expect(changes == 1)
        #expect(store.changeObserverCount == 1)
        _ = receipt
        receipt = nil
        try store.dispatcher.dispatch(Increment(by: 1))
        #expect(changes == 1)
        #expect(store.changeObserverCount == 0)
    }

    @Test func everyAssignmentNotifiesOldAndNewAndATransactionOnce() throws {
        let store = CounterStore(initialState: 0, dispatcher: Dispatcher())
        var seen: [(Int, Int)] = []
        let receipt = store.onStateChange { seen.append(($0.old, $0.new)) }
        store.state = 1
        store.state = 5
        store.transaction { state in
            state += 1
            state += 1
            state += 1
        }
        #expect(seen.map(\.0) == [0, 1, 5])
        #expect(seen.map(\.1) == [1, 5, 8])
        _ = receipt
    }

    @Test func storesGoAwayAndStopReceivingActions() throws {
        let dispatcher = Dispatcher()
        var store: CounterStore? = CounterStore(initialState: 0, dispatcher: dispatcher)
        weak let weakStore = store
        store = nil
        #expect(weakStore == nil)
        try dispatcher.dispatch(Increment(by: 1))
    }

    @Test func queriesChangedRunsOnQueryChangesOnly() {
        let store = PostQueries(initialState: [], dispatcher: Dispatcher())
        var one: Receipt? = store.activate(1)
        var two: Receipt? = store.activate(2)
        store.state = [42]
        #expect(store.changes == [[1], [1, 2]])
        _ = one
        one = nil
        #expect(store.changes == [[1], [1, 2], [2]])
        _ = two
        two = nil
        #expect(store.changes.last == [])
        #expect(store.activeQueries.isEmpty)
    }

    @Test func aStagedChangeIsSeenOnlyOnceCommittedAndARefusedOneIsUndone() throws {
        struct Refused: Error {}
        let store = CounterStore(initialState: 1, dispatcher: Dispatcher())
        var seen: [(Int, Int)] = []
        let receipt = store.onStateChange { seen.append(($0.old, $0.new)) }
        var changes = 0
        let changeReceipt = store.onChange { changes += 1 }

        // Refused: the state goes back, nobody hears of it.
        #expect(throws: Refused.self) {
            try store.stage(
                {
                    try store.dispatcher.dispatch(Increment(by: 2))
                    try store.dispatcher.dispatch(Increment(by: 3))
                },
                commit: { old, new in
                    #expect(old == 1 && new == 6)
                    #expect(seen.isEmpty)
                    throw Refused()
                })
        }
        #expect(store.state == 1)
        #expect(seen.isEmpty && changes == 0)

        // Committed: one notification with the state from before and after.
        let changed = try store.stage({ try store.dispatcher.dispatch(Increment(by: 2)) }, commit: { _, _ in })
        #expect(changed && store.state == 3)
        #expect(seen.map(\.0) == [1] && seen.map(\.1) == [3] && changes == 1)

        // Nothing assigned: commit is not called, nobody is notified.
        let unchanged = try store.stage({}, commit: { _, _ in Issue.record("commit called without a change") })
        #expect(!unchanged && changes == 1)
        _ = (receipt, changeReceipt)
    }
}
