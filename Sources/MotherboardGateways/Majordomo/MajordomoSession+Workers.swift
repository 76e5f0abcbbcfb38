import BusCore
import DequeModule
import Foundation
import Logging

/// The workers: their commands, the requests dispatched to them, and the services they serve as
/// boards of the motherboard.
extension MajordomoSession {
    // MARK: - Workers

    func fromWorker(
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
            // One principal per service: the broker judged the service's registration for the
            // principal of its first worker, so a worker of another (an MDP key with no grant,
            // or a local one) may not join it and be handed its calls.
            if let existing = services[service], existing.board.onBehalfOf != principal {
                logger.warning(
                    "MDP worker refused: another principal's workers serve the service",
                    metadata: ["service": "\(service)", "principal": "\(principal ?? "local")"])
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
    func finishWork(_ peer: Data, body: [Data], now: ContinuousClock.Instant) {
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
    func send(_ envelope: Envelope, as name: ScopedName) {
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
    func toService(_ name: ScopedName, _ envelope: Envelope, now: ContinuousClock.Instant) {
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
            // Refused by the access policy too: a first comer without a grant does not keep the
            // name from a worker that has one.
            if [.idInUse, .badArgument, .forbidden, .unauthorized].contains(error.code) {
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
    func dispatch(_ name: ScopedName, now: ContinuousClock.Instant) {
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
    func sendToWorker(_ worker: Data, dialect: Dialect, command: Majordomo.WorkerCommand, body: [Data] = []) -> Bool {
        links.toPeer(Majordomo.toWorker(worker, dialect: dialect, command: command, body: body))
    }

    /// Forgets a worker; its request in flight fails; its service leaves with its last worker.
    func drop(_ worker: Data, reason: String, now: ContinuousClock.Instant) {
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
    func addService(_ name: ScopedName, principal: String?, now: ContinuousClock.Instant) {
        guard let id = try? BoardID(validating: name.name) else { return }
        // pid 0: an MDP worker's process is not known to the motherboard.
        let registration = Registration(id: id, pid: 0, scope: name.scope, secret: Registration.makeSecret(), sharesConnection: true)
        var service = Service(name: name, board: HelperBoard(connection: links, registration: registration))
        service.board.onBehalfOf = principal
        registrations.register(&service.board, as: name, now: now, id: ids.make())
        services[name] = service
    }
}
