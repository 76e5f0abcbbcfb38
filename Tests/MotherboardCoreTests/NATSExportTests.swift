import BusCore
import BusNATS
import Foundation
import Testing

@testable import MotherboardCore

/// What the motherboard tells its NATS gateway (`export.attach`), how it shows the boards the
/// gateway serves from other hosts, and the fleet's NATS subjects.
@Suite("NATS: the exporter and the subjects")
struct NATSExportTests {
    let exporter = PeerID(Data([0xE1]))
    let gateway = PeerID(Data([0x6A]))
    let local = PeerID(Data([0x10]))

    func attach(_ harness: Harness, secret: String, from peer: PeerID) -> [Envelope] {
        harness.request(
            EnvelopeHeader(kind: .control, typeName: ControlOperation.exportAttach), payload: try! PayloadCodec.encode(UplinkAttach(secret: secret)),
            from: peer)
        return harness.transport.take(for: peer)
    }

    /// A board of another host, as the gateway registers it (over its shared connection).
    func registerFromAfar(_ harness: Harness, _ id: BoardID, host: String) -> [Envelope] {
        var registration = Registration(id: id, pid: 4242, commands: ["greet"], secret: Registration.makeSecret(), sharesConnection: true)
        registration.host = host
        harness.request(EnvelopeHeader(kind: .register, source: id.rawValue), payload: try! PayloadCodec.encode(registration), from: gateway)
        return harness.transport.take(for: gateway)
    }

    @Test func onlyTheGatewayWithTheSecretIsToldOfEveryLocalBoardButThoseOfOtherHosts() throws {
        let harness = try Harness()
        harness.motherboard.exportSecret = "export-secret"
        harness.register("auth.login", peer: local, secret: "mine")
        // No secret, a wrong one: refused, and told nothing after.
        #expect(attach(harness, secret: "guess", from: harness.client).map(\.header.typeName) == ["unauthorized"])
        #expect(attach(harness, secret: "", from: exporter).map(\.header.typeName) == ["unauthorized"])
        // The right one: answered, then told of the boards already here, without secret or schemas.
        let told = attach(harness, secret: "export-secret", from: exporter)
        #expect(told.map(\.header.kind) == [.reply, .control])
        #expect(told.last?.header.typeName == ControlOperation.exportBoard)
        let pushed = try PayloadCodec.decode(Registration.self, from: try #require(told.last).payload)
        #expect(pushed.id == "auth.login" && pushed.secret == nil && pushed.schemas == nil)
        // A board the gateway serves from another host is not told back to it, and shows its host.
        #expect(registerFromAfar(harness, "demo.greeter", host: "host-b").map(\.header.kind) == [.reply])
        #expect(harness.transport.take(for: exporter).isEmpty)
        let listed = try harness.list().boards
        #expect(listed.first { $0.id == "demo.greeter" }?.host == "host-b")
        #expect(listed.first { $0.id == "auth.login" }?.host == nil)
        // A local board taking an id another host serves is refused, with the host named.
        let refused = harness.register("demo.greeter", peer: PeerID(Data([0x11])), secret: "other")
        #expect(refused.map(\.header.typeName) == ["idInUse"])
        #expect(refused.first.map { String(decoding: $0.payload, as: UTF8.self) }?.contains("host-b") == true)
        // A new local board, then its leaving: told.
        harness.register("app.dashboard", peer: PeerID(Data([0x12])))
        #expect(harness.transport.take(for: exporter).map(\.header.typeName) == [ControlOperation.exportBoard])
        harness.request(EnvelopeHeader(kind: .unregister, source: "app.dashboard"), from: PeerID(Data([0x12])))
        #expect(harness.transport.take(for: exporter).map(\.header.typeName) == [ControlOperation.exportGone])
        // A board leaving that came from another host: not told.
        harness.request(EnvelopeHeader(kind: .unregister, source: "demo.greeter"), from: gateway)
        #expect(harness.transport.take(for: exporter).isEmpty)
    }

    @Test func aMotherboardWithoutNATSHasNoExporterToAttach() throws {
        let harness = try Harness()
        #expect(attach(harness, secret: "", from: exporter).map(\.header.typeName) == ["unauthorized"])
        // A plain board's host field is not read: only a gateway's shared connection sets a host.
        var registration = Registration(id: "liar", pid: 9, secret: "s")
        registration.host = "elsewhere"
        harness.request(EnvelopeHeader(kind: .register, source: "liar"), payload: try PayloadCodec.encode(registration), from: local)
        #expect(try harness.list().boards.first?.host == nil)
    }

    @Test func namesAreSubjectTokensAndBack() throws {
        let cases = ["demo.greeter", "a", "shop/eu", "~", "%", "%41", "a b", "é", "名前", "🙂.x", "*", ">", "x-y_z09", "a.b.c.d"]
        for name in cases {
            let token = NATSSubjects.token(name)
            // One token: none of the characters NATS gives a meaning, and printable ASCII only.
            #expect(!token.contains(".") && !token.contains("*") && !token.contains(">") && !token.contains(" "), "\(name) → \(token)")
            #expect(token.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0.value < 0x7F })
            #expect(NATSSubjects.untoken(Substring(token)) == name, "\(name) → \(token)")
        }
        #expect(NATSSubjects.token("demo.greeter") == "demo%2Egreeter")
        #expect(NATSSubjects.token("") == "~")
        #expect(NATSSubjects.token("é") == "%C3%A9")
        // Only the spellings token(_:) makes are read: no lower-case hex, no escaped plain byte,
        // no cut escape, no invalid UTF-8 (a multi-byte character cut in two).
        for bad in ["%2e", "%41", "%4", "%", "%C3", "%FF", "a%2", "a.b", "", "a*"] {
            #expect(NATSSubjects.untoken(Substring(bad)) == nil, "\(bad)")
        }
    }

    @Test func requestSubjectsAreReadBackAndOthersAreNot() throws {
        let subjects = try NATSSubjects(fleet: "shop")
        let command = subjects.board("demo.greeter", scope: .root, kind: .command, typeName: "greet")
        #expect(command == "boardbus.shop.board.~.demo%2Egreeter.command.greet")
        let read = try #require(subjects.request(command))
        #expect(read.isStore == false && read.scope == .root && read.name == "demo.greeter" && read.kind == .command && read.typeName == "greet")
        let store = subjects.store("orders", scope: "shop/eu", kind: .dispatch, typeName: "place")
        #expect(store == "boardbus.shop.store.shop%2Feu.orders.dispatch.place")
        #expect(subjects.request(store)?.isStore == true)
        #expect(subjects.request(store)?.scope == "shop/eu")
        #expect(subjects.anyRequest(board: "demo.greeter", scope: .root) == "boardbus.shop.board.~.demo%2Egreeter.>")
        #expect(subjects.changes(store: "orders", scope: .root, host: "host-a") == "boardbus.shop.change.host-a.~.orders")
        for other in [
            "boardbus.other.board.~.x.command.greet", "boardbus.shop.board.~.x.action.greet", "boardbus.shop.board.~.x.command",
            "boardbus.shop.board.~.~.command.greet", "boardbus.shop.board.~.x.command.greet.more", "boardbus.shop.announce",
            "boardbus.shop.board.~.x%2e.command.greet",
        ] {
            #expect(subjects.request(other) == nil, "\(other)")
        }
    }

    /// What a motherboard publishes as itself names its host in a token of its own, read back only
    /// in the one spelling; a host with dots or spaces is one token too. Its inbox is its own.
    @Test func whatAMotherboardPublishesAsItselfNamesItsHost() throws {
        let subjects = try NATSSubjects(fleet: "shop")
        #expect(subjects.announce(host: "host-a") == "boardbus.shop.announce.host-a")
        #expect(subjects.withdraw(host: "edge.b 1") == "boardbus.shop.withdraw.edge%2Eb%201")
        #expect(subjects.host(ofMembership: "boardbus.shop.announce.host-a") == "host-a")
        #expect(subjects.host(ofMembership: "boardbus.shop.withdraw.edge%2Eb%201") == "edge.b 1")
        for other in [
            "boardbus.shop.announce", "boardbus.shop.announce.~", "boardbus.shop.announce.a.b", "boardbus.other.announce.a",
            "boardbus.shop.hello.a", "boardbus.shop.announce.%2e",
        ] {
            #expect(subjects.host(ofMembership: other) == nil, "\(other)")
        }
        #expect(
            subjects.output("auth.login", scope: .root, typeName: "LoginSucceeded", host: "host-b")
                == "boardbus.shop.output.host-b.~.auth%2Elogin.LoginSucceeded")
        #expect(subjects.anyOutput(board: "auth.login", scope: .root, host: "host-b") == "boardbus.shop.output.host-b.~.auth%2Elogin.*")
        let action = subjects.action("app.announce", scope: "edge", host: "host-a")
        #expect(action == "boardbus.shop.action.host-a.edge.app%2Eannounce")
        let read = try #require(subjects.action(action))
        #expect(read.host == "host-a" && read.scope == "edge" && read.name == "app.announce")
        // The subject before hosts were named, and one whose host is the empty name's token.
        #expect(subjects.action("boardbus.shop.action.~.app%2Eannounce") == nil)
        #expect(subjects.action("boardbus.shop.action.~.~.app%2Eannounce") == nil)
        #expect(subjects.inbox(host: "host-a") == "_INBOX.boardbus.shop.host-a")
    }

