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
}

/// The live boards, by id and by peer.
struct BoardRegistry {
    private(set) var boards: [BoardID: LiveBoard] = [:]
    private var idsByPeer: [PeerID: BoardID] = [:]
    private var namesToIDs: [String: BoardID] = [:]

    subscript(id: BoardID) -> LiveBoard? {
        boards[id]
    }

    /// Looks a board up by the id as written in a header, without validating it first: an
    /// invalid id is simply not found.
    subscript(name name: String) -> LiveBoard? {
        namesToIDs[name].flatMap { boards[$0] }
    }

    func board(for peer: PeerID) -> LiveBoard? {
        idsByPeer[peer].flatMap { boards[$0] }
    }

    mutating func insert(_ board: LiveBoard) {
        if let previous = boards[board.id] { idsByPeer[previous.peer] = nil }
        if let oldID = idsByPeer[board.peer], oldID != board.id {
            boards[oldID] = nil
            namesToIDs[oldID.rawValue] = nil
        }
        boards[board.id] = board
        idsByPeer[board.peer] = board.id
        namesToIDs[board.id.rawValue] = board.id
    }

    @discardableResult
    mutating func remove(_ id: BoardID) -> LiveBoard? {
        guard let board = boards.removeValue(forKey: id) else { return nil }
        idsByPeer[board.peer] = nil
        namesToIDs[id.rawValue] = nil
        return board
    }


    /// Live boards subscribed to an action name, sorted by id for a stable delivery order.
    func subscribers(of action: String) -> [LiveBoard] {
        boards.values.filter { $0.registration.actions.contains(action) }.sorted { $0.id < $1.id }
    }
}
