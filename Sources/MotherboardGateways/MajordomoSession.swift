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

    private struct Worker {
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
    private struct Job {
        var correlationID: UInt64
        var command: String
        var payload: Data
        /// When its caller stops waiting (the motherboard answers it `timeout` then): a job past
        /// it is dropped, never handed to a worker.
        var deadline: ContinuousClock.Instant
    }

    /// A service MDP workers serve: a board on the motherboard.
    private struct Service {
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
    private struct ClientRequest {
        enum Kind { case command, mmiService, mmiBoards, mmiIntrospect }
        let client: Data
        let dialect: Dialect
        let service: Data
        let kind: Kind
    }

    /// A worker's request in flight: the motherboard's correlation id on the service's socket.
    private struct WorkerRequest {
        let service: ScopedName
        let correlationID: UInt64
        let worker: Data
    }

    let settings: MajordomoBridge.Settings
    private let logger: Logger
    private let links: any MajordomoLinks
    private var workers: [Data: Worker] = [:]
    private var services: [ScopedName: Service] = [:]
    /// The services whose registration waits for its answer, by its correlation id.
    private var registrations = PendingRegistrations()
    private var clientRequests: [UInt64: ClientRequest] = [:]
    private var workerRequests: [UInt64: WorkerRequest] = [:]
    private var ids = IDSource()
    private var lastServiceHeartbeat: ContinuousClock.Instant?
    /// `PARTIAL`s dropped (a BoardBus reply is one message).
    private(set) var droppedPartials = 0
    private var refusedServices = LogThrottle(every: .seconds(1))

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

    private func fromClient(_ peer: Data, dialect: Dialect, command: Majordomo.ClientCommand?, body: [Data], principal: String?) {
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
    private func mmi(_ name: String, frames: [Data], client peer: Data, dialect: Dialect, service: Data) {
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

    private func answerClient(_ peer: Data, dialect: Dialect, service: Data, error: BusError) {
        answerClient(peer, dialect: dialect, service: service, frames: [Data("error".utf8), PayloadCodec.encodeOrEmpty(error)])
    }

    /// `FINAL` to a client, in its dialect; past the client's backlog budget, a small `busy`
    /// error in its place (not asked of the budget again).
    private func answerClient(_ peer: Data, dialect: Dialect, service: Data, frames: [Data]) {
        var frames = frames
        if !links.mayQueue(frames.reduce(0) { $0 + $1.count }, to: peer) {
            let error = BusError(
                .busy, "the answer was dropped: \(links.queuedBytes(to: peer)) bytes of earlier answers to this connection wait unread")
            frames = [Data("error".utf8), PayloadCodec.encodeOrEmpty(error)]
        }
        _ = links.toPeer(Majordomo.finalToClient(peer, dialect: dialect, service: service, body: frames))
    }

    // MARK: - Workers

    private func fromWorker(
        _ peer: Data, dialect: Dialect, command: Majordomo.WorkerCommand?, body: [Data], principal: String?, now: ContinuousClock.Instant
    ) {
        if command == .ready {
            guard workers[peer] == nil, let asked = body.first.map({ String(decoding: $0, as: UTF8.self) }),
                BoardID.isValid(Self.boardName(asked).name), Self.boardName(asked).scope.isRoot || BoardID.isValid(Self.boardName(asked).scope.name)
            else {
                sendToWorker(peer, dialect: dialect, command: .disconnect)
                return
            }
            let service = Self.boardName(asked)
            // `mmi.` names are the broker's own (RFC 8): no worker serves one.
            guard !service.name.hasPrefix("mmi.") else {
                logger.warning("MDP worker refused: mmi.* services are the broker's own", metadata: ["service": "\(asked.escapedForDisplay())"])
                sendToWorker(peer, dialect: dialect, command: .disconnect)
                return
            }
            guard services[service] != nil || services.count < MajordomoBridge.Settings.maximumServices else {
                if let refused = refusedServices.note(now: now) {
                    logger.warning(
                        "MDP worker refused: the endpoint serves as many services as it may",
                        metadata: ["service": "\(asked.escapedForDisplay())", "services": "\(services.count)", "refused": "\(refused)"])
                }
                sendToWorker(peer, dialect: dialect, command: .disconnect)
                return
            }
            workers[peer] = Worker(id: peer, service: service, dialect: dialect, lastHeard: now, lastSent: now)
            logger.info("MDP worker ready", metadata: ["service": "\(service)"])
            if services[service] == nil { addService(service, principal: principal, now: now) }
            services[service]?.idle.append(peer)
            return dispatch(service, now: now)
        }
        guard workers[peer] != nil else {
            // Unknown (e.g. from before a restart): told to reconnect, as the specification says.
            if command != .disconnect { sendToWorker(peer, dialect: dialect, command: .disconnect) }
            return
        }
        workers[peer]?.lastHeard = now
        switch command {
        case .heartbeat:
            return
        case .disconnect:
            drop(peer, reason: "its MDP worker disconnected", now: now)
        case .partial:
            droppedPartials += 1
            if workers[peer]?.warnedPartial == false {
                workers[peer]?.warnedPartial = true
                logger.notice(
                    "MDP PARTIAL replies are dropped: a BoardBus reply is the FINAL one", metadata: ["service": "\(workers[peer]!.service)"])
            }
        case .final:
            finishWork(peer, body: body, now: now)
        case .ready, .request, nil:
            sendToWorker(peer, dialect: dialect, command: .disconnect)
            drop(peer, reason: "its MDP worker sent an unexpected command", now: now)
        }
    }

    /// The worker's `FINAL`: [token, empty, reply…] → the reply to the motherboard's request.
    private func finishWork(_ peer: Data, body: [Data], now: ContinuousClock.Instant) {
        guard let worker = workers[peer], let tokenFrame = body.first, tokenFrame.count == 8 else { return }
        let token = tokenFrame.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
        guard worker.busyWith == token, let request = workerRequests.removeValue(forKey: token) else { return }
        workers[peer]?.busyWith = nil
        let reply = Array(body.dropFirst(2))
        let envelope: Envelope
        if reply.count == 2, reply[0] == Data("error".utf8) {
            let error =
                (try? PayloadCodec.decode(BusError.self, from: reply[1]))
                ?? BusError(.handlerFailed, String(decoding: reply[1].prefix(1000), as: UTF8.self))
            envelope = Envelope.error(error, correlationID: request.correlationID)
        } else {
            envelope = Envelope(header: EnvelopeHeader(kind: .reply, correlationID: request.correlationID), payload: reply.first ?? Data())
        }
        send(envelope, as: request.service)
        services[request.service]?.idle.append(peer)
        dispatch(request.service, now: now)
    }

    /// Sends to the motherboard on the services' connection, as the service `name` (source, scope).
    private func send(_ envelope: Envelope, as name: ScopedName) {
        var envelope = envelope
        envelope.header.source = name.name
        envelope.header.scope = name.scope
        links.sendToBroker(envelope)
    }

    /// A message on the services' connection: an answer to a registration (by its correlation id),
    /// else for the service it names (target and scope).
    package func toServices(_ envelope: Envelope, now: ContinuousClock.Instant) {
        let header = envelope.header
        if header.kind == .reply || header.kind == .error, header.correlationID != 0 {
            guard let name = registrations.take(header.correlationID) else { return }
            return toService(name, envelope, now: now)
        }
        toService(ScopedName(scope: header.scope, name: header.target), envelope, now: now)
    }

    /// A command from the motherboard for a service: to an idle worker, else queued.
    private func toService(_ name: ScopedName, _ envelope: Envelope, now: ContinuousClock.Instant) {
        guard var service = services[name] else { return }
        let header = envelope.header
        switch service.board.read(envelope) {
        case .heartbeat, .otherAnswer:
            return
        case .accepted:
            services[name] = service
            logger.info("MDP service registered as a board", metadata: ["board": "\(service.name)"])
            return
        case .refused(let error):
            services[name] = service
            guard error.code != .notRegistered else { return }  // registers again at the next tick
            logger.warning("the motherboard refused an MDP service as a board", metadata: ["board": "\(service.name)", "error": "\(error)"])
            // Its id belongs to another board, or its scope is not one of the fleet's: its
            // workers are sent away, once (a worker told DISCONNECT reconnects and says READY
            // again, which meets the same answer).
            if error.code == .idInUse || error.code == .badArgument {
                for worker in workers.values where worker.service == name {
                    sendToWorker(worker.id, dialect: worker.dialect, command: .disconnect)
                    workers[worker.id] = nil
                }
                services[name] = nil
            }
            return
        case .request:
            break
        }
        switch header.kind {
        case .command:
            let timeout: Duration = header.timeoutMilliseconds > 0 ? .milliseconds(Int64(header.timeoutMilliseconds)) : .seconds(25)
            let job = Job(
                correlationID: header.flags.contains(.replyExpected) ? header.correlationID : 0, command: header.typeName, payload: envelope.payload,
                deadline: now.advanced(by: timeout))
            service.dropExpired(now: now)
            guard service.queue.count < settings.queueLimit, service.queuedBytes + job.payload.count <= settings.queueByteLimit else {
                if job.correlationID != 0 {
                    let error = BusError(
                        .busy,
                        "the MDP workers of '\(name)' are busy and \(service.queue.count) requests (\(service.queuedBytes) bytes) wait; at most \(settings.queueLimit) and \(settings.queueByteLimit) bytes"
                    )
                    send(Envelope.error(error, correlationID: job.correlationID), as: name)
                }
                services[name] = service
                return
            }
            service.enqueue(job)
            services[name] = service
            dispatch(name, now: now)
        default:
            guard header.flags.contains(.replyExpected), header.correlationID != 0 else { return }
            let error = BusError(.unknownCommand, "an MDP worker takes commands only, not a \(header.kind)")
            send(Envelope.error(error, correlationID: header.correlationID), as: name)
        }
    }

    /// Hands queued commands to idle workers, the longest idle first.
    private func dispatch(_ name: ScopedName, now: ContinuousClock.Instant) {
        while var service = services[name], !service.queue.isEmpty, let worker = service.idle.popFirst() {
            guard let known = workers[worker] else {
                services[name] = service
                continue
            }
            guard let job = service.dequeue(now: now) else {
                // Every waiting job had expired: the worker stays idle.
                service.idle.prepend(worker)
                services[name] = service
                return
            }
            services[name] = service
            let token = ids.make()
            var tokenFrame = Data(count: 8)
            tokenFrame.withUnsafeMutableBytes { $0.storeBytes(of: token.bigEndian, as: UInt64.self) }
            if job.correlationID != 0 {
                workerRequests[token] = WorkerRequest(service: name, correlationID: job.correlationID, worker: worker)
            }
            workers[worker]?.busyWith = token
            workers[worker]?.lastSent = now
            let sent = sendToWorker(
                worker, dialect: known.dialect, command: .request, body: [tokenFrame, Data(), Data(job.command.utf8), job.payload])
            if !sent {
                // It never reached the worker (gone since its last message): the next one takes it.
                workerRequests[token] = nil
                workers[worker]?.busyWith = nil
                services[name]?.enqueue(job, first: true)
                drop(worker, reason: "its MDP worker is gone", now: now)
            } else if job.correlationID == 0 {
                // Nobody waits for it: the worker is free once it answers; the answer is dropped.
                workerRequests[token] = WorkerRequest(service: name, correlationID: 0, worker: worker)
            }
        }
    }

    @discardableResult
    private func sendToWorker(_ worker: Data, dialect: Dialect, command: Majordomo.WorkerCommand, body: [Data] = []) -> Bool {
        links.toPeer(Majordomo.toWorker(worker, dialect: dialect, command: command, body: body))
    }

    /// Forgets a worker; its request in flight fails; its service leaves with its last worker.
    private func drop(_ worker: Data, reason: String, now: ContinuousClock.Instant) {
        guard let gone = workers.removeValue(forKey: worker) else { return }
        if let token = gone.busyWith, let request = workerRequests.removeValue(forKey: token), request.correlationID != 0 {
            let error = BusError(
                .outcomeUnknown,
                "board '\(gone.service)' stopped after the request was delivered, before it answered (\(reason)); whether it was carried out is unknown"
            )
            send(Envelope.error(error, correlationID: request.correlationID), as: gone.service)
        }
        guard var service = services[gone.service] else { return }
        service.idle.removeAll { $0 == worker }
        services[gone.service] = service
        if workers.values.contains(where: { $0.service == gone.service }) {
            return dispatch(gone.service, now: now)
        }
        // The last worker left: the board goes, and what waited for it fails.
        for job in service.queue where job.correlationID != 0 {
            let error = BusError(.boardNotRunning, "board '\(gone.service)' has no MDP worker left")
            send(Envelope.error(error, correlationID: job.correlationID), as: gone.service)
        }
        service.board.close()
        services[gone.service] = nil
        logger.info("MDP service left with its last worker", metadata: ["board": "\(service.name)"])
    }

    // MARK: - Services as boards

    /// Registers the service as a board on the services' connection, for `principal` (the first
    /// worker's key name, when it came over tcp): the broker's access policy decides whether
    /// that key may serve the id.
    private func addService(_ name: ScopedName, principal: String?, now: ContinuousClock.Instant) {
        guard let id = try? BoardID(validating: name.name) else { return }
        // pid 0: an MDP worker's process is not known to the motherboard.
        let registration = Registration(id: id, pid: 0, scope: name.scope, secret: Registration.makeSecret(), sharesConnection: true)
        var service = Service(name: name, board: HelperBoard(connection: links, registration: registration))
        service.board.onBehalfOf = principal
        registrations.register(&service.board, as: name, now: now, id: ids.make())
        services[name] = service
    }
}
