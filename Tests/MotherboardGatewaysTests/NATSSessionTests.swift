import BusCore
import BusNATS
import Foundation
import Logging
import MotherboardTesting
import Testing

@testable import MotherboardGateways

/// The NATS gateway's state machine without a server or sockets: the cluster's messages, its own
/// motherboard's and the time in, what it publishes and hands the broker recorded. Host `a` is
/// this motherboard; host `b` serves `demo.greeter` (store `notes`).
@Suite("NATS session")
struct NATSSessionTests {
    let links = RecordingNATSLinks()
    let session: NATSSession
    let subjects: NATSSubjects
    let now = ContinuousClock.now
    let greeter = ScopedName(scope: .root, name: "demo.greeter")

    init() throws {
        try self.init(servers: ["nats://a:secret@127.0.0.1:4222"])
    }

    init(servers: [String]) throws {
        let settings = try NATSGatewaySettings(nats: NATSSettings(servers: servers), fleet: "demo", host: "a")
        subjects = settings.subjects
        session = NATSSession(settings: settings, secret: "s3cret", logger: Logger(label: "test"), links: links)
    }

    /// Joined the fleet, kept to its subjects by the server, attached to its motherboard.
    func joined() throws {
        session.join()
        session.checkPermissionsIfDue(now: now)
        session.tick(now: now)
        let attach = try #require(links.toMotherboards.first { $0.header.typeName == ControlOperation.exportAttach })
        session.fromOwnMotherboard(attach.reply(), now: now)
    }

