import BusCore
import BusZeroMQ
import Foundation
import Synchronization

/// The thread of one of the motherboard's gateways (the uplink, the MDP endpoint, NATS): it runs a
/// loop until ``stop()``, which waits for the loop to end. The gateway's session and sockets are
/// its alone (``LoopBound`` checks it in debug builds).
final class HelperThread: OwningThread {
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)
    /// `pthread_self()` of the thread, 0 before it starts.
    private let thread = Atomic<UInt>(0)
    private let name: Mutex<String> = Mutex("")

    /// Whether the loop should go on.
    var isRunning: Bool { running.load(ordering: .acquiring) }

    var isOnOwningThread: Bool { thread.load(ordering: .acquiring) == UInt(pthread_self()) }
    var owningThreadName: String { name.withLock { $0 } }

    func start(name: String, _ loop: @escaping @Sendable () -> Void) {
        self.name.withLock { $0 = name }
        let thread = Thread { [self] in
            self.thread.store(UInt(pthread_self()), ordering: .releasing)
            loop()
            finished.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Asks the loop to end and waits until it has (once; later calls return at once).
    func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }
}

extension ZMQSocket {
    /// Hands up to `batch` waiting envelopes to `handle` (frames that are not one are dropped).
    func drainEnvelopes(limits: BusLimits, batch: Int = 256, _ handle: (Envelope) -> Void) {
        for _ in 0..<batch {
            guard let message = try? receiveEnvelope(limits: limits) else { return }
            if case .success(let envelope) = message.content { handle(envelope) }
        }
    }
}

/// A board a helper keeps registered (the uplink's boards with the parent, each on a DEALER of
/// its own; the MDP services with their motherboard, all on one that they share, each message
/// naming its board): heartbeats while registered, registration again
/// while not (a second after a refusal, doubling up to a minute while the refusals go on: an id
/// another child motherboard holds is not asked for every second for ever), and what the
/// broker's answers say about it.
struct HelperBoard {
    let connection: any HelperConnection
    var registration: Registration
    /// The remote principal the board registers for (an MDP worker's key name), if any: the
    /// broker asks its access policy whether that principal may register the id.
    var onBehalfOf: String?
    private(set) var registered = false
    /// The correlation id of its last registration.
    private(set) var correlationID: UInt64 = 0
    private var lastAttempt: ContinuousClock.Instant?
    /// How long after a refused registration the next one goes.
    private(set) var retryAfter: Duration = .seconds(1)
    static let longestRetry: Duration = .seconds(60)

    init(connection: any HelperConnection, registration: Registration) {
        self.connection = connection
        self.registration = registration
    }

    /// What a message on the board's socket is.
    enum Answer {
        case heartbeat
        /// The broker accepted the registration.
        case accepted
        /// The broker refused it (`error`), or does not know the board (`notRegistered`, e.g. after
        /// a restart or a cut link): it registers again at the next ``keepAlive(now:id:)``.
        case refused(BusError)
        /// Another answer (to nothing the board asked): ignored.
        case otherAnswer
        /// A request for the board.
        case request
    }

    mutating func read(_ envelope: Envelope) -> Answer {
        let header = envelope.header
        switch header.kind {
        case .heartbeat:
            return .heartbeat
        case .reply where correlationID != 0 && header.correlationID == correlationID:
            registered = true
            retryAfter = .seconds(1)
            return .accepted
        case .error where (correlationID != 0 && header.correlationID == correlationID) || header.typeName == BusError.Code.notRegistered.name:
            registered = false
            // Not known (a cut link, a restarted broker): again at the next tick; refused: later
            // and later.
            if header.typeName == BusError.Code.notRegistered.name {
                lastAttempt = nil
            } else if registrationWasAnswered(header) {
                retryAfter = min(retryAfter * 2, Self.longestRetry)
            }
            return .refused(
                (try? PayloadCodec.decode(BusError.self, from: envelope.payload)) ?? BusError(BusError.Code(name: header.typeName), header.typeName))
        case .reply, .error:
            return .otherAnswer
        default:
            return .request
        }
    }

    private func registrationWasAnswered(_ header: EnvelopeHeader) -> Bool {
        correlationID != 0 && header.correlationID == correlationID
    }

    /// The link or the broker was lost: register again.
    mutating func lose() {
        registered = false
    }

    /// A heartbeat while registered; else the registration, at most once a second (`id` is its
    /// correlation id).
    mutating func keepAlive(now: ContinuousClock.Instant, id: UInt64) {
        if registered {
            connection.sendToBroker(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: registration.id.rawValue, scope: registration.scope)))
        } else if lastAttempt.map({ $0.duration(to: now) >= retryAfter }) ?? true {
            register(now: now, id: id)
        }
    }

    mutating func register(now: ContinuousClock.Instant, id: UInt64) {
        lastAttempt = now
        correlationID = id
        var header = EnvelopeHeader(kind: .register, correlationID: id, source: registration.id.rawValue, scope: registration.scope)
        header.flags.insert(.replyExpected)
        header.onBehalfOf = onBehalfOf
        connection.sendToBroker(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(registration)))
    }

    /// Unregisters (when registered, or, sharing a gateway's connection, when a registration may
    /// still be on its way: the broker drops only a board that connection holds) and closes its
    /// socket, unless it shares it.
    func close() {
        if registered || (registration.sharesConnection == true && correlationID != 0) {
            connection.sendToBroker(Envelope(header: EnvelopeHeader(kind: .unregister, source: registration.id.rawValue, scope: registration.scope)))
        }
        if registration.sharesConnection != true { connection.close() }
    }
}

/// The registrations of a gateway's boards on a shared connection that wait for the broker's
/// answer, by correlation id (the answer names no board): a registration asked again replaces
/// the one before, so that unanswered ids do not pile up while the broker is away.
struct PendingRegistrations {
    private var names: [UInt64: ScopedName] = [:]

    var count: Int { names.count }

    /// Heartbeats `board` while registered, else registers it again (at most once a second).
    mutating func keepAlive(_ board: inout HelperBoard, as name: ScopedName, now: ContinuousClock.Instant, id: UInt64) {
        let previous = board.correlationID
        board.keepAlive(now: now, id: id)
        if board.correlationID != previous { replace(previous, with: id, for: name) }
    }

    /// Registers `board` now.
    mutating func register(_ board: inout HelperBoard, as name: ScopedName, now: ContinuousClock.Instant, id: UInt64) {
        let previous = board.correlationID
        board.register(now: now, id: id)
        replace(previous, with: id, for: name)
    }

    /// The board an answer with correlation id `id` is for, if it answers a registration.
    mutating func take(_ id: UInt64) -> ScopedName? {
        names.removeValue(forKey: id)
    }

    private mutating func replace(_ previous: UInt64, with id: UInt64, for name: ScopedName) {
        names[previous] = nil
        names[id] = name
    }
}

/// Where a helper board's messages to its broker go: a socket of its own, or a connection it
/// shares with others (a gateway's).
package protocol HelperConnection: AnyObject {
    /// Sends, or drops when the connection cannot take it (the board's heartbeats and
    /// registrations are sent again).
    func sendToBroker(_ envelope: Envelope)
    func close()
}

extension ZMQSocket: HelperConnection {
    package func sendToBroker(_ envelope: Envelope) {
        _ = try? send(envelope)
    }
}
