import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// The registry's indexes (store owners, action subscribers) against what a scan of the live
/// boards finds, as boards register, re-register on another connection, and leave.
@Suite("Board registry")
struct BoardRegistryTests {
    let metrics = BrokerMetrics()
    let now = ContinuousClock.now

    func board(_ id: String, scope: Scope = .root, peer: UInt8, actions: [String] = [], stores: [String] = []) -> LiveBoard {
        let registration = Registration(id: try! BoardID(validating: id), pid: 1, scope: scope, actions: actions, stores: stores)
        return LiveBoard(
            registration: registration, peer: PeerID(Data([peer])), registeredAt: now, lastSeen: now,
            metrics: metrics.board(ScopedName(scope: scope, name: id)))
    }

    /// What the indexes must agree with: a scan over every live board.
    func scanned(_ registry: BoardRegistry, action: String, in scope: Scope) -> [String] {
        registry.boards.values.filter { $0.scope == scope && $0.registration.actions.contains(action) }.map(\.id.rawValue).sorted()
    }

    @Test func subscribersAreTheBoardsOfTheScopeThatDeclareTheActionSortedById() {
        let registry = BoardRegistry()
        registry.insert(board("c.sub", peer: 1, actions: ["logout", "login"]))
        registry.insert(board("a.sub", peer: 2, actions: ["logout"]))
        registry.insert(board("b.other", peer: 3, actions: ["other"]))
        registry.insert(board("a.inner", scope: "inner", peer: 4, actions: ["logout"]))
        #expect(registry.subscribers(of: "logout", in: .root).map(\.id.rawValue) == ["a.sub", "c.sub"])
        #expect(registry.subscribers(of: "logout", in: "inner").map(\.id.rawValue) == ["a.inner"])
        #expect(registry.subscribers(of: "nobody", in: .root).isEmpty)
        for action in ["logout", "login", "other"] {
            #expect(registry.subscribers(of: action, in: .root).map(\.id.rawValue) == scanned(registry, action: action, in: .root))
        }
        registry.remove(ScopedName(scope: .root, name: "a.sub"))
        #expect(registry.subscribers(of: "logout", in: .root).map(\.id.rawValue) == ["c.sub"])
    }

    @Test func aBoardThatRegistersAgainIsIndexedOnceWithItsNewRegistration() {
        let registry = BoardRegistry()
        registry.insert(board("demo.sub", peer: 1, actions: ["logout"], stores: ["cart"]))
        // Same id on a new connection, now declaring something else: the old entry goes.
        registry.insert(board("demo.sub", peer: 2, actions: ["login"]))
        #expect(registry.subscribers(of: "logout", in: .root).isEmpty)
        #expect(registry.subscribers(of: "login", in: .root).map(\.peer) == [PeerID(Data([2]))])
        #expect(registry.owner(of: ScopedName(scope: .root, name: "cart")) == nil)
        // Another id on the same connection replaces the board of that connection.
        registry.insert(board("demo.renamed", peer: 2, stores: ["cart"]))
        #expect(registry.subscribers(of: "login", in: .root).isEmpty)
        #expect(registry.owner(of: ScopedName(scope: .root, name: "cart"))?.id == "demo.renamed")
        #expect(registry.boards.count == 1)
    }

    /// The board of a connection, as its messages find it (through the memo of recent senders),
    /// follows every change: a client's connection that registers a board, the board leaving,
    /// another board on the same connection, and a board taking the place of one of the same id.
    @Test func theBoardOfAConnectionFollowsEveryRegistrationAndRemoval() {
        let registry = BoardRegistry()
        let peer = PeerID(Data([7]))
        #expect(registry.board(for: peer) == nil)  // a client's: noted as none
        #expect(registry.board(for: peer) == nil)
        registry.insert(board("demo.first", peer: 7))
        #expect(registry.board(for: peer)?.id == "demo.first")
        registry.remove(ScopedName(scope: .root, name: "demo.first"))
        #expect(registry.board(for: peer) == nil)
        registry.insert(board("demo.second", peer: 7))
        #expect(registry.board(for: peer)?.id == "demo.second")
        registry.insert(board("demo.third", peer: 7))
        #expect(registry.board(for: peer)?.id == "demo.third")
        // The same id again, from another connection: the first connection has no board left.
        registry.insert(board("demo.third", peer: 8))
        #expect(registry.board(for: peer) == nil)
        #expect(registry.board(for: PeerID(Data([8])))?.id == "demo.third")
    }

