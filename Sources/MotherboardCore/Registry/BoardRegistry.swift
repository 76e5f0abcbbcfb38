import BusCodec
import BusCore
import Foundation

/// A board that registered and is alive. A class: the broker updates its clock and counters on
/// every message, in place.
final class LiveBoard {
    let registration: Registration
    let peer: PeerID
    let registeredAt: ContinuousClock.Instant
    // Updated on every message, on the broker's loop thread only: no exclusivity checks.
    @exclusivity(unchecked) var lastSeen: ContinuousClock.Instant
    /// When the broker heartbeats it next. Each board has its own phase within the interval, so
    /// that a broker with thousands of boards sends a few heartbeats on each tick rather than all
    /// of them at once (a burst that held the routing loop for milliseconds).
    var nextHeartbeat: ContinuousClock.Instant
    var activations = 0
    @exclusivity(unchecked) var commandsHandled = 0
    var actionsDelivered = 0
    /// Activations nobody waited for that it refused (`input.refused`), and the last one.
    var refusedInputs = 0
    var lastRefusedInput: String?
    /// Its message counters and round-trip histogram.
    let metrics: BoardMetrics
    /// Where its connection comes from when it is not the broker's ipc socket (tcp: address and
    /// key name); such a board whose link fails is kept as unreachable rather than dropped.
    let remote: RemotePeer?
    /// Where it runs when not here: its tcp peer, or the host a gateway registered it for.
    var host: String? { remote?.description ?? servedFrom }
    /// The host of another motherboard whose board a gateway (NATS) registered here; nil for a
    /// board of this motherboard's own (on its ipc socket, or connected to it over tcp).
    var servedFrom: String? { sharesConnection && remote == nil ? registration.host : nil }
    /// The remote principal it registered as (its key's name, or the one a gateway registered
    /// it for); nil for the broker's own user. The access policy is asked again about it when
    /// the policy changes.
    var principal: String?
    /// With at-least-once delivery (the manifest's), the deliveries an activation gets; nil for at most once.
    var maxDeliveries: Int?
    /// The process at the other end of its connection, as the kernel named it at registration
    /// (ipc only): while it runs, a silent board is busy, not gone.
    let process: Int32?
    /// Since when it is silent past the liveness timeout while its process runs (nil: it is not).
    var busySince: ContinuousClock.Instant?
    /// Its manifest entry's watchdog (nil: none), and when it fired (the process was sent SIGABRT).
    var watchdog: Duration?
    var watchdogFired: ContinuousClock.Instant?
    var watchdogKilled = false
    /// Its scope's UTF-8 then its id's, as a header names it, and where the id starts: compared
    /// with a command's target without making strings of it.
    private let headerName: [UInt8]
    private let headerScopeBytes: Int

    init(
        registration: Registration, peer: PeerID, registeredAt: ContinuousClock.Instant, lastSeen: ContinuousClock.Instant, metrics: BoardMetrics,
        remote: RemotePeer? = nil, process: Int32? = nil
    ) {
        self.remote = remote
        self.sharesConnection = registration.sharesConnection == true
        self.process = process
        self.metrics = metrics
        self.registration = registration
        self.peer = peer
        self.registeredAt = registeredAt
        self.lastSeen = lastSeen
        self.nextHeartbeat = registeredAt
        headerName = Array(registration.scope.name.utf8) + Array(registration.id.rawValue.utf8)
        headerScopeBytes = registration.scope.name.utf8.count
    }

    /// Whether a header's scope and id bytes name it.
    func isNamed(scope: UnsafeRawBufferPointer, id: UnsafeRawBufferPointer) -> Bool {
        headerName.withUnsafeBytes { name in
            UnsafeRawBufferPointer(rebasing: name[..<headerScopeBytes]).hasSameBytes(as: scope)
                && UnsafeRawBufferPointer(rebasing: name[headerScopeBytes...]).hasSameBytes(as: id)
        }
    }

    /// Sets the first heartbeat somewhere in the first `interval` after registration, by the
    /// connection's routing id (spread evenly over boards, the same for the same peer).
    func scheduleHeartbeats(every interval: Duration) {
        var spread: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in peer.bytes { spread = (spread ^ UInt64(byte)) &* 0x100_0000_01b3 }
        nextHeartbeat = registeredAt + interval * (Double(spread % 1024) / 1024)
    }

    /// Whether a heartbeat is due at `now`; if so, the next is scheduled one interval later (or
    /// one interval from now when ticks ran late).
    func takeHeartbeat(at now: ContinuousClock.Instant, every interval: Duration) -> Bool {
        guard nextHeartbeat <= now else { return false }
        nextHeartbeat = nextHeartbeat + interval
        if nextHeartbeat <= now { nextHeartbeat = now + interval }
        return true
    }

