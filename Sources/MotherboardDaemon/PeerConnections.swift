import BusCore
import Glibc

/// The connection each peer's messages came on, to tell when it closed: ZeroMQ says nothing when
/// a peer leaves, so what the broker keeps for a peer that is not a board (store subscriptions,
/// requests it waits for, monitors) would stay. A descriptor is remembered with its socket's
/// inode, so that a descriptor the kernel gave again to another connection (or a file) does not
/// pass for the old one. On the routing loop's thread only.
final class PeerConnections {
    private var connections: [PeerID: (descriptor: Int32, inode: UInt64)] = [:]

    /// Peers remembered now.
    var count: Int { connections.count }

    /// `peer`'s message came on `descriptor`, a new one for it (the backlog says when).
    func note(_ peer: PeerID, descriptor: Int32) {
        guard descriptor >= 0, let inode = Self.socketInode(descriptor) else { return }
        connections[peer] = (descriptor, inode)
    }

    /// The peers whose connection closed since they were noted: forgotten here, and returned.
    func takeClosed() -> [PeerID] {
        var closed: [PeerID] = []
        for (peer, connection) in connections where Self.socketInode(connection.descriptor) != connection.inode {
            closed.append(peer)
        }
        for peer in closed { connections[peer] = nil }
        return closed
    }

    /// The inode of the socket open on `descriptor`; nil when it is closed or no socket.
    static func socketInode(_ descriptor: Int32) -> UInt64? {
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK else { return nil }
        return UInt64(status.st_ino)
    }
}
