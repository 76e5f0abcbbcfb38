import BusCore
import Foundation
import MotherboardTesting
import Testing

@testable import MotherboardCore

/// What the motherboard tells its NATS gateway (`export.attach`), how it shows the boards the
/// gateway serves from other hosts.
@Suite("NATS: the exporter")
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
        harness.motherboard.links.exportSecret = "export-secret"
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

    @Test func theManifestsNATSIsChecked() throws {
        let text = #"{"nats": {"servers": ["nats://10.0.0.1:4222"], "fleet": "shop", "host": "edge-a", "credentials": "a.creds", "tlsCA": "ca.pem"}}"#
        let manifest = try FleetManifest.parse(Data(text.utf8), source: "fleet.json")
        #expect(manifest.nats?.servers == ["nats://10.0.0.1:4222"] && manifest.nats?.fleet == "shop" && manifest.nats?.host == "edge-a")
        #expect(throws: BusError.self) { try FleetManifest.parse(Data(#"{"nats": {"server": ["nats://x:1"]}}"#.utf8), source: "f") }
    }
}