    /// Registered over a gateway's connection, which serves several boards: its messages name
    /// it (source and scope), and so do the broker's to it (target and scope).
    let sharesConnection: Bool
    var id: BoardID { registration.id }
    var scope: Scope { registration.scope }
    var name: ScopedName { ScopedName(scope: registration.scope, name: registration.id.rawValue) }
}

/// The live boards, by scoped name and by peer (a gateway's connection: by peer and the name its
/// messages give), with the two indexes a message may need: the
/// boards that own a store and the boards subscribed to an action, both by scoped name. They are
/// kept as boards come and go, so that routing a store operation or an action looks one entry
/// up rather than scanning every live board. A class: the broker reads it on every message,
/// and a struct's copy there retained each of its tables.
final class BoardRegistry {
    /// Peers of board instances that completed: their later messages are refused.
    @exclusivity(unchecked) private(set) var retiredPeers = BoundedSet<PeerID>(capacity: 1024)
    /// The refused registrations already logged, by id and connection.
    private var loggedRefusals = BoundedSet<String>(capacity: 1024)

    /// Connections whose board unregistered and has not registered again: a heartbeat of theirs
    /// is answered `ended`, not an invitation to register again.
    private var departedPeers = BoundedSet<PeerID>(capacity: 1024)

    /// A completed instance's connection: its later messages are refused.
    func retire(_ peer: PeerID) { retiredPeers.insert(peer) }

    /// A board that unregistered, on a connection of its own.
    func noteDeparture(_ peer: PeerID) { departedPeers.insert(peer) }

    /// `peer` registered a board again.
    func noteArrival(_ peer: PeerID) {
        if departedPeers.contains(peer) { departedPeers.remove(peer) }
    }

    func hasDeparted(_ peer: PeerID) -> Bool { departedPeers.contains(peer) }

    @inline(__always) func isRetired(_ peer: PeerID) -> Bool { retiredPeers.contains(peer) }

    /// Whether a refusal of `name` on `peer` is said for the first time (a helper asks again and
    /// again; the log says it once per id and connection).
    func isFirstRefusal(of name: ScopedName, on peer: PeerID) -> Bool { loggedRefusals.insert("\(name) \(peer)") }

    // Looked up on every message, on the broker's loop thread only: no exclusivity checks.
    @exclusivity(unchecked) private(set) var boards: [ScopedName: LiveBoard] = [:] {
        didSet { clearRecentTargets() }
    }
    /// What `boards` answered for the targets of recent commands, in a slot chosen by their id's
    /// bytes: a command's target is found without making its strings and hashing them.
    @exclusivity(unchecked) private var recentTargets = [LiveBoard?](repeating: nil, count: BoardRegistry.recentTargetSlots)
    private static let recentTargetSlots = 64
    @exclusivity(unchecked) private var hasRecentTargets = false
    @exclusivity(unchecked) private var boardsByPeer: [PeerID: LiveBoard] = [:] {
        didSet { recentByPeer.removeAll() }
    }
    /// What `boardsByPeer` answered for the connections whose messages came last (nil for a
    /// client's): the sender of every message is looked up.
    @exclusivity(unchecked) private var recentByPeer = PeerMemo<LiveBoard?>()
    /// The boards of each gateway connection (registered with `sharesConnection`).
    @exclusivity(unchecked) private(set) var gatewayBoards: [PeerID: [ScopedName: LiveBoard]] = [:]
    /// Whether any connection is a gateway's: checked first, so that a broker without gateways
    /// looks no connection up in their table.
    var hasGateways: Bool { !gatewayBoards.isEmpty }
    /// Owners of each store, in registration order (the first is the one that is used).
    private var storeOwners: [ScopedName: [LiveBoard]] = [:]
    /// The stores manifest boards have declared, and which board each belongs to: kept while the
    /// board is down, so that no remote principal without `serve` on the name takes it meanwhile.
    private(set) var storesOfManifestBoards: [ScopedName: ScopedName] = [:]
    /// Subscribers of each action name, sorted by id.
    private var actionSubscribers: [ScopedName: [LiveBoard]] = [:]

    /// Looks a board up by the id as written in a header, without validating it first: an
    /// invalid id is simply not found.
    subscript(name: ScopedName) -> LiveBoard? {
        boards[name]
    }