    /// A command's target, as its header's bytes name it (through the memo of recent targets),
    /// is the board `boards` has under that name after every change, and only under that name:
    /// not one whose scope and id split the same bytes elsewhere, nor one of another scope.
    @Test func aTargetNamedByItsBytesIsTheBoardOfThatNameAfterEveryChange() {
        let registry = BoardRegistry()
        func found(_ scope: String, _ id: String) -> LiveBoard? {
            Array(scope.utf8).withUnsafeBytes { scope in Array(id.utf8).withUnsafeBytes { registry.board(scope: scope, id: $0) } }
        }
        #expect(found("", "demo.echo") == nil)
        let first = board("demo.echo", peer: 1)
        registry.insert(first)
        #expect(found("", "demo.echo") === first)
        #expect(found("", "demo.echo") === first)
        #expect(found("inner", "demo.echo") == nil)
        #expect(found("", "demo.ech") == nil)
        // The same bytes split another way between scope and id, where both ids take one slot.
        #expect(Array("eaa".utf8).withUnsafeBytes(BoardRegistry.recentTargetSlot) == Array("aa".utf8).withUnsafeBytes(BoardRegistry.recentTargetSlot))
        let split = board("eaa", scope: "x", peer: 2)
        registry.insert(split)
        #expect(found("x", "eaa") === split)
        #expect(found("xe", "aa") == nil)
        // The board leaves, comes back on another connection, and one of the same id in a scope.
        registry.remove(ScopedName(scope: .root, name: "demo.echo"))
        #expect(found("", "demo.echo") == nil)
        let again = board("demo.echo", peer: 3)
        registry.insert(again)
        #expect(found("", "demo.echo") === again)
        let inner = board("demo.echo", scope: "inner", peer: 4)
        registry.insert(inner)
        #expect(found("inner", "demo.echo") === inner)
        #expect(found("", "demo.echo") === again)
        // Many names, more than the memo has slots: every one is found as itself.
        let many = (0..<200).map { board("demo.board\($0)", peer: UInt8(10 + $0 % 200)) }
        for board in many { registry.insert(board) }
        for _ in 0..<2 {
            for board in many { #expect(found("", board.id.rawValue) === board) }
        }
    }

    /// Boards heartbeat at their own phase within the interval (not all on one tick), once an
    /// interval, and a tick that ran late does not make a burst of catch-up heartbeats.
    @Test func heartbeatsAreSpreadOverTheIntervalAndNeverBunchUpAfterALateTick() {
        let interval = Duration.milliseconds(500)
        let boards = (0..<64).map { board("spread.b\($0)", peer: UInt8($0)) }
        boards.forEach { $0.scheduleHeartbeats(every: interval) }
        let firstTick = boards.filter { $0.takeHeartbeat(at: now + .milliseconds(100), every: interval) }.count
        #expect(firstTick > 0 && firstTick < boards.count / 2)
        #expect(boards.allSatisfy { $0.takeHeartbeat(at: now + interval, every: interval) || $0.nextHeartbeat > now + interval })
        let one = boards[0]
        let late = now + .seconds(10)
        #expect(one.takeHeartbeat(at: late, every: interval))
        #expect(!one.takeHeartbeat(at: late, every: interval))
        #expect(one.nextHeartbeat == late + interval)
    }

    @Test func aStoreIsOwnedByTheFirstToRegisterAndPassesOnWhenItLeaves() {
        let registry = BoardRegistry()
        let cart = ScopedName(scope: .root, name: "cart")
        registry.insert(board("z.first", peer: 1, stores: ["cart", "cart"]))
        registry.insert(board("a.second", peer: 2, stores: ["cart"]))
        registry.insert(board("inner.owner", scope: "inner", peer: 3, stores: ["cart"]))
        #expect(registry.owner(of: cart)?.id == "z.first")
        #expect(registry.owner(of: ScopedName(scope: "inner", name: "cart"))?.id == "inner.owner")
        #expect(registry.owner(of: ScopedName(scope: .root, name: "missing")) == nil)
        registry.remove(ScopedName(scope: .root, name: "z.first"))
        #expect(registry.owner(of: cart)?.id == "a.second")
        registry.remove(ScopedName(scope: .root, name: "a.second"))
        #expect(registry.owner(of: cart) == nil)
    }
}

/// The flow table's indexes against the order and ownership rules a scan gave.
@Suite("Flow table")
struct FlowTableTests {
    @Test func matchingFlowsRunInRegistrationOrderAcrossSourcesAndOwners() throws {
        var table = FlowTable()
        table.add(scope: .root, owner: nil, spec: FlowSpec(sources: ["pay"], target: "audit"))  // 1
        table.add(scope: .root, owner: "x.owner", spec: FlowSpec(sources: ["other", "pay", "pay"], target: "a"))  // 2
        table.add(scope: "inner", owner: nil, spec: FlowSpec(sources: ["pay"], target: "b"))  // 3
        table.add(scope: .root, owner: "y.owner", spec: FlowSpec(sources: ["pay"], trigger: .completion, target: "c"))  // 4
        table.add(scope: .root, owner: "x.owner", spec: FlowSpec(sources: ["pay"], target: "d"))  // 5
        #expect(table.matching(scope: .root, source: "pay", trigger: .output).map(\.id) == [1, 2, 5])
        #expect(table.matching(scope: .root, source: "pay", trigger: .completion).map(\.id) == [4])
        #expect(table.matching(scope: "inner", source: "pay", trigger: .output).map(\.id) == [3])
        #expect(table.matching(scope: .root, source: "other", trigger: .output).map(\.id) == [2])
        #expect(table.matching(scope: .root, source: "nobody", trigger: .output).isEmpty)

        table.countRun(2)
        table.countRun(2)
        #expect(table.flows.map(\.runs) == [0, 2, 0, 0, 0])

        // Only the owner removes its flow; the broker's own user's tool removes any; a remote
        // principal's client none (it has no board of its own).
        #expect(throws: BusError.self) { try table.remove(id: 2, requester: "y.owner", isAdministrator: false) }
        #expect(throws: BusError.self) { try table.remove(id: 2, requester: nil, isAdministrator: false) }
        try table.remove(id: 2, requester: "x.owner", isAdministrator: false)
        #expect(throws: BusError.self) { try table.remove(id: 2, requester: nil, isAdministrator: true) }
        #expect(table.matching(scope: .root, source: "other", trigger: .output).isEmpty)

        // A board that leaves takes its flows, and only its own, in its scope only.
        table.add(scope: "inner", owner: "x.owner", spec: FlowSpec(sources: ["pay"], target: "e"))  // 6
        table.removeFlows(ownedBy: ScopedName(scope: .root, name: "x.owner"))
        #expect(table.flows.map(\.id) == [1, 3, 4, 6])
        #expect(table.matching(scope: .root, source: "pay", trigger: .output).map(\.id) == [1])
        #expect(table.matching(scope: "inner", source: "pay", trigger: .output).map(\.id) == [3, 6])
        // Ids are never reused.
        #expect(table.add(scope: .root, owner: nil, spec: FlowSpec(sources: ["pay"])).id == 7)
    }

