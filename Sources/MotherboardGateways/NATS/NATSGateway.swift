import BusCore
import BusNATS
import BusZeroMQ
import Foundation
import Logging

/// Where and as what a motherboard joins a NATS cluster.
public struct NATSGatewaySettings: Sendable, Hashable {
    public var nats: NATSSettings
    /// The fleet's subjects (every motherboard of one fleet names the same fleet).
    public var subjects: NATSSubjects
    /// The name the other motherboards show as this one's boards' host (`busctl list`'s HOST).
    public var host: String
    /// The principal the access policy sees for what comes through NATS (requests, actions): NATS
    /// does not say who published a message, so it is one principal for the whole cluster.
    public var principal: String

    /// The most requests and actions from the cluster that wait for this motherboard's answers at
    /// once; past it, the cluster is answered `busy`.
    public var maximumInFlight: Int

    /// The principal when none is given.
    public static let defaultPrincipal = "nats"
    public static let defaultMaximumInFlight = 10_000

    public init(
        nats: NATSSettings, fleet: String, host: String, principal: String = Self.defaultPrincipal,
        maximumInFlight: Int = Self.defaultMaximumInFlight
    ) throws {
        self.nats = nats
        subjects = try NATSSubjects(fleet: fleet)
        guard (1...255).contains(host.utf8.count), !host.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw BusError(.badArgument, "a NATS host name is 1–255 bytes with no control character")
        }
        guard HeaderCodec.isValidPrincipal(principal.utf8) else {
            throw BusError(.badArgument, "a NATS principal is 1–255 printable ASCII characters, not '\(principal.escapedForDisplay())'")
        }
        guard maximumInFlight >= 1 else { throw BusError(.badArgument, "the most NATS requests in flight is at least 1, not \(maximumInFlight)") }
        self.host = host
        self.principal = principal
        self.maximumInFlight = maximumInFlight
    }
}

extension NATSGatewaySettings: CustomStringConvertible {
    /// For logs: the servers (passwords hidden), the fleet, the host name.
    public var description: String { "NATS (\(nats), fleet \(subjects.fleet), as \(host))" }
}

extension NATSGatewaySettings {
    /// The fleet name when none is given.
    public static let defaultFleet = "boardbus"
}

/// The gateway that joins a motherboard to a NATS cluster (`motherboard --nats`).
///
/// On its own thread it holds a libnats connection and two DEALER sockets to its motherboard's
/// in-process endpoint: one as a client (it attached there as the exporter, so every board of this
/// motherboard is pushed to it, and it hands the cluster's requests for them to the broker), one
/// that every board of another motherboard is registered over (as boards that share it, PROTOCOL
/// 5.1b), so that the broker routes to them as to any board and the gateway sends each request on
/// as a NATS request. It announces its boards every second and forgets another motherboard's
/// after 3.5 s of silence (PROTOCOL §10).
package final class NATSGateway: Sendable {
    let settings: NATSGatewaySettings
    let limits: BusLimits
    private let thread: HelperThread
    /// The connection, the sockets and the session: its thread's alone.
    private let parts: LoopBound<(sockets: NATSSockets, session: NATSSession)>

    init(settings: NATSGatewaySettings, context: ZMQContext, localEndpoint: String, secret: String, limits: BusLimits, logger: Logger) throws {
        self.settings = settings
        self.limits = limits
        var made: [ZMQSocket] = []
        let connection: NATSConnection
        do {
            for _ in 0..<2 {
                let socket = try ZMQSocket(context: context, kind: .dealer)
                made.append(socket)
                try socket.set(.linger(.zero), .sendHighWaterMark(10_000), .receiveHighWaterMark(10_000))
                try socket.connect(localEndpoint)
            }
            connection = try NATSConnection(settings: settings.nats, readHeaders: NATSHeader.all)
        } catch {
            made.forEach { $0.close() }
            throw error
        }
        let sockets = NATSSockets(local: made[0], served: made[1], connection: connection)
        let thread = HelperThread()
        self.thread = thread
        parts = LoopBound((sockets, NATSSession(settings: settings, secret: secret, logger: logger, links: sockets)), loop: thread)
    }

    package func start() {
        thread.start(name: "nats") { [self] in run() }
    }

    package func stop() {
        thread.stop()
    }

    private func run() {
        let (sockets, session) = parts.value
        let (local, served, connection) = (sockets.local, sockets.served, sockets.connection)
        session.join()
        thread.runLoop([
            .envelopes(of: local, limits: limits) { session.fromOwnMotherboard($0, now: $1) },
            .envelopes(of: served, limits: limits) { session.forServedBoard($0, now: $1) },
            LoopSource(handle: .descriptor(connection.wakeDescriptor)) { now in
                for item in connection.take() {
                    switch item {
                    case .event(let event): session.connectionChanged(event)
                    case .message(let message): session.fromCluster(message, now: now)
                    }
                }
            },
        ]) { now in
            session.checkPermissionsIfDue(now: now)
            guard !session.mustLeave else { return false }
            session.tick(now: now)
            return true
        }
        session.leave()
        connection.close()
        local.close()
        served.close()
    }
}

extension NATSGateway: Gateway {
    package var description: String { settings.description }
}

/// The session's links over the gateway's connection and sockets (its thread only).
private final class NATSSockets: NATSLinks {
    let local: ZMQSocket
    /// The connection the boards of other hosts are registered over.
    let served: ZMQSocket
    let connection: NATSConnection

    init(local: ZMQSocket, served: ZMQSocket, connection: NATSConnection) {
        self.local = local
        self.served = served
        self.connection = connection
    }

    var isConnected: Bool { connection.isConnected }
    var disconnections: Int { connection.disconnections }
    func toCluster(_ subject: String, reply: String?, headers: [(String, String)], payload: Data) throws {
        try connection.publish(subject, reply: reply, headers: headers, payload: payload)
    }
    func subscribe(_ subject: String) throws -> Int { try connection.subscribe(subject) }
    func unsubscribe(_ number: Int) { connection.unsubscribe(number) }
    func mayPublish(on subject: String, timeout: Duration) -> Bool? { connection.mayPublish(on: subject, timeout: timeout) }
    func toMotherboard(_ envelope: Envelope) throws -> Bool { try local.send(envelope) == .sent }
    func sendToBroker(_ envelope: Envelope) { _ = try? served.send(envelope) }
    /// The served boards' connection is the gateway's to close.
    func close() {}
}
