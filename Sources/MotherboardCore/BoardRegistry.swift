import BusCore
import Foundation

/// A ZeroMQ routing id: how the broker's ROUTER socket names a connected peer.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: Data
    public init(_ bytes: Data) { self.bytes = bytes }
    public var description: String { bytes.map { String(format: "%02x", $0) }.joined() }
}

/// A board that registered and is alive.
struct LiveBoard {
    var registration: Registration
    var peer: PeerID
    var registeredAt: ContinuousClock.Instant
    var lastSeen: ContinuousClock.Instant
    var activations = 0
    var commandsHandled = 0
    var actionsDelivered = 0

    var id: BoardID { registration.id }
}

/// The live boards, by id and by peer.
struct BoardRegistry {
    private(set) var boards: [BoardID: LiveBoard] = [:]
    private var idsByPeer: [PeerID: BoardID] = [:]

    subscript(id: BoardID) -> LiveBoard? {
        boards[id]
    }

    func board(for peer: PeerID) -> LiveBoard? {
        idsByPeer[peer].flatMap { boards[$0] }
    }

    mutating func insert(_ board: LiveBoard) {
        if let previous = boards[board.id] { idsByPeer[previous.peer] = nil }
        if let oldID = idsByPeer[board.peer], oldID != board.id { boards[oldID] = nil }
        boards[board.id] = board
        idsByPeer[board.peer] = board.id
    }

    @discardableResult
    mutating func remove(_ id: BoardID) -> LiveBoard? {
        guard let board = boards.removeValue(forKey: id) else { return nil }
        idsByPeer[board.peer] = nil
        return board
    }

    mutating func update(_ id: BoardID, _ change: (inout LiveBoard) -> Void) {
        guard var board = boards[id] else { return }
        change(&board)
        boards[id] = board
    }

    /// Live boards subscribed to an action name, sorted by id for a stable delivery order.
    func subscribers(of action: String) -> [LiveBoard] {
        boards.values.filter { $0.registration.actions.contains(action) }.sorted { $0.id < $1.id }
    }
}