    /// Flows are kept by id with holes where removed ones were, squeezed out now and then: every
    /// look-up, listing and count stays right through many removals, in order and out of it.
    @Test func manyBoardsLeavingInAnyOrderLeaveTheRestIntact() throws {
        var table = FlowTable()
        let boards = try (0..<300).map { try BoardID(validating: "b\($0)") }
        for board in boards { table.add(scope: .root, owner: board, spec: FlowSpec(sources: [board, "hub"], target: "sink")) }
        var live = Array(1...300)  // flow n belongs to board n - 1
        // The first half leave in registration order, then the rest in a scrambled one.
        var order = Array(0..<150)
        var rest = Array(150..<300)
        var seed: UInt64 = 42
        while !rest.isEmpty {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            order.append(rest.remove(at: Int(seed >> 33) % rest.count))
        }
        for (step, index) in order.enumerated() {
            table.removeFlows(ownedBy: ScopedName(scope: .root, name: boards[index].rawValue))
            live.removeAll { $0 == index + 1 }
            if step % 37 == 0 || live.count < 3 {
                #expect(table.count == live.count)
                #expect(table.flows.map(\.id.rawValue) == live.map(UInt64.init))
                #expect(table.matching(scope: .root, source: "hub", trigger: .output).map(\.id.rawValue) == live.map(UInt64.init))
                if let first = live.first {
                    #expect(table.matching(scope: .root, source: boards[first - 1].rawValue, trigger: .output).map(\.id.rawValue) == [UInt64(first)])
                }
                #expect(table.matching(scope: .root, source: boards[index].rawValue, trigger: .output).isEmpty)
            }
        }
        #expect(table.count == 0 && table.flows.isEmpty)
        #expect(table.add(scope: .root, owner: nil, spec: FlowSpec(sources: ["hub"])).id == 301)
        #expect(table.matching(scope: .root, source: "hub", trigger: .output).map(\.id) == [301])
    }
}
