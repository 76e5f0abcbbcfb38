import BusCore
import Foundation

/// A ZeroMQ routing id: how the broker's ROUTER socket names a connected peer.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: Data
    public init(_ bytes: Data) { self.bytes = bytes }
    public var description: String { bytes.map { String(format: "%02x", $0) }.joined() }
}

/// A board that registered and is alive. A class: the broker updates its clock and counters on
/// every message, in place.
final class LiveBoard {
    let registration: Registration
    let peer: PeerID
    let registeredAt: ContinuousClock.Instant
    var lastSeen: ContinuousClock.Instant
    var activations = 0
    var commandsHandled = 0
    var actionsDelivered = 0

    init(registration: Registration, peer: PeerID, registeredAt: ContinuousClock.Instant, lastSeen: ContinuousClock.Instant) {
        self.registration = registration
        self.peer = peer
        self.registeredAt = registeredAt
        self.lastSeen = lastSeen
    }

    var id: BoardID { registration.id }
    var scope: String { registration.scope }
    var name: ScopedName { ScopedName(scope: registration.scope, name: registration.id.rawValue) }
}

/// The live boards, by scoped name and by peer.
struct BoardRegistry {
    private(set) var boards: [ScopedName: LiveBoard] = [:]
    private var namesByPeer: [PeerID: ScopedName] = [:]

    /// Looks a board up by the id as written in a header, without validating it first: an
    /// invalid id is simply not found.
    subscript(name: ScopedName) -> LiveBoard? {
        boards[name]
    }

    func board(for peer: PeerID) -> LiveBoard? {
        namesByPeer[peer].flatMap { boards[$0] }
    }

    mutating func insert(_ board: LiveBoard) {
        if let previous = boards[board.name] { namesByPeer[previous.peer] = nil }
        if let oldName = namesByPeer[board.peer], oldName != board.name { boards[oldName] = nil }
        boards[board.name] = board
        namesByPeer[board.peer] = board.name
    }

    @discardableResult
    mutating func remove(_ name: ScopedName) -> LiveBoard? {
        guard let board = boards.removeValue(forKey: name) else { return nil }
        namesByPeer[board.peer] = nil
        return board
    }

    /// Live boards of a scope subscribed to an action name, sorted by id for a stable order.
    func subscribers(of action: String, in scope: String) -> [LiveBoard] {
        boards.values.filter { $0.scope == scope && $0.registration.actions.contains(action) }.sorted { $0.id < $1.id }
    }

    /// All live boards, sorted by scope then id.
    var sorted: [LiveBoard] {
        boards.values.sorted { ($0.scope, $0.id.rawValue) < ($1.scope, $1.id.rawValue) }
    }
}
