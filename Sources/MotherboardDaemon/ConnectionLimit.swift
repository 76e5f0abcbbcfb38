import BusCore
import MotherboardCore
import MotherboardGateways
import BusZeroMQ
import CBoardBusAcceptGuard
import Foundation
import Logging
import Synchronization

/// How many connections the broker's endpoints hold, and whether one more may stay.
///
/// libzmq accepts every connection its listeners see and asserts (aborting the process) when its
/// ipc listener's `accept()` fails with `EMFILE`; its tcp listener spins instead. So the broker
/// keeps its connections below a cap derived from its descriptor limit, with a reserve for its
/// own work (board launches, log and pid files, the metrics port), and closes any connection
/// beyond it. tcp endpoints together get at most three quarters of the cap, so that peers from
/// the network can never take all the room of the local boards; and at most
/// ``maximumUnauthenticated`` tcp connections may be on their way through the handshake at once
/// (accepted less than ``handshakeAllowance`` ago, no message yet; libzmq closes a connection
/// whose handshake takes longer): libzmq buffers a frame of up to `ZMQ_MAXMSGSIZE` for a peer
/// before it knows its key, so peers without a key can make the broker hold at most that many
/// frames, each for the 5 s of a handshake.
///
/// No I/O: the connection watch reports each connection accepted and ended, with its descriptor.
struct ConnectionLimit {
    /// Connections of every endpoint together.
    let maximum: Int
    /// Connections of tcp endpoints together.
    let networkMaximum: Int
    /// The endpoint of each open connection (refused ones too, until they are closed: they hold a
    /// descriptor until then), by descriptor.
    private(set) var endpoints: [Int32: String] = [:]
    private(set) var networkCount = 0
    /// The CURVE key each tcp connection authenticated with (its allow-list name and the key),
    /// once a message came on it.
    private(set) var keys: [Int32: ConnectionKey] = [:]
    /// Keys noted for a descriptor whose acceptance has not been reported yet: the connection
    /// watch runs on its own thread and can report an accept after the routing loop has seen
    /// the connection's first message, which is the only one that notes its key. Applied when
    /// the accept comes (at most one per descriptor). Not for a descriptor whose connection ended
    /// since its last accept: a key noted there is more likely the ended connection's (its first
    /// message read late) than the next one's, and must not pass to the next.
    private(set) var keysBeforeAccept: [Int32: ConnectionKey] = [:]
    /// Descriptors whose connection ended and that no accept has been reported on since.
    private var endedSinceAccept: Set<Int32> = []
    /// tcp connections that may still be in their handshake, with when they were accepted.
    private(set) var handshaking: [Int32: ContinuousClock.Instant] = [:]
    /// tcp connections in their handshake, at most, at once.
    static let maximumUnauthenticated = 16
    /// How long a connection may be in its handshake: libzmq's `ZMQ_HANDSHAKE_IVL` (5 s, set by
    /// the broker) and a margin; one open longer is through it.
    static let handshakeAllowance: Duration = .milliseconds(5_500)

    init(maximum: Int) {
        self.maximum = maximum
        networkMaximum = maximum * 3 / 4
    }

    /// For a process whose soft descriptor limit is `descriptorLimit`, with `inUse` descriptors
    /// open already: the reserve of a quarter of the free descriptors (at least 64) kept for the
    /// broker's own work, the descriptor number from which the accept guard closes connections
    /// (the limit less the reserve), and the cap on connections (at most `configuredMaximum`).
    static func plan(descriptorLimit: Int, inUse: Int, configuredMaximum: Int) -> (ceiling: Int, maximum: Int) {
        let free = max(0, descriptorLimit - inUse)
        let reserve = max(64, free / 4)
        return (max(0, descriptorLimit - reserve), max(0, min(configuredMaximum, free - reserve)))
    }

    var count: Int { endpoints.count }

    /// A connection was accepted on `endpoint`: whether it may stay.
    mutating func accepted(_ descriptor: Int32, on endpoint: String, now: ContinuousClock.Instant = .now) -> Bool {
        // A descriptor still listed lost its end report (a monitor attached late): count it anew.
        closed(descriptor)
        endedSinceAccept.remove(descriptor)
        let isNetwork = endpoint.hasPrefix("tcp://")
        endpoints[descriptor] = endpoint
        let key = keysBeforeAccept.removeValue(forKey: descriptor)
        keys[descriptor] = key
        guard isNetwork else { return endpoints.count <= maximum }
        networkCount += 1
        handshaking = handshaking.filter { $0.value.duration(to: now) < Self.handshakeAllowance }
        // A connection whose key is known has been through its handshake.
        if key == nil { handshaking[descriptor] = now }
        return endpoints.count <= maximum && networkCount <= networkMaximum && handshaking.count <= Self.maximumUnauthenticated
    }