    @Test func credentialsAreSeenInAURLOrAFile() throws {
        #expect(try NATSSettings(servers: ["nats://127.0.0.1:4222"]).hasCredentials == false)
        #expect(try NATSSettings(servers: ["nats://127.0.0.1:4222", "nats://host-a:pw@10.0.0.2:4222"]).hasCredentials)
        #expect(try NATSSettings(servers: ["nats://s3cr3t@127.0.0.1:4222"]).hasCredentials)
        #expect(try NATSSettings(servers: ["nats://127.0.0.1:4222/path@x"]).hasCredentials == false)
        #expect(try NATSSettings(servers: ["nats://127.0.0.1:4222"], credentialsFile: "a.creds").hasCredentials)
    }

    @Test func aFleetNameIsOneTokenOfPlainCharacters() {
        for bad in ["", "a.b", "a b", "*", ">", "é", String(repeating: "f", count: 65)] {
            #expect(throws: BusError.self) { try NATSSubjects(fleet: bad) }
        }
        #expect(throws: Never.self) { try NATSSubjects(fleet: String(repeating: "f", count: 64)) }
    }

    @Test func theManifestsNATSIsChecked() throws {
        let text = #"{"nats": {"servers": ["nats://10.0.0.1:4222"], "fleet": "shop", "host": "edge-a", "credentials": "a.creds", "tlsCA": "ca.pem"}}"#
        let manifest = try FleetManifest.parse(Data(text.utf8), source: "fleet.json")
        #expect(manifest.nats?.servers == ["nats://10.0.0.1:4222"] && manifest.nats?.fleet == "shop" && manifest.nats?.host == "edge-a")
        #expect(throws: BusError.self) { try FleetManifest.parse(Data(#"{"nats": {"server": ["nats://x:1"]}}"#.utf8), source: "f") }
        #expect(throws: BusError.self) { try NATSSettings(servers: ["http://10.0.0.1:4222"]) }
        #expect(throws: BusError.self) { try NATSSettings(servers: [" ", ""]) }
    }
}
