import BusCore
import BusNATS
import Foundation
import Logging

/// The fleet's membership: this motherboard's announcements, the others' (each only from its
/// own host), and who serves which board.
extension NATSSession {
    // MARK: - Time

    func tick(now: ContinuousClock.Instant) {
        if let request = attachment.request(now: now, ids: &ids) { _ = try? links.toMotherboard(request) }
        // Another motherboard silent past the expiry is gone, and its boards with it.
        let expired = peers.filter { $0.value.lastHeard.duration(to: now) > Self.expiry }.map(\.key)
        if !expired.isEmpty {
            for instance in expired {
                logger.warning(
                    "a motherboard of the fleet is silent: its boards are gone", metadata: ["host": "\(peers[instance]!.announcement.host)"])
                peers[instance] = nil
                for id in gatherings.keys { heardFrom(instance, delivered: 0, gathering: id) }
            }
            reconcile(now: now)
        }
        if announceSoon || lastAnnounce.map({ $0.duration(to: now) >= Self.announceInterval }) ?? true { announce(now: now) }
        if lastRenewal.map({ $0.duration(to: now) >= .seconds(1) }) ?? true {
            lastRenewal = now
            for store in servedStores.keys { watchLocal(store, operation: StoreOperation.renew) }
        }
        if lastKeepAlive.map({ $0.duration(to: now) >= .milliseconds(500) }) ?? true {
            lastKeepAlive = now
            remote.keepAlive(now: now, ids: &ids)
        }
        for (_, pending) in outgoing.takeExpired(now: now) {
            sendAsBoard(
                pending.board,
                Envelope.error(
                    BusError(.timeout, "no answer from the NATS cluster in time for '\(pending.board)'"), correlationID: pending.correlationID))
        }
        _ = incoming.takeExpired(now: now)
        for (_, gathering) in gatherings.takeExpired(now: now) {
            answerAction(gathering.correlationID, delivered: gathering.delivered)
        }
    }

    func announce(now: ContinuousClock.Instant) {
        guard attachment.isAttached, keptToItsSubjects == true else { return }
        announceSoon = false
        lastAnnounce = now
        let boards = exported.keys.sorted().compactMap { exported[$0]?.registration }
        let announcement = NATSAnnouncement(
            instance: instance, host: settings.host, joined: joined, intervalMilliseconds: Int(Self.announceInterval.components.seconds * 1000),
            boards: boards, actions: true)
        do {
            try links.publish(subjects.announce(host: settings.host), payload: PayloadCodec.encodeOrEmpty(announcement))
        } catch {
            logger.debug("announcement not sent", metadata: ["error": "\(error)"])
        }
    }

    // MARK: - Who serves what

    var rank: Rank { Rank(joined: joined, instance: instance) }

    /// After any change of this motherboard's boards or of what the others announce: exports the
    /// local boards no earlier motherboard serves, registers here the others' boards.
    func reconcile(now: ContinuousClock.Instant) {
        // The owner of each id the cluster announces: the earliest motherboard.
        var owners: [ScopedName: (rank: Rank, instance: String, registration: Registration, host: String)] = [:]
        for (instance, peer) in peers {
            for registration in peer.announcement.boards {
                let name = ScopedName(scope: registration.scope, name: registration.id.rawValue)
                if let owner = owners[name], owner.rank < peer.rank { continue }
                owners[name] = (peer.rank, instance, registration, peer.announcement.host)
            }
        }
        var changed = false
        // Local boards: served to the cluster unless an earlier motherboard serves the id.
        for (name, registration) in localBoards {
            if let owner = owners[name], owner.rank < rank {
                if exported[name] != nil { changed = true }
                unexport(name)
                if loggedConflicts.insert(name).inserted {
                    logger.error(
                        "board is served by another motherboard of the fleet, which joined first: not served to the cluster (one id is one board across hosts)",
                        metadata: ["board": "\(name)", "host": "\(owner.host)"])
                }
            } else if exported[name]?.registration != registration {
                // New, or registered again with something else (commands, stores).
                unexport(name)
                export(name, registration)
                changed = true
            }
        }
        for name in exported.keys where localBoards[name] == nil {
            unexport(name)
            changed = true
        }
        // Other motherboards' boards: registered here while their owner announces them.
        for (name, board) in remote.boards {
            guard let owner = owners[name], exported[name] == nil else {
                forget(name, board)
                continue
            }
            // Registered again with something else: registered again here.
            var known = board.link.registration
            known.secret = nil
            guard Self.imported(owner.registration, host: owner.host) == known else {
                forget(name, board)
                continue
            }
            // Its motherboard restarted (a new instance on the same host): the same board, kept.
            remote[name]?.extra.instance = owner.instance
        }
        for (name, owner) in owners where remote[name] == nil && exported[name] == nil {
            var registration = Self.imported(owner.registration, host: owner.host)
            registration.secret = Registration.makeSecret()
            var board = RemoteBoard(link: HelperBoard(connection: links, registration: registration), extra: .init(instance: owner.instance))
            // Only under its host's token: an output or change another host publishes for it
            // never reaches this motherboard.
            if let number = try? links.subscribe(subjects.anyOutput(board: name.name, scope: name.scope, host: owner.host)) {
                board.extra.subscriptions.append(number)
                outputSubscriptions[number] = name
            }
            for store in registration.stores {
                guard let number = try? links.subscribe(subjects.changes(store: store, scope: name.scope, host: owner.host)) else { continue }
                board.extra.subscriptions.append(number)
                changeSubscriptions[number] = (name, store)
            }
            remote.add(name, board, now: now, ids: &ids)
        }
        if changed { announceSoon = true }
    }