    func announcement(from host: String, on subjectHost: String? = nil, boards: [Registration]) throws -> NATSMessage {
        let announcement = NATSAnnouncement(
            instance: "\(host)1", host: host, joined: 1, intervalMilliseconds: 1000, boards: boards, actions: true)
        return NATSMessage(
            subject: subjects.announce(host: subjectHost ?? host), payload: try PayloadCodec.encode(announcement),
            subscription: try #require(links.subscription(to: subjects.anyAnnounce)))
    }

    /// `b` announced `demo.greeter`, which the broker here accepted.
    func greeterOfBRegistered() throws {
        try joined()
        let registration = Registration(id: "demo.greeter", pid: 7, commands: ["greet"], stores: ["notes"])
        session.fromCluster(try announcement(from: "b", boards: [registration]), now: now)
        let register = try #require(links.asBoards.last { $0.header.kind == .register })
        session.forServedBoard(register.reply(), now: now)
    }

    /// A command of this motherboard's client for the greeter, sent to the cluster: its reply subject.
    func greetSent(correlationID: UInt64 = 9) throws -> String {
        var header = EnvelopeHeader(kind: .command, correlationID: correlationID, target: "demo.greeter", typeName: "greet")
        header.flags.insert(.replyExpected)
        session.forServedBoard(Envelope(header: header, payload: Data("{}".utf8)), now: now)
        let request = try #require(links.published.last)
        #expect(request.subject == subjects.board("demo.greeter", scope: .root, kind: .command, typeName: "greet"))
        return try #require(request.reply)
    }

    /// This motherboard's `demo.clock`, pushed to the gateway as the exporter.
    func clockExported() throws {
        let registration = Registration(id: "demo.clock", pid: 3, commands: ["now"])
        session.fromOwnMotherboard(
            Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.exportBoard), payload: try PayloadCodec.encode(registration)),
            now: now)
    }

    func answer(on subject: String, status: String = "ok", payload: String = "{}") throws -> NATSMessage {
        NATSMessage(
            subject: subject, headers: [NATSHeader.status: status], payload: Data(payload.utf8),
            subscription: try #require(links.subscription(to: "\(session.inboxPrefix).*")))
    }

    @Test func anotherHostsBoardIsRegisteredHereAndHeardOnlyUnderThatHostsToken() throws {
        try greeterOfBRegistered()
        let register = try #require(links.asBoards.first { $0.header.kind == .register })
        let imported = try PayloadCodec.decode(Registration.self, from: register.payload)
        #expect(imported.host == "b" && imported.sharesConnection == true && imported.secret != nil)
        // Its outputs and its store's changes only as host b publishes them.
        let subscribed = Set(links.subscriptions.values)
        #expect(subscribed.contains(subjects.anyOutput(board: "demo.greeter", scope: .root, host: "b")))
        #expect(subscribed.contains(subjects.changes(store: "notes", scope: .root, host: "b")))
    }

    @Test func anAnnouncementOnAnotherHostsSubjectIsIgnored() throws {
        try joined()
        let registration = Registration(id: "demo.greeter", pid: 7, commands: ["greet"])
        // Host c's user publishing as b's (or b's naming itself c): neither speaks for the other.
        session.fromCluster(try announcement(from: "c", on: "b", boards: [registration]), now: now)
        #expect(links.asBoards.isEmpty)
        #expect(session.peers.isEmpty)
    }

    @Test func anAnswerIsTakenOnlyWithItsRequestsRandomToken() throws {
        try greeterOfBRegistered()
        let reply = try greetSent()
        let number = try #require(reply.split(separator: ".").last?.split(separator: "-").first)
        let before = links.asBoards.count
        // Who guesses the counting number but not the token answers nobody.
        session.fromCluster(try answer(on: "\(session.inboxPrefix).\(number)-0", status: "ok", payload: #"{"forged":true}"#), now: now)
        session.fromCluster(try answer(on: "\(session.inboxPrefix).\(number)", status: "ok"), now: now)
        #expect(links.asBoards.count == before)
        session.fromCluster(try answer(on: reply, payload: #"{"text":"hi"}"#), now: now)
        let answered = try #require(links.asBoards.last)
        #expect(answered.header.kind == .reply && answered.header.correlationID == 9 && answered.header.source == "demo.greeter")
        #expect(String(decoding: answered.payload, as: UTF8.self) == #"{"text":"hi"}"#)
        // Once answered, the same subject again is nobody's.
        session.fromCluster(try answer(on: reply), now: now)
        #expect(links.asBoards.count == before + 1)
    }

    @Test func aDroppedConnectionFailsWhatWasInFlightAtOnceAsUnreachable() throws {
        try greeterOfBRegistered()
        _ = try greetSent(correlationID: 11)
        links.disconnections = 1
        session.connectionChanged(.disconnected(epoch: 1))
        let failed = try #require(links.asBoards.last)
        #expect(failed.header.kind == .error && failed.header.correlationID == 11)
        #expect(failed.carriedError?.code == .unreachable)
        // Sent after the drop: waits for the connection, not failed with the others.
        _ = try greetSent(correlationID: 12)
        session.connectionChanged(.disconnected(epoch: 1))
        #expect(links.asBoards.last?.header.correlationID == 11)
    }

    @Test func aRequestUnansweredByItsDeadlineIsATimeout() throws {
        try greeterOfBRegistered()
        _ = try greetSent(correlationID: 13)
        session.tick(now: now.advanced(by: NATSSession.defaultTimeout + .seconds(1)))
        let failed = try #require(links.asBoards.last)
        #expect(failed.header.correlationID == 13 && failed.carriedError?.code == .timeout)
    }

    @Test func aServerThatLetsItSpeakForAnotherHostIsLeftWithoutAnAnnouncement() throws {
        links.letsPublishAsAnotherHost = true
        try joined()
        #expect(session.mustLeave)
        session.tick(now: now)
        #expect(!links.published.contains { $0.subject == subjects.announce(host: "a") })
    }

    @Test func aServerThatAsksNoCredentialsIsJoinedAndSaidSo() throws {
        let open = try NATSSessionTests(servers: ["nats://127.0.0.1:4222"])
        open.links.letsPublishAsAnotherHost = true
        try open.joined()
        #expect(!open.session.mustLeave)
        try open.clockExported()
        open.session.tick(now: now)
        #expect(open.links.published.contains { $0.subject == open.subjects.announce(host: "a") })
    }

    @Test func leavingWithdrawsAndAnswersTheClustersRequestsUnreachable() throws {
        try joined()
        try clockExported()
        let requests = try #require(links.subscription(to: subjects.anyRequest(board: "demo.clock", scope: .root)))
        session.fromCluster(
            NATSMessage(
                subject: subjects.board("demo.clock", scope: .root, kind: .command, typeName: "now"), reply: "_INBOX.caller.1",
                payload: Data("{}".utf8), subscription: requests),
            now: now)
        let handed = try #require(links.toMotherboards.last)
        #expect(handed.header.kind == .command && handed.header.target == "demo.clock" && handed.header.onBehalfOf == "nats")
        session.leave()
        #expect(links.published.contains { $0.subject == subjects.withdraw(host: "a") })
        let answer = try #require(links.published.last { $0.subject == "_INBOX.caller.1" })
        #expect(answer.header(NATSHeader.status) == BusError.Code.unreachable.name)
    }

    @Test func aRequestWhoseReplySubjectIsTheFleetsOwnIsDropped() throws {
        try joined()
        try clockExported()
        let requests = try #require(links.subscription(to: subjects.anyRequest(board: "demo.clock", scope: .root)))
        let handedBefore = links.toMotherboards.count
        // Its answer would go out as this host's announcement.
        session.fromCluster(
            NATSMessage(
                subject: subjects.board("demo.clock", scope: .root, kind: .command, typeName: "now"), reply: subjects.announce(host: "a"),
                payload: Data("{}".utf8), subscription: requests),
            now: now)
        #expect(links.toMotherboards.count == handedBefore)
    }
}