    /// The board a header names, from its scope's and id's bytes (ASCII: the caller checked),
    /// as `self[ScopedName(scope:name:)]` finds it.
    func board(scope: UnsafeRawBufferPointer, id: UnsafeRawBufferPointer) -> LiveBoard? {
        let slot = Self.recentTargetSlot(id)
        if let recent = recentTargets[slot], recent.isNamed(scope: scope, id: id) { return recent }
        let name = ScopedName(scope: Scope(String(decoding: scope, as: UTF8.self)), name: String(decoding: id, as: UTF8.self))
        guard let board = boards[name] else { return nil }
        recentTargets[slot] = board
        hasRecentTargets = true
        return board
    }

    /// The memo's slot for a target: its id's bytes folded (no hashing; a miss costs only the
    /// dictionary's look-up).
    static func recentTargetSlot(_ id: UnsafeRawBufferPointer) -> Int {
        var folded = id.count
        for byte in id { folded = folded &* 31 &+ Int(byte) }
        return folded & (recentTargetSlots - 1)
    }

    private func clearRecentTargets() {
        guard hasRecentTargets else { return }
        for slot in recentTargets.indices { recentTargets[slot] = nil }
        hasRecentTargets = false
    }

    /// The board of a connection that serves one board.
    func board(for peer: PeerID) -> LiveBoard? {
        if let recent = recentByPeer.value(for: peer) { return recent }
        let board = boardsByPeer[peer]
        recentByPeer.note(board, for: peer)
        return board
    }

    /// The board `name` on the gateway connection `peer`.
    func gatewayBoard(_ peer: PeerID, _ name: ScopedName) -> LiveBoard? {
        gatewayBoards[peer]?[name]
    }

    /// Whether `peer` is a gateway's connection (it serves boards registered with `sharesConnection`).
    @inline(__always) func isGateway(_ peer: PeerID) -> Bool {
        hasGateways && gatewayBoards[peer] != nil
    }

    func insert(_ board: LiveBoard) {
        if let previous = boards[board.name] { unlink(previous) }
        if let old = boardsByPeer[board.peer], old.name != board.name {
            boards[old.name] = nil
            unindex(old)
        }
        boards[board.name] = board
        if board.sharesConnection {
            gatewayBoards[board.peer, default: [:]][board.name] = board
        } else {
            boardsByPeer[board.peer] = board
        }
        for store in Set(board.registration.stores) {
            storeOwners[ScopedName(scope: board.scope, name: store), default: []].append(board)
        }
        for action in Set(board.registration.actions) {
            let key = ScopedName(scope: board.scope, name: action)
            var list = actionSubscribers[key] ?? []
            list.insert(board, at: list.firstIndex { board.id < $0.id } ?? list.endIndex)
            actionSubscribers[key] = list
        }
    }

    @discardableResult
    func remove(_ name: ScopedName) -> LiveBoard? {
        guard let board = boards.removeValue(forKey: name) else { return nil }
        unlink(board)
        return board
    }

    /// Takes `board` out of the peer indexes and the store and action indexes.
    private func unlink(_ board: LiveBoard) {
        if board.sharesConnection {
            gatewayBoards[board.peer]?[board.name] = nil
            if gatewayBoards[board.peer]?.isEmpty == true { gatewayBoards[board.peer] = nil }
        } else if boardsByPeer[board.peer] === board {
            boardsByPeer[board.peer] = nil
        }
        unindex(board)
    }

    private func unindex(_ board: LiveBoard) {
        for store in Set(board.registration.stores) {
            storeOwners.removeFromList(at: ScopedName(scope: board.scope, name: store)) { $0 === board }
        }
        for action in Set(board.registration.actions) {
            actionSubscribers.removeFromList(at: ScopedName(scope: board.scope, name: action)) { $0 === board }
        }
    }

    /// Live boards of a scope subscribed to an action name, sorted by id for a stable order.
    func subscribers(of action: String, in scope: Scope) -> [LiveBoard] {
        actionSubscribers[ScopedName(scope: scope, name: action)] ?? []
    }

    /// Notes the stores of `board`, a manifest board, as its own.
    func noteStores(ofManifestBoard board: LiveBoard) {
        for store in board.registration.stores { storesOfManifestBoards[ScopedName(scope: board.scope, name: store)] = board.name }
    }

    /// The live board that owns a store: the first to register of those that declare it.
    func owner(of store: ScopedName) -> LiveBoard? {
        storeOwners[store]?.first
    }

    /// All live boards, sorted by scope then id.
    var sorted: [LiveBoard] {
        boards.values.sorted { ($0.scope, $0.id.rawValue) < ($1.scope, $1.id.rawValue) }
    }
}
