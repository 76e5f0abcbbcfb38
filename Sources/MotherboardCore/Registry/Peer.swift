import BusCore
import Foundation

// The broker's peers: where a network connection comes from, and what each is to it (how it
// names a connection, ``PeerID``, is BusCore's).

/// The routing id type, named here too for code that imports only MotherboardCore (BusCore
/// defines it, for the socket layer).
public typealias PeerID = BusCore.PeerID

/// Where a connection that is not on the ipc socket comes from: a tcp peer's address and the
/// name its key has in the allow-list (the ZAP handler's user id).
public struct RemotePeer: Sendable, Hashable, CustomStringConvertible {
    public var address: String
    public var keyName: String

    public init(address: String, keyName: String) {
        self.address = address
        self.keyName = keyName
    }

    /// `10.0.0.2 (edge-b)`, as `list` shows it.
    public var description: String { "\(address) (\(keyName))" }
}

/// What a connection is to the broker, known from the connection itself (its registration, its
/// attach), never from what a message says.
package enum PeerKind: Sendable, Hashable {
    /// A registered board: its registration bound this connection to its id and scope.
    case board
    /// The connection of a board instance that completed: only control is admitted from it.
    case retired
    /// This motherboard's uplink (it serves the boards of a parent motherboard here).
    case uplink
    /// A gateway's connection (it registered boards that share it), in a message that names none
    /// of them.
    case gateway
    /// Anything else: busctl, a `BusClient`, a monitor, a board not yet registered.
    case client
}
