import BusCore
import Foundation
import Testing

@Suite("Monitor messages")
struct MonitorMessagesTests {
    /// The payload excerpt never splits a character: a cut inside a multi-byte one falls before it.
    @Test func anExcerptIsCutBeforeACharacterThatDoesNotFit() {
        let payload = Data(#"{"name":"Zoë 👋"}"#.utf8)  // ë is 2 bytes, 👋 is 4
        for limit in 0...payload.count + 1 {
            let (text, cut) = MonitorEvent.excerpt(payload, limit: limit)
            #expect(text.utf8.count <= limit || !cut)
            #expect(!text.contains("\u{FFFD}"), "limit \(limit): \(text)")
            #expect(cut == (limit < payload.count))
            #expect(payload.starts(with: Data(text.utf8)))
        }
        #expect(MonitorEvent.excerpt(payload, limit: 12).text == #"{"name":"Zo"#)
        #expect(MonitorEvent.excerpt(payload, limit: 16).text == #"{"name":"Zoë "#)
    }

    /// The broker's hand-written JSON decodes to the same push, whatever the strings hold.
    @Test func theHandWrittenJSONDecodesToTheSamePush() throws {
        let event = MonitorEvent(
            time: 1_795_472_710.0104, scope: "/", kind: "command", source: ":006b8b4572", target: "demo.greeter",
            type: "gr\"e\\et\n\u{1}\t👋", correlationID: .max, payloadBytes: 15, error: "unknownCommand", roundTripMicroseconds: 867,
            trace: "4bf92f3577b34da6a3ce929d0e0e4736", span: "00f067aa0ba902b7", dispatchID: "d\u{7F}1", store: "comments",
            payload: #"{"name":"Zoë"}"#, payloadCut: false)
        for push in [
            MonitorPush(dropped: 3, event: event), MonitorPush(dropped: 120, event: nil),
            MonitorPush(
                event: MonitorEvent(
                    time: 0, scope: "", kind: "reply", source: "", target: "", type: "", correlationID: 0, payloadBytes: 0)),
        ] {
            #expect(try PayloadCodec.decode(MonitorPush.self, from: push.encodedJSON()) == push)
            #expect(try JSONSerialization.jsonObject(with: push.encodedJSON()) is [String: Any])
        }
    }

    /// Issue: a type name carrying a newline and ANSI escapes printed a fake second line and
    /// cleared the screen. Every field a peer chooses is escaped: one message is one line.
    @Test func aMonitorLineCannotBeForgedByWhatAPeerChooses() {
        let forged = "greet\n12:00:00.000000 / reply     demo.greeter → ops -\u{1B}[2J\u{1B}[H"
        let event = MonitorEvent(
            time: 0, scope: "eu\n", kind: "command", source: "a\rb", target: "demo.greeter\u{7}", type: forged, correlationID: 1,
            payloadBytes: 2, trace: "t\u{1B}", dispatchID: "d\n", store: "s\u{2028}", payload: "x\ny\u{1B}[31m")
        let line = event.line
        #expect(!line.unicodeScalars.contains { $0.properties.generalCategory == .control || $0 == "\u{2028}" }, "\(line)")
        #expect(line.split(separator: "\n", omittingEmptySubsequences: false).count == 1)
        #expect(line.contains(#"greet\n12:00:00"#) && line.contains(#"\u{1B}[2J"#), "\(line)")
    }

    /// Issue (#64, 6): an at-least-once activation's id printed as `#9223372036854775811`. A
    /// delivery of the ledger shows as `#d3`; any other id as it is; `--json` keeps the number.
    @Test func aDeliverysCorrelationIDReadsAsItsNumber() throws {
        func line(_ id: UInt64) -> String {
            MonitorEvent(time: 0, scope: "/", kind: "activation", source: "", target: "jobs.worker", type: "Job", correlationID: id, payloadBytes: 2)
                .line
        }
        #expect(line(DeliveryID.bit | 3).contains(" #d3 ") && !line(DeliveryID.bit | 3).contains("9223372036854775811"))
        #expect(line(42).contains(" #42 ") && line(0).contains(" #0 "))
        #expect(line(.max).contains(" #d\(UInt64.max >> 1) "))
        #expect(DeliveryID.number(of: 42) == nil && DeliveryID.number(of: DeliveryID.bit) == 0)
        let event = MonitorEvent(
            time: 0, scope: "/", kind: "activation", source: "", target: "t", type: "T", correlationID: DeliveryID.bit | 3, payloadBytes: 2)
        #expect(try PayloadCodec.decode(MonitorPush.self, from: MonitorPush(event: event).encodedJSON()).event?.correlationID == DeliveryID.bit | 3)
    }

    @Test func filtersCombineListsWithAndAndValuesWithOr() {
        let filter = MonitorFilter(boards: ["a", "b"], kinds: ["command"])
        #expect(filter.matches(kind: "command", scope: "/", source: ":01", target: "b", type: "x", trace: nil))
        #expect(filter.matches(kind: "command", scope: "/", source: "a", target: "motherboard", type: "x", trace: nil))
        #expect(!filter.matches(kind: "reply", scope: "/", source: "a", target: "b", type: "x", trace: nil))
        #expect(!filter.matches(kind: "command", scope: "/", source: "c", target: "d", type: "x", trace: nil))
        let traced = MonitorFilter(traces: ["4bf92f3577b34da6a3ce929d0e0e4736"])
        #expect(!traced.matches(kind: "command", scope: "/", source: "a", target: "b", type: "x", trace: nil))
        #expect(traced.matches(kind: "command", scope: "/", source: "a", target: "b", type: "x", trace: "4bf92f3577b34da6a3ce929d0e0e4736"))
    }

    @Test func refusesAKindOrTraceThatCouldMatchNothing() {
        #expect(throws: BusError.self) { try MonitorFilter(kinds: ["comand"]).validate() }
        #expect(throws: BusError.self) { try MonitorFilter(traces: ["xyz"]).validate() }
        #expect(throws: BusError.self) { try MonitorRequest(window: 0).validate() }
        #expect(throws: BusError.self) { try MonitorRequest(payloadBytes: -1).validate() }
        #expect(throws: BusError.self) { try MonitorRequest(payloadBytes: MonitorRequest.maximumPayloadBytes + 1).validate() }
        #expect(throws: Never.self) { try MonitorRequest(filter: MonitorFilter(kinds: MonitorEvent.kindNames)).validate() }
    }
}
