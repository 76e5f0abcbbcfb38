import BusCore
import BusNATS
import Foundation
import Testing

/// The fleet's NATS subjects and the connection settings.
@Suite("NATS: the subjects and settings")
struct NATSSubjectsTests {
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

    @Test func settingsRefuseWhatIsNotANATSServer() {
        #expect(throws: BusError.self) { try NATSSettings(servers: ["http://10.0.0.1:4222"]) }
        #expect(throws: BusError.self) { try NATSSettings(servers: [" ", ""]) }
    }
}
