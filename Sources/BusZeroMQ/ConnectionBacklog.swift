import Foundation

/// Bounds the bytes a router queues toward one peer that does not read them.
///
/// libzmq bounds a peer's outgoing pipe in messages (`ZMQ_SNDHWM`), not bytes, and does not say
/// how full a pipe is, so a client that sends requests and never reads their replies would make
/// the broker hold every large reply (600 replies of 512 KiB grew a broker by 330 MB). The kernel
/// does tell how much waits unread in the connection's socket (`SIOCOUTQ` on the descriptor
/// libzmq reports with `ZMQ_SRCFD`): while that stays above half the socket's send buffer the
/// peer has not caught up, and everything queued since it last did is still held, in libzmq's
/// pipe. So the backlog counts the bytes of large messages queued toward each peer since its
/// socket was last seen half empty; past the budget the peer is *stalled*: further large messages
/// to it are refused (the caller drops them and counts them), and the router answers its new
/// requests `busy`, until its socket is seen half empty again.
///
/// Small messages are not counted (the per-message limit of the pipe bounds them): the routing
/// of small messages pays nothing. Used on the router's socket thread only. Keyed by the
/// router's own peer type (the broker's hashes its routing id once per message, not per look-up).
package final class ConnectionBacklog<Peer: Hashable> {
    /// Messages at least this large are counted.
    package static var countedMessageBytes: Int { 4096 }

    private struct PeerState {
        var descriptor: Int32
        var queued = 0
        var lastSeen: UInt64
    }

    /// Bytes that may wait toward one peer before it counts as stalled.
    package let budget: Int
    private var peers: [Peer: PeerState] = [:]
    private var descriptors: [Peer: Int32] = [:]
    package private(set) var stalled: Set<Peer> = []
    /// Large messages refused because their peer was stalled.
    package private(set) var refusedMessages = 0
    private var ticks: UInt64 = 0

    package init(budget: Int) {
        self.budget = budget
    }

    /// Notes the connection a peer's message came in on (cheap when it did not change). Asked on
    /// every message, not once per peer: a peer that sets its own routing id (libzmq 4.3 takes any,
    /// even one shaped like those it makes) can leave and come back under the same id on a new
    /// connection, and a stale descriptor would watch a closed or another peer's socket.
    package func noteReceived(from peer: Peer, descriptor: Int32) {
        guard descriptor >= 0, descriptors[peer] != descriptor else { return }
        descriptors[peer] = descriptor
    }

    /// Whether a message of `bytes` may be queued toward `peer`; counts it when it may.
    package func mayQueue(_ bytes: Int, to peer: Peer) -> Bool {
        guard bytes >= Self.countedMessageBytes else { return true }
        if stalled.contains(peer) {
            refusedMessages += 1
            return false
        }
        guard let descriptor = descriptors[peer] else { return true }
        var entry = peers[peer] ?? PeerState(descriptor: descriptor, lastSeen: ticks)
        entry.descriptor = descriptor
        entry.queued += bytes
        entry.lastSeen = ticks
        if entry.queued > budget {
            // Over the budget: look at the socket now rather than at the next tick.
            if Self.isHalfEmpty(descriptor) {
                entry.queued = bytes
            } else {
                stalled.insert(peer)
            }
        }
        peers[peer] = entry
        return true
    }

    /// Whether the router should refuse `peer`'s new requests (`busy`).
    package func isStalled(_ peer: Peer) -> Bool {
        !stalled.isEmpty && stalled.contains(peer)
    }

    /// About every tick: peers whose socket drained are counted from zero again (and no longer
    /// stalled); peers long idle and gone are forgotten.
    package func tick() {
        ticks += 1
        for (peer, entry) in peers {
            let drained = Self.isHalfEmpty(entry.descriptor)
            if drained || Self.isClosed(entry.descriptor) {
                stalled.remove(peer)
                if ticks - entry.lastSeen > 50 { peers[peer] = nil } else { peers[peer]?.queued = 0 }
            }
        }
        // Descriptors of peers that left are reused by the kernel; forget them now and then
        // (a peer's next message notes its descriptor again).
        if ticks % 600 == 0 { descriptors = descriptors.filter { peers[$0.key] != nil } }
    }

    /// A peer that is gone.
    package func forget(_ peer: Peer) {
        peers[peer] = nil
        descriptors[peer] = nil
        stalled.remove(peer)
    }

    /// Bytes counted toward `peer` since its socket was last seen half empty.
    package func queuedBytes(to peer: Peer) -> Int {
        peers[peer]?.queued ?? 0
    }

    /// Whether less than half the socket's send buffer waits unread (or it cannot be told).
    static func isHalfEmpty(_ descriptor: Int32) -> Bool {
        var waiting: Int32 = 0
        guard ioctl(descriptor, UInt(TIOCOUTQ), &waiting) == 0 else { return true }
        var capacity: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &capacity, &length) == 0, capacity > 0 else { return true }
        return waiting < capacity / 2
    }

    private static func isClosed(_ descriptor: Int32) -> Bool {
        fcntl(descriptor, F_GETFD) < 0
    }
}