    /// A connection ended (a descriptor never accepted is ignored).
    mutating func closed(_ descriptor: Int32) {
        keys[descriptor] = nil
        handshaking[descriptor] = nil
        guard let endpoint = endpoints.removeValue(forKey: descriptor) else { return }
        endedSinceAccept.insert(descriptor)
        if endpoint.hasPrefix("tcp://") { networkCount -= 1 }
    }

    /// A message came on `descriptor` with the key named `name` (`curveKey`, Z85): kept for the
    /// connection, or until its acceptance is reported.
    mutating func noteKey(_ name: String, curveKey: String? = nil, descriptor: Int32) {
        let key = ConnectionKey(name: name, curveKey: curveKey)
        guard endpoints[descriptor] != nil else {
            if !endedSinceAccept.contains(descriptor) { keysBeforeAccept[descriptor] = key }
            return
        }
        keys[descriptor] = key
        handshaking[descriptor] = nil
    }

    /// Whether a message with the revoked `key` that came on `descriptor` may close the
    /// connection open there: not when that connection is known by another key (the message was
    /// read after its own connection closed and the descriptor was given to another), nor when no
    /// accepted connection is known there.
    func mayClose(_ descriptor: Int32, revokedKey key: ConnectionKey) -> Bool {
        endpoints[descriptor] != nil && (keys[descriptor] ?? key) == key
    }

    /// The open connections that authenticated with a key named one of `names`, or with one of
    /// `curveKeys`.
    func descriptors(ofKeys names: Set<String>, curveKeys: Set<String> = []) -> [Int32] {
        keys.filter { names.contains($0.value.name) || $0.value.curveKey.map(curveKeys.contains) == true }.map(\.key).sorted()
    }
}

/// The CURVE key a tcp connection authenticated with: its name in the allow-list (the
/// connection's `User-Id`, its principal) and the key itself (Z85, the `X-Curve-Key` property the
/// ZAP handler gives the connection). One name may have several keys.
struct ConnectionKey: Hashable, Sendable {
    let name: String
    let curveKey: String?
}

/// The broker's ``ConnectionLimit``, shared by the watches of its sockets (the main one and the
/// MDP endpoint's), with the log and the counters of what it refuses.
final class ConnectionGate: ConnectionKeys {
    private let limit: Mutex<ConnectionLimit>
    private let refusals = Mutex(LogThrottle(every: .seconds(1)))
    private let revokedCloses = Mutex(LogThrottle(every: .seconds(1)))
    /// The accept guard's count of refusals when last looked at.
    private let refusedByGuard = Mutex(0)
    private let metrics: BrokerMetrics
    private let logger: Logger
    let maximum: Int

    init(maximum: Int, metrics: BrokerMetrics, logger: Logger) {
        self.maximum = maximum
        limit = Mutex(ConnectionLimit(maximum: maximum))
        self.metrics = metrics
        self.logger = logger
    }

    /// Open connections now.
    var count: Int { limit.withLock { $0.count } }

    /// A message came on `descriptor` with the CURVE key named `name` in the allow-list
    /// (`curveKey`, Z85).
    func noteKey(_ name: String, curveKey: String?, descriptor: Int32) {
        limit.withLock { $0.noteKey(name, curveKey: curveKey, descriptor: descriptor) }
    }

    /// Keys removed from the allow-list whose name stays there (another key took it, or still has
    /// it): their connections' messages are refused, which the name alone cannot say. Read on
    /// every message of a tcp peer while there is one.
    private let revokedCurveKeys = Mutex<Set<String>>([])
    private let anyRevokedCurveKey = Atomic<Bool>(false)

    /// Whether the key `curveKey` was removed from the allow-list (and not listed again).
    func isRevoked(curveKey: String) -> Bool {
        anyRevokedCurveKey.load(ordering: .relaxed) && revokedCurveKeys.withLock { $0.contains(curveKey) }
    }

    /// Whether any key is revoked now: until one is, nobody needs to read a message's key.
    var hasRevokedCurveKeys: Bool { anyRevokedCurveKey.load(ordering: .relaxed) }

