import BusCore
import Foundation
import MotherboardGateways

/// The Majordomo session's links without sockets: what it sends to MDP peers, to the motherboard
/// as a client and on the services' connection, kept in order.
package final class RecordingMajordomoLinks: MajordomoLinks {
    /// Frames to MDP peers, routing id first.
    package var toPeers: [[Data]] = []
    /// On the services' connection.
    package var asServices: [Envelope] = []
    /// As a client of the motherboard.
    package var requests: [Envelope] = []
    /// Peers whose connection is gone: a send to one fails.
    package var gone: Set<Data> = []
    /// Clients that do not read: nothing more may be queued to them.
    package var stalled: Set<Data> = []
    /// When set, what goes to the motherboard must encode, as the socket would encode it.
    package var encodesRequests = false

    package init() {}

    package func toPeer(_ frames: [Data]) -> Bool {
        guard !gone.contains(frames[0]) else { return false }
        toPeers.append(frames)
        return true
    }
    package func isStalled(_ client: Data) -> Bool { stalled.contains(client) }
    package func mayQueue(_ bytes: Int, to client: Data) -> Bool { !stalled.contains(client) }
    package func queuedBytes(to client: Data) -> Int { stalled.contains(client) ? 1 << 25 : 0 }
    package func toMotherboard(_ envelope: Envelope) throws -> Bool {
        if encodesRequests { _ = try envelope.frames() }
        requests.append(envelope)
        return true
    }
    package func sendToBroker(_ envelope: Envelope) { asServices.append(envelope) }
    package func close() {}

    /// The commands sent to `worker` (REQUEST, HEARTBEAT, DISCONNECT…), in order.
    package func commands(to worker: Data) -> [Majordomo.WorkerCommand] {
        toPeers.filter { $0[0] == worker }.compactMap { Majordomo.WorkerCommand(rawValue: $0[2].first ?? 0) }
    }

    /// What went on the services' connection, and forgets it.
    package func takeAsServices() -> [Envelope] {
        defer { asServices.removeAll() }
        return asServices
    }
}

/// An uplink session's links without sockets: its own motherboard's side, the parent's and the
/// served boards' connection, kept in order.
package final class RecordingUplinkLinks: UplinkLinks {
    package var toLocals: [Envelope] = []
    package var toParents: [Envelope] = []
    /// On the served boards' connection.
    package var asBoards: [Envelope] = []
    /// Whether the link's connection takes what goes up (false: not made yet).
    package var linkTakes = true
    /// Commands whose send up fails (the socket throws) before one is taken again.
    package var failingCommands = 0
    package var diagnoses = 0

    package init() {}

    package func toLocal(_ envelope: Envelope) { toLocals.append(envelope) }
    package func toParent(_ envelope: Envelope) throws -> Bool {
        guard linkTakes else { return false }
        if envelope.header.kind == .command, failingCommands > 0 {
            failingCommands -= 1
            throw BusError(.transport, "send failed")
        }
        toParents.append(envelope)
        return true
    }
    package func diagnose() { diagnoses += 1 }
    package func forgetDiagnosis() {}
    package func sendToBroker(_ envelope: Envelope) { asBoards.append(envelope) }
    package func close() {}
}

/// A NATS session's links without a server or sockets: what it publishes and subscribes to, what
/// it hands its motherboard as the exporter and as the boards of other hosts, kept in order.
package final class RecordingNATSLinks: NATSLinks {
    package struct Publication {
        package var subject: String
        package var reply: String?
        package var headers: [(String, String)]
        package var payload: Data

        package func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    package var published: [Publication] = []
    /// The subjects subscribed to, by number (an unsubscribed one removed).
    package var subscriptions: [Int: String] = [:]
    private var lastSubscription = 0
    /// As the exporter, a client of the motherboard.
    package var toMotherboards: [Envelope] = []
    /// On the connection the boards of other hosts share.
    package var asBoards: [Envelope] = []
    package var isConnected = true
    package var disconnections = 0
    /// What the server says when asked whether this connection may publish as another host.
    package var letsPublishAsAnotherHost: Bool? = false

    package init() {}

    package func toCluster(_ subject: String, reply: String?, headers: [(String, String)], payload: Data) throws {
        published.append(Publication(subject: subject, reply: reply, headers: headers, payload: payload))
    }
    package func subscribe(_ subject: String) throws -> Int {
        lastSubscription += 1
        subscriptions[lastSubscription] = subject
        return lastSubscription
    }
    package func unsubscribe(_ number: Int) { subscriptions[number] = nil }
    package func mayPublish(on subject: String, timeout: Duration) -> Bool? { letsPublishAsAnotherHost }
    package func toMotherboard(_ envelope: Envelope) throws -> Bool {
        toMotherboards.append(envelope)
        return true
    }
    package func sendToBroker(_ envelope: Envelope) { asBoards.append(envelope) }
    package func close() {}

    /// The number of the subscription to `subject`, if the session holds one.
    package func subscription(to subject: String) -> Int? { subscriptions.first { $0.value == subject }?.key }
}
