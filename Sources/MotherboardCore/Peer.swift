import BusCore
import Foundation

// The broker's peers: how it names a connection, where a network one comes from, and what
// each is to it.

/// A ZeroMQ routing id: how the broker's ROUTER socket names a connected peer.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: Data
    /// Computed once: the broker looks peers up on every message, and hashing a `Data` through
    /// `Hasher` costs more than the lookup itself.
    private let digest: UInt64

    public init(_ bytes: Data) {
        self.bytes = bytes
        // FNV-1a over the routing id (5 bytes for libzmq's generated ids).
        self.digest = bytes.withUnsafeBytes { buffer in
            var digest: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in buffer { digest = (digest ^ UInt64(byte)) &* 0x100_0000_01b3 }
            return digest
        }
    }

    public static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        lhs.digest == rhs.digest && lhs.bytes == rhs.bytes
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(digest)
    }

    public var description: String { bytes.map { String(format: "%02x", $0) }.joined() }
}

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
