import BusCore
import DequeModule
import Foundation
import Logging

/// What a ``MajordomoSession`` says and hears through: the MDP peers, the backlog of answers
/// toward each client, and the motherboard (as a client, and on the services' connection, which
/// every service shares as a board). The bridge gives sockets; a test gives a recorder.
package protocol MajordomoLinks: HelperConnection {
    /// Frames to an MDP peer (routing id first); false when they could not be handed over.
    func toPeer(_ frames: [Data]) -> Bool
    /// Whether answers toward `client` wait unread past its budget (it gets no more work done
    /// until it reads).
    func isStalled(_ client: Data) -> Bool
    /// Whether an answer of `bytes` may wait toward `client`.
    func mayQueue(_ bytes: Int, to client: Data) -> Bool
    func queuedBytes(to client: Data) -> Int
    /// A request to the motherboard as a client: false when its queue is full; throws when a
    /// field is over its limit.
    func toMotherboard(_ envelope: Envelope) throws -> Bool
}

/// The Majordomo endpoint's state machine (``MajordomoBridge`` has the thread and the sockets):
/// MDP workers become services, each a board on the motherboard; MDP clients' requests become
/// commands; a service's commands are queued for its workers and handed to the longest idle;
/// heartbeats both ways; MMI. Driven by messages and the time, through ``MajordomoLinks``.
package final class MajordomoSession {
    typealias Dialect = Majordomo.Dialect

    struct Worker {
        let id: Data
        let service: ScopedName
        let dialect: Dialect
        var lastHeard: ContinuousClock.Instant
        var lastSent: ContinuousClock.Instant
        /// The token of the request it works on, if any.
        var busyWith: UInt64?
        var warnedPartial = false
    }

    /// A command for a service's workers, from the motherboard.
    struct Job {
        var correlationID: UInt64
        var command: String
        var payload: Data
        /// When its caller stops waiting (the motherboard answers it `timeout` then): a job past
        /// it is dropped, never handed to a worker.
        var deadline: ContinuousClock.Instant
    }

    /// A service MDP workers serve: a board on the motherboard.
    struct Service {
        let name: ScopedName
        /// Registered with the motherboard on the services' connection.
        var board: HelperBoard
        var idle = Deque<Data>()
        var queue = Deque<Job>()
        /// The payload bytes of the queued jobs.
        var queuedBytes = 0

        mutating func enqueue(_ job: Job, first: Bool = false) {
            if first { queue.prepend(job) } else { queue.append(job) }
            queuedBytes += job.payload.count
        }

        /// The next job whose caller still waits; those past their deadline are dropped.
        mutating func dequeue(now: ContinuousClock.Instant) -> Job? {
            while let job = queue.popFirst() {
                queuedBytes -= job.payload.count
                if job.deadline > now { return job }
            }
            return nil
        }

        /// Drops the jobs whose callers stopped waiting.
        mutating func dropExpired(now: ContinuousClock.Instant) {
            guard queue.contains(where: { $0.deadline <= now }) else { return }
            queue.removeAll { $0.deadline <= now }
            queuedBytes = queue.reduce(0) { $0 + $1.payload.count }
        }
    }

    /// What an MDP client waits for: where its answer goes and how to make it.
    struct ClientRequest {
        enum Kind { case command, mmiService, mmiBoards, mmiIntrospect }
        let client: Data
        let dialect: Dialect
        let service: Data
        let kind: Kind
    }

    /// A worker's request in flight: the motherboard's correlation id on the service's socket.
    struct WorkerRequest {
        let service: ScopedName
        let correlationID: UInt64
        let worker: Data
    }

    let settings: MajordomoBridge.Settings
    let logger: Logger
    let links: any MajordomoLinks
    var workers: [Data: Worker] = [:]
    var services: [ScopedName: Service] = [:]
    /// The services whose registration waits for its answer, by its correlation id.
    var registrations = PendingRegistrations()
    var clientRequests: [UInt64: ClientRequest] = [:]
    var workerRequests: [UInt64: WorkerRequest] = [:]
    var ids = IDSource()
    var lastServiceHeartbeat: ContinuousClock.Instant?
    /// `PARTIAL`s dropped (a BoardBus reply is one message).
    var droppedPartials = 0
    var refusedServices = LogThrottle(every: .seconds(1))

    package init(settings: MajordomoBridge.Settings, links: any MajordomoLinks, logger: Logger) {
        self.settings = settings
        self.links = links
        self.logger = logger
    }

    /// The services served now.
    package var serviceNames: [ScopedName] { services.keys.sorted() }
    /// Registrations waiting for their answer.
    package var pendingRegistrations: Int { registrations.count }

    /// Every worker is told `DISCONNECT`, every service unregistered.
    package func close() {
        for worker in workers.values { sendToWorker(worker.id, dialect: worker.dialect, command: .disconnect) }
        for service in services.values { service.board.close() }
        workers.removeAll()
        services.removeAll()
    }

    /// Heartbeats both ways, silent workers dropped, services (re)registered.
    package func tick(now: ContinuousClock.Instant) {
        for worker in workers.values {
            if worker.lastHeard.duration(to: now) > settings.liveness {
                logger.notice("MDP worker dropped: no heartbeat", metadata: ["service": "\(worker.service)", "after": "\(settings.liveness)"])
                sendToWorker(worker.id, dialect: worker.dialect, command: .disconnect)
                drop(worker.id, reason: "its MDP worker sent nothing for \(settings.liveness)", now: now)
            } else if worker.lastSent.duration(to: now) >= settings.heartbeatInterval {
                workers[worker.id]?.lastSent = now
                if !sendToWorker(worker.id, dialect: worker.dialect, command: .heartbeat) {
                    drop(worker.id, reason: "its MDP worker is gone", now: now)
                }
            }
        }
        guard lastServiceHeartbeat.map({ $0.duration(to: now) >= .milliseconds(500) }) ?? true else { return }
        lastServiceHeartbeat = now
        for name in services.keys { services[name]?.dropExpired(now: now) }
        for name in services.keys { registrations.keepAlive(&services[name]!.board, as: name, now: now, id: ids.make()) }
    }

    // MARK: - From MDP peers

    /// A message from an MDP peer (the ROUTER's frames, routing id first), from the connection of
    /// `principal` (its CURVE key's name; nil on ipc).
    package func fromPeer(_ frames: [Data], principal: String?, now: ContinuousClock.Instant) {
        // Anything that is not MDP is dropped, as the specification says of invalid messages.
        guard let message = Majordomo.Incoming(frames: frames) else { return }
        switch message.sender {
        case .client(let command):
            fromClient(message.peer, dialect: message.dialect, command: command, body: message.body, principal: principal)
        case .worker(let command):
            fromWorker(message.peer, dialect: message.dialect, command: command, body: message.body, principal: principal, now: now)
        }
    }

    func fromClient(_ peer: Data, dialect: Dialect, command: Majordomo.ClientCommand?, body: [Data], principal: String?) {
        guard command == .request, let service = body.first else { return }
        let name = String(decoding: service, as: UTF8.self)
        let frames = Array(body.dropFirst())
        // A client that does not read its answers gets no more work done until it does.
        if links.isStalled(peer) {
            let error = BusError(.busy, "\(links.queuedBytes(to: peer)) bytes of answers to this connection wait unread; read them first")
            return answerClient(peer, dialect: dialect, service: service, error: error)
        }
        if name.hasPrefix("mmi.") {
            return mmi(name, frames: frames, client: peer, dialect: dialect, service: service)
        }
        guard let command = frames.first.map({ String(decoding: $0, as: UTF8.self) }), !command.isEmpty, frames.count <= 2 else {
            return answerClient(
                peer, dialect: dialect, service: service,
                error: BusError(.badArgument, "an MDP request to a board has the command name, then an optional JSON payload (2 frames at most)"))
        }
        let target = Self.boardName(name)
        guard BoardID.isValid(target.name), target.scope.isRoot || BoardID.isValid(target.scope.name) else {
            return answerClient(
                peer, dialect: dialect, service: service,
                error: BusError(.badArgument, "'\(name.escapedForDisplay(limit: 300))' is not a board id (or scope/id)"))
        }
        let id = ids.make()
        clientRequests[id] = ClientRequest(client: peer, dialect: dialect, service: service, kind: .command)
        var header = EnvelopeHeader(kind: .command, correlationID: id, target: target.name, scope: target.scope, typeName: command)
        header.flags.insert(.replyExpected)
        header.onBehalfOf = principal
        let payload = frames.count > 1 ? frames[1] : Data("{}".utf8)
        do {
            guard try links.toMotherboard(Envelope(header: header, payload: payload)) else {
                clientRequests[id] = nil
                return answerClient(peer, dialect: dialect, service: service, error: BusError(.busy, "the motherboard's queue is full"))
            }
        } catch {
            // A field over its limit (a command name over 255 bytes): refused, never cut.
            clientRequests[id] = nil
            let refusal = error as? BusError ?? BusError(.badArgument, "\(error)")
            answerClient(peer, dialect: dialect, service: service, error: BusError(.badArgument, refusal.message))
        }
    }

    /// `scope/id` → its scope and id; a name without `/` is in the root scope.
    static func boardName(_ service: String) -> ScopedName {
        guard let slash = service.firstIndex(of: "/") else { return ScopedName(scope: .root, name: service) }
        return ScopedName(scope: Scope(String(service[..<slash])), name: String(service[service.index(after: slash)...]))
    }

    /// The MMI (ZeroMQ RFC 8) services: `mmi.service`, `mmi.boards`; others `501`.
    func mmi(_ name: String, frames: [Data], client peer: Data, dialect: Dialect, service: Data) {
        var header: EnvelopeHeader
        switch name {
        case "mmi.service", "mmi.introspect":
            guard let asked = frames.first.map({ String(decoding: $0, as: UTF8.self) }) else {
                return answerClient(peer, dialect: dialect, service: service, frames: [Data("400".utf8)])
            }
            let board = Self.boardName(asked)
            guard let id = try? BoardID(validating: board.name) else {
                return answerClient(peer, dialect: dialect, service: service, frames: [Data("404".utf8)])
            }
            let introspect = name == "mmi.introspect"
            header = EnvelopeHeader(
                kind: .control, correlationID: ids.make(), typeName: introspect ? ControlOperation.introspect : ControlOperation.status)
            clientRequests[header.correlationID] = ClientRequest(
                client: peer, dialect: dialect, service: service, kind: introspect ? .mmiIntrospect : .mmiService)
            header.flags.insert(.replyExpected)
            _ = try? links.toMotherboard(Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(StatusRequest(id: id, scope: board.scope))))
        case "mmi.boards":
            let id = ids.make()
            header = EnvelopeHeader(kind: .control, correlationID: id, typeName: ControlOperation.list)
            header.flags.insert(.replyExpected)
            clientRequests[id] = ClientRequest(client: peer, dialect: dialect, service: service, kind: .mmiBoards)
            _ = try? links.toMotherboard(Envelope(header: header))
        default:
            answerClient(peer, dialect: dialect, service: service, frames: [Data("501".utf8)])
        }
    }

    /// An answer from the motherboard to an MDP client's request.
    package func fromMotherboard(_ envelope: Envelope) {
        guard let request = clientRequests.removeValue(forKey: envelope.header.correlationID) else { return }
        let failed = envelope.header.kind == .error
        switch request.kind {
        case .command:
            if failed {
                let error = (try? PayloadCodec.decode(BusError.self, from: envelope.payload)) ?? BusError(.transport, "unreadable error")
                answerClient(request.client, dialect: request.dialect, service: request.service, error: error)
            } else {
                answerClient(request.client, dialect: request.dialect, service: request.service, frames: [envelope.payload])
            }
        case .mmiService:
            let live = !failed && (try? PayloadCodec.decode(BoardInfo.self, from: envelope.payload))?.state == .running
            answerClient(request.client, dialect: request.dialect, service: request.service, frames: [Data((live ? "200" : "404").utf8)])
        case .mmiIntrospect:
            answerClient(
                request.client, dialect: request.dialect, service: request.service,
                frames: failed ? [Data("404".utf8)] : [Data("200".utf8), envelope.payload])
        case .mmiBoards:
            answerClient(request.client, dialect: request.dialect, service: request.service, frames: [Data("200".utf8), envelope.payload])
        }
    }

    func answerClient(_ peer: Data, dialect: Dialect, service: Data, error: BusError) {
        answerClient(peer, dialect: dialect, service: service, frames: [Data("error".utf8), PayloadCodec.encodeOrEmpty(error)])
    }

    /// `FINAL` to a client, in its dialect; past the client's backlog budget, a small `busy`
    /// error in its place (not asked of the budget again).
    func answerClient(_ peer: Data, dialect: Dialect, service: Data, frames: [Data]) {
        var frames = frames
        if !links.mayQueue(frames.reduce(0) { $0 + $1.count }, to: peer) {
            let error = BusError(
                .busy, "the answer was dropped: \(links.queuedBytes(to: peer)) bytes of earlier answers to this connection wait unread")
            frames = [Data("error".utf8), PayloadCodec.encodeOrEmpty(error)]
        }
        _ = links.toPeer(Majordomo.finalToClient(peer, dialect: dialect, service: service, body: frames))
    }
}