    /// Another motherboard's board as the gateway registers it here (no secret yet): it shares the
    /// gateway's connection, names its host, and takes no action (the gateway delivers those).
    static func imported(_ announced: Registration, host: String) -> Registration {
        var registration = announced
        registration.actions = []
        registration.secret = nil
        registration.sharesConnection = true
        registration.host = host
        registration.schemas = nil
        return registration
    }

    /// A board of another motherboard leaves this one.
    func forget(_ name: ScopedName, _ board: RemoteBoard) {
        remote.remove(name)
        for number in board.extra.subscriptions {
            links.unsubscribe(number)
            changeSubscriptions[number] = nil
            outputSubscriptions[number] = nil
        }
    }

    /// Watches (or renews, or ends the watch of) a local store whose changes go to the cluster.
    func watchLocal(_ store: ScopedName, operation: String) {
        var header = EnvelopeHeader(kind: .store, target: store.name, scope: store.scope, typeName: operation)
        if operation != StoreOperation.renew {
            header.flags.insert(.replyExpected)
            header.correlationID = ids.make()
        }
        _ = try? links.toMotherboard(Envelope(header: header))
    }

    func export(_ name: ScopedName, _ registration: Registration) {
        loggedConflicts.remove(name)
        var subscription: Int?
        do {
            subscription = try links.subscribe(subjects.anyRequest(board: name.name, scope: name.scope))
        } catch {
            logger.error("cannot serve a board to the NATS cluster", metadata: ["board": "\(name)", "error": "\(error)"])
        }
        exported[name] = Exported(registration: registration, subscription: subscription)
        for store in registration.stores {
            let key = ScopedName(scope: name.scope, name: store)
            if var served = servedStores[key] {
                served.owners += 1
                servedStores[key] = served
                continue
            }
            servedStores[key] = ServedStore(owners: 1, subscription: try? links.subscribe(subjects.anyRequest(store: store, scope: name.scope)))
            watchLocal(key, operation: StoreOperation.subscribe)
        }
    }

    func unexport(_ name: ScopedName) {
        guard let gone = exported.removeValue(forKey: name) else { return }
        if let subscription = gone.subscription { links.unsubscribe(subscription) }
        for store in gone.registration.stores {
            let key = ScopedName(scope: name.scope, name: store)
            guard var served = servedStores[key] else { continue }
            served.owners -= 1
            guard served.owners == 0 else {
                servedStores[key] = served
                continue
            }
            servedStores[key] = nil
            if let subscription = served.subscription { links.unsubscribe(subscription) }
            watchLocal(key, operation: StoreOperation.unsubscribe)
        }
    }

    func heardAnnouncement(_ message: NATSMessage, now: ContinuousClock.Instant) {
        guard var announcement = try? PayloadCodec.decode(NATSAnnouncement.self, from: message.payload), announcement.instance != instance,
            (1...64).contains(announcement.instance.utf8.count), (1...255).contains(announcement.host.utf8.count),
            !announcement.host.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { return }
        // A motherboard speaks for its own host only: the subject's host token is the one the
        // server let its user publish under.
        guard subjects.host(ofMembership: message.subject) == announcement.host else {
            return refuseAnnouncement(.host, "an announcement of host '\(announcement.host.escapedForDisplay())' on \(message.subject)", now: now)
        }
        // One instance is one host: an instance heard from another host is another's.
        if let known = peers[announcement.instance], known.announcement.host != announcement.host {
            return refuseAnnouncement(.instance, "instance \(announcement.instance) announced by two hosts", now: now)
        }
        // What the cluster can make this motherboard hold is bounded: so many motherboards, so
        // many boards each; past that, an announcement is ignored (said once a minute).
        let known = peers[announcement.instance]
        guard known != nil || peers.count < Self.maximumPeers else {
            return refuseAnnouncement(.limits, "more than \(Self.maximumPeers) motherboards", now: now)
        }
        announcement.boards = announcement.boards.filter { BoardID.isValid($0.id.rawValue) }
        guard announcement.boards.count <= Self.maximumBoardsPerPeer else {
            return refuseAnnouncement(.limits, "more than \(Self.maximumBoardsPerPeer) boards from \(announcement.host)", now: now)
        }
        peers[announcement.instance] = Peer(announcement: announcement, lastHeard: now)
        if known == nil {
            logger.info("a motherboard of the fleet joined", metadata: ["host": "\(announcement.host)", "boards": "\(announcement.boards.count)"])
            announceSoon = true
        }
        if known?.announcement.boards != announcement.boards || known?.announcement.host != announcement.host { reconcile(now: now) }
    }

    func refuseAnnouncement(_ kind: AnnouncementRefusal, _ reason: String, now: ContinuousClock.Instant) {
        guard lastRefusedAnnouncement[kind].map({ $0.duration(to: now) >= .seconds(60) }) ?? true else { return }
        lastRefusedAnnouncement[kind] = now
        logger.error("NATS announcement ignored", metadata: ["reason": "\(reason)"])
    }
}
