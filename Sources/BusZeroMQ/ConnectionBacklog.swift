import BusCore
import CBoardBusLinux
import CBoardBusZeroMQ
import FoundationEssentials
import Glibc

/// Bounds the bytes a router queues toward one peer that does not read them.
///
/// libzmq bounds a peer's outgoing pipe in messages (`ZMQ_SNDHWM`), not bytes, and does not say
/// how full a pipe is, so a client that sends requests and never reads their replies would make
/// the broker hold every large reply. The kernel
/// does tell how much waits unread in the connection's socket (`SIOCOUTQ` on the descriptor
/// libzmq reports with `ZMQ_SRCFD`): while that stays above half the socket's send buffer the
/// peer has not caught up, and everything queued since it last did is still held, in libzmq's
/// pipe. Less than half is not enough: a Unix socket takes more again (`EPOLLOUT`, which libzmq's
/// I/O thread waits for once a write was refused) only once a quarter of it or less waits, so a
/// peer that stopped reading with a third of it unread leaves it so for ever, and libzmq holds
/// everything after it. Its socket is *frozen*: the same bytes wait at every look, it does not
/// take more, and it has not since the last look. A socket that streams to a peer reading as
/// fast as it is written can look the same at one look (one message waiting), but not for long;
/// so a socket frozen for ``frozenTicks`` ticks counts as not caught up. The backlog counts the
/// bytes of large messages queued toward each peer since it was last seen caught up; from half
/// the budget on it looks at every large message, and past the budget without a look that found
/// the peer caught up, the peer is *stalled*: further large messages to it are refused (the caller drops them
/// and counts them), and the router answers its new requests `busy`, until it is seen caught up
/// again.
///
/// Small messages are not counted (the per-message limit of the pipe bounds them): the routing
/// of small messages pays nothing. Used on the router's socket thread only. Keyed by
/// ``PeerID`` (not generic: its look-ups, made for every message, are specialised and inlined
/// here, where a generic class's would run through the standard library's generic dictionary).
package final class ConnectionBacklog {
    package typealias Peer = PeerID

    /// Messages at least this large are counted.
    package static var countedMessageBytes: Int { 4096 }

    private struct PeerState {
        var descriptor: Int32
        var queued = 0
        var lastSeen: UInt64
        /// What waited in its socket when it was last seen moving (-1: not yet), and the tick.
        var frozenLevel: Int32 = -1
        var frozenSince: UInt64 = 0
    }

    /// Ticks a socket less than half full may stay frozen before its peer counts as not caught
    /// up (2 s at the broker's 100 ms ticks; a healthy stream was seen frozen for 2 at most).
    package static var frozenTicks: UInt64 { 20 }

    /// Bytes that may wait toward one peer before it counts as stalled.
    package let budget: Int
    private var peers: [Peer: PeerState] = [:]
    // Looked at for every message (on the router's thread only): no exclusivity checks.
    @exclusivity(unchecked) private var descriptors: [Peer: Int32] = [:] {
        didSet { recentDescriptors.removeAll() }
    }
    /// The descriptors of the peers whose messages came last, as `descriptors` holds them.
    @exclusivity(unchecked) private var recentDescriptors = PeerMemo<Int32>()
    @exclusivity(unchecked) @usableFromInline package private(set) var stalled: Set<Peer> = []
    /// Large messages refused because their peer was stalled.
    package private(set) var refusedMessages = 0
    private var ticks: UInt64 = 0
    /// Watches the counted peers' sockets for the moments they take more (edge-triggered).
    private let writable = epoll_create1(Int32(EPOLL_CLOEXEC))
    /// Descriptors whose socket took more since their last look.
    private var tookMore: Set<Int32> = []
    /// Where `writable`'s events are read into.
    private var events = [epoll_event](repeating: epoll_event(), count: 64)

    package init(budget: Int) {
        self.budget = budget
    }

    deinit {
        if writable >= 0 { close(writable) }
    }

    /// Notes the connection a peer's message came in on (cheap when it did not change). Asked on
    /// every message, not once per peer: a peer that sets its own routing id (libzmq 4.3 takes any,
    /// even one shaped like those it makes) can leave and come back under the same id on a new
    /// connection, and a stale descriptor would watch a closed or another peer's socket.
    /// Returns whether the descriptor is new for the peer (its first message, or a new connection).
    @discardableResult
    package func noteReceived(from peer: Peer, descriptor: Int32) -> Bool {
        guard descriptor >= 0, recentDescriptors.value(for: peer) != descriptor else { return false }
        defer { recentDescriptors.note(descriptor, for: peer) }
        guard descriptors[peer] != descriptor else { return false }
        descriptors[peer] = descriptor
        return true
    }

    /// Whether a message of `bytes` may be queued toward `peer`; counts it when it may.
    package func mayQueue(_ bytes: Int, to peer: Peer) -> Bool {
        guard bytes >= Self.countedMessageBytes else { return true }
        if stalled.contains(peer) {
            refusedMessages += 1
            return false
        }
        guard let descriptor = descriptors[peer] else { return true }
        var entry = peers[peer] ?? PeerState(descriptor: -1, lastSeen: ticks)
        if entry.descriptor != descriptor {
            entry.descriptor = descriptor
            entry.frozenLevel = -1
            watch(descriptor)
        }
        entry.queued += bytes
        entry.lastSeen = ticks
        if entry.queued > budget / 2 {
            // Past half the budget, the socket is looked at for every large message rather than
            // at the next tick; the peer is stalled only when none of those looks found it caught
            // up before the budget was spent. One look can catch a peer that reads as fast as it
            // is sent with its socket momentarily half full; many in a row cannot.
            noteWhatTookMore()
            if hasCaughtUp(&entry) {
                entry.queued = bytes
            } else if entry.queued > budget {
                stalled.insert(peer)
            }
        }
        peers[peer] = entry
        return true
    }

    /// Whether the router should refuse `peer`'s new requests (`busy`).
    @inlinable
    package func isStalled(_ peer: Peer) -> Bool {
        !stalled.isEmpty && stalled.contains(peer)
    }

    /// About every tick: peers seen caught up are counted from zero again (and no longer
    /// stalled); those long idle are forgotten.
    package func tick() {
        ticks += 1
        noteWhatTookMore()
        for (peer, var entry) in peers {
            // A closed descriptor counts as caught up (its peer is gone).
            guard hasCaughtUp(&entry) else {
                peers[peer] = entry
                continue
            }
            stalled.remove(peer)
            entry.queued = 0
            peers[peer] = ticks - entry.lastSeen > 50 ? nil : entry
        }
        tookMore.removeAll(keepingCapacity: true)
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

    /// Bytes counted toward `peer` since it was last seen caught up.
    package func queuedBytes(to peer: Peer) -> Int {
        peers[peer]?.queued ?? 0
    }

    /// Watches `descriptor` for the moments its socket takes more. A descriptor closed since
    /// is no longer watched (the kernel drops it), so one the kernel gave again is added anew.
    private func watch(_ descriptor: Int32) {
        var event = epoll_event(events: EPOLLOUT.rawValue | EPOLLET.rawValue, data: epoll_data_t(fd: descriptor))
        _ = epoll_ctl(writable, EPOLL_CTL_ADD, descriptor, &event)
    }

    /// Whether the peer has caught up (see the type's description), noting whether its socket
    /// moved; true when it cannot be told, or the descriptor is closed. Call
    /// ``noteWhatTookMore()`` before.
    private func hasCaughtUp(_ entry: inout PeerState) -> Bool {
        var waiting: Int32 = 0
        guard ioctl(entry.descriptor, UInt(TIOCOUTQ), &waiting) == 0 else { return true }
        var capacity: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(entry.descriptor, SOL_SOCKET, SO_SNDBUF, &capacity, &length) == 0, capacity > 0 else { return true }
        guard waiting < capacity / 2 else {
            entry.frozenLevel = -1
            return false
        }
        let tookMoreSinceLastLook = tookMore.remove(entry.descriptor) != nil
        if tookMoreSinceLastLook || waiting != entry.frozenLevel || Self.takesMore(entry.descriptor) {
            (entry.frozenLevel, entry.frozenSince) = (waiting, ticks)
            return true
        }
        return ticks - entry.frozenSince < Self.frozenTicks
    }

    /// Collects the sockets that took more since the last call.
    private func noteWhatTookMore() {
        while true {
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(writable, $0.baseAddress, Int32($0.count), 0) }
            guard count > 0 else { return }
            for event in events[0..<Int(count)] { tookMore.insert(event.data.fd) }
            guard count == events.count else { return }
        }
    }

    /// Whether the socket takes more now (`POLLOUT`), is broken or closed, or it cannot be told.
    static func takesMore(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
        // 0: not writable. 1: writable, or POLLERR, POLLHUP, POLLNVAL (closed). -1: not told.
        return poll(&entry, 1, 0) != 0
    }
}