    /// Keys removed from the allow-list are revoked, and those in `listed` (the list now) are not.
    func revoke(curveKeys removed: Set<String>, listed: Set<String>) {
        revokedCurveKeys.withLock { revoked in
            revoked.formUnion(removed)
            revoked.subtract(listed)
            anyRevokedCurveKey.store(!revoked.isEmpty, ordering: .relaxed)
        }
    }

    /// Closes every connection that authenticated with a key named one of `names`, or with one
    /// of `curveKeys` (keys removed from the allow-list): shut down, as a refused one is; libzmq
    /// closes it and reports its end. Returns how many.
    @discardableResult
    func close(connectionsOfKeys names: Set<String>, curveKeys: Set<String> = []) -> Int {
        let descriptors = limit.withLock { $0.descriptors(ofKeys: names, curveKeys: curveKeys) }
        for descriptor in descriptors { _ = shutdown(descriptor, Int32(SHUT_RDWR)) }
        return descriptors.count
    }

    /// A message came on `descriptor` with `key`, removed from the allow-list: its connection is
    /// closed (the message itself is refused) unless the descriptor is known to be another
    /// connection's by now.
    func closeRevoked(descriptor: Int32, name: String, curveKey: String?) {
        closeRevoked(descriptor: descriptor, key: ConnectionKey(name: name, curveKey: curveKey))
    }

    func closeRevoked(descriptor: Int32, key: ConnectionKey) {
        guard limit.withLock({ $0.mayClose(descriptor, revokedKey: key) }) else { return }
        _ = shutdown(descriptor, Int32(SHUT_RDWR))
        guard let report = revokedCloses.withLock({ $0.note() }) else { return }
        logger.notice(
            "connection closed: a message came on it with a key removed from the allow-list",
            metadata: ["key": "\(key.name)", "closed": "\(report)"])
    }

    /// Handles one event of a watched socket; for an accepted connection, whether it may stay.
    func handle(_ event: ConnectionWatch.Event) -> Bool {
        switch event {
        case .accepted(let endpoint, let descriptor):
            let (kept, open) = limit.withLock { limit in (limit.accepted(descriptor, on: endpoint), limit.count) }
            if !kept { refused(endpoint: endpoint, open: open) }
            return kept
        case .disconnected(let descriptor):
            limit.withLock { $0.closed(descriptor) }
        case .acceptFailed(let endpoint):
            // The accept guard's refusals (no descriptor below its ceiling) are counted here;
            // other failed accepts (a peer of another user refused by the ipc filter, one that
            // went away) are not the limit's.
            let guarded = Int(boardbus_accept_guard_refused())
            guard
                refusedByGuard.withLock({ seen in
                    defer { seen = guarded }
                    return guarded > seen
                })
            else { return true }
            refused(endpoint: endpoint, open: limit.withLock { $0.count })
        case .handshakeFailed(let endpoint):
            // ipc connections fail the handshake too when a client only probes the socket.
            guard endpoint.hasPrefix("tcp://") else { return true }
            metrics.countRefusedConnection(reason: "handshake")
            logger.warning(
                "connection refused: its handshake failed (no CURVE, another server key, or no greeting in time)",
                metadata: ["endpoint": "\(endpoint)"])
        }
        return true
    }

    /// Counts a refusal; logs at most one line a second, with the refusals since the last one.
    private func refused(endpoint: String, open: Int) {
        metrics.countRefusedConnection(reason: "limit")
        guard let report = refusals.withLock({ $0.note() }) else { return }
        logger.warning(
            "connections refused: the connection limit is reached (motherboard --max-connections, and the descriptor limit)",
            metadata: ["endpoint": "\(endpoint)", "refused": "\(report)", "open": "\(open)", "limit": "\(maximum)"])
    }
}

/// The process's limit on open descriptors (`RLIMIT_NOFILE`).
enum DescriptorLimit {
    /// Raises the soft limit to the hard one; returns both as they were and the soft one now.
    static func raise() -> (soft: Int, hard: Int, now: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (1024, 1024, 1024) }
        let before = Int(clamping: limit.rlim_cur)
        let hard = Int(clamping: limit.rlim_max)
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        var now = rlimit()
        _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &now)
        return (before, hard, Int(clamping: now.rlim_cur))
    }

    /// Descriptors open in this process now.
    static func inUse() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }
}
