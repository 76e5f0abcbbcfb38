import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import BoardBusDemoGreeterIO
import Testing

/// docs/PROTOCOL.md is complete enough for another language: a board written in Python with
/// pyzmq from the document alone registers, answers busctl, and leaves cleanly.
@Suite("Protocol from another language", .serialized, .timeLimit(.minutes(2)))
struct ProtocolIntegrationTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/echo_board.py").path

    @Test func aPythonBoardRegistersAndAnswersBusctl() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let board = try await fleet.startBoard(path: "/usr/bin/python3", arguments: [Self.script], id: "py.echo")
            let listed = try await fleet.busctl("status", "py.echo", "--json")
            let info = try decode(BoardInfo.self, from: listed)
            #expect(info.pid == board.pid)
            #expect(info.commands == ["echo"])

            let echoed = try await fleet.busctl("call", "py.echo", "echo", #"{"x":[1,2]}"#, "--json")
            #expect(echoed.exitCode == 0, "\(echoed.standardError)")
            #expect(echoed.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"x":[1,2]}"#)

            let unknown = try await fleet.busctl("call", "py.echo", "shout")
            #expect(unknown.standardError.hasPrefix("busctl: unknownCommand:"))

            // The broker killed and started again: the board's next heartbeat is answered
            // `notRegistered`, and it registers again, as 5.1 says.
            try await fleet.restartBrokerAfterKill()
            let back = try await eventually(timeout: .seconds(15)) {
                (try? await fleet.busctl("call", "py.echo", "echo", #"{"again":true}"#, "--json"))?.exitCode == 0
            }
            #expect(back, "the Python board did not register again after the broker restarted")

            // SIGTERM reaches it (no signal left blocked by the spawning thread) and it says goodbye.
            #expect(await board.stop() == .terminated)
            let gone = try await eventually {
                try await fleet.withClient { try await $0.list().boards.allSatisfy { $0.id != "py.echo" } }
            }
            #expect(gone)
        }
    }
}

/// The minimal board of PROTOCOL §8, run as printed there (with §3.1's header codec): it
/// registers, answers, registers again after the broker is killed and started again, and says
/// goodbye on SIGTERM. The document cannot drift from what works.
@Suite("PROTOCOL's minimal board", .serialized, .timeLimit(.minutes(2)))
struct DocumentedBoardTests {
    /// The Python blocks of §3.1 (after "Python:") and §8, as one script.
    static func documentedBoard() throws -> String {
        let protocolURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/PROTOCOL.md")
        let text = try String(contentsOf: protocolURL.standardized, encoding: .utf8)
        func block(after marker: String) throws -> String {
            let start = try #require(text.range(of: marker))
            let open = try #require(text.range(of: "```python\n", range: start.upperBound..<text.endIndex))
            let close = try #require(text.range(of: "```", range: open.upperBound..<text.endIndex))
            return String(text[open.upperBound..<close.lowerBound])
        }
        return try block(after: "\nPython:\n") + "\n" + block(after: "## 8. A minimal Python board")
    }

    @Test func theMinimalBoardOfSection8WorksAsPrinted() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let script = "\(fleet.directory)/minimal_board.py"
            try Self.documentedBoard().write(toFile: script, atomically: true, encoding: .utf8)
            var environment = fleet.environment
            environment["BOARDBUS_BOARD_ID"] = "py.minimal"
            let board = try await ChildProcess(
                executable: "/usr/bin/python3", arguments: [script], environment: environment, directory: fleet.directory, name: "minimal-board")
            func answers() async -> Bool {
                (try? await fleet.busctl("call", "py.minimal", "echo", #"{"x":1}"#, "--json"))?.standardOutput.contains(#"{"x":1}"#) == true
            }
            #expect(await eventually(timeout: .seconds(15)) { await answers() }, "\(board.standardError)")
            try await fleet.restartBrokerAfterKill()
            #expect(await eventually(timeout: .seconds(15)) { await answers() }, "it did not register again: \(board.standardError)")
            #expect(await board.stop() == .terminated)
            let gone = try await eventually {
                try await fleet.withClient { try await $0.list().boards.allSatisfy { $0.id != "py.minimal" } }
            }
            #expect(gone)
        }
    }
}

/// The CBOR payload format (docs/PROTOCOL.md, "Payload content types") against cbor2, an
/// independent implementation, in real processes: a Python board that decodes what BoardKit
/// encodes and answers in cbor2's canonical form, and a Python client that calls a BoardKit board.
@Suite("CBOR payloads with another language", .serialized, .timeLimit(.minutes(2)))
struct CBORProtocolIntegrationTests {
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python").path

    /// Fields at their limits: multi-byte text (one with a two-byte character across the
    /// 23/24-byte boundary of a CBOR head), numbers JSON cannot carry, integer extremes, bytes.
    struct Probe: BoardCommand {
        static let commandName = "describe"
        typealias Reply = Described
        var text = "Zoë 🚀 東京"
        var cut = String(repeating: "a", count: 23) + "é"
        var numbers: [Double] = [.infinity, -.infinity, -0.0, 1e20, 1.5, .leastNonzeroMagnitude, .greatestFiniteMagnitude]
        var notANumber = Double.nan
        var least = Int64.min
        var most = UInt64.max
        var small: Int8 = -128
        var bytes = Data([0, 0xFF, 0x80, 0x7F])
        var missing: String? = nil
        var nested: [String: [Int]] = ["b": [1, -1, 65_536], "a": []]
        var flag = true
    }

    struct Described: BusPayload {
        var echo: Probe
        var kinds: [String: String]
        var characters: [String: Int]
    }

    @Test func aPythonBoardDecodesWhatBoardKitEncodesAndBoardKitDecodesItsCanonicalReply() async throws {
        try await TestFleet.with(manifest: #"{"boards": []}"#) { fleet in
            _ = try await fleet.startBoard(path: "/usr/bin/python3", arguments: ["\(Self.scripts)/cbor_board.py"], id: "py.cbor")
            try await fleet.withClient { client in
                client.payloadFormat = .cbor
                let probe = Probe()
                let described = try await client.interact(with: "py.cbor", probe, timeout: .seconds(10))
                // What cbor2 read: the kinds and character counts only a real decode can tell.
                #expect(
                    described.kinds == [
                        "text": "str", "cut": "str", "numbers": "list", "notANumber": "nan", "least": "int", "most": "int", "small": "int",
                        "bytes": "bytes", "nested": "dict", "flag": "bool",
                    ])
                #expect(described.characters == ["text": probe.text.unicodeScalars.count, "cut": 24])
                // What BoardKit read back from cbor2's canonical encoding (half floats for inf, -0, 1.5).
                let echo = described.echo
                #expect(echo.text == probe.text && echo.cut == probe.cut && echo.bytes == probe.bytes && echo.nested == probe.nested)
                #expect(echo.numbers.map(\.bitPattern) == probe.numbers.map(\.bitPattern))
                #expect(echo.notANumber.isNaN && echo.missing == nil && echo.flag)
                #expect(echo.least == .min && echo.most == .max && echo.small == -128)
            }
            // The same board answers JSON in JSON (busctl speaks JSON only).
            let json = try await fleet.busctl("call", "py.cbor", "describe", #"{"text":"é"}"#, "--json")
            #expect(json.exitCode == 0, "\(json.standardError)")
            #expect(json.standardOutput.contains(#""characters": {"text": 1}"#), "\(json.standardOutput)")
        }
    }

    @Test func aBoardKitBoardAnswersAPythonClientInCBORAndRefusesAContentTypeItDoesNotRead() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let name = "Zoë 🚀"
            let result = try await ChildProcess(
                executable: "/usr/bin/python3",
                arguments: ["\(Self.scripts)/cbor_client.py", fleet.address.endpoint, "demo.greeter", "greet", #"{"name": "\#(name)"}"#],
                environment: fleet.environment, directory: fleet.directory, name: "cbor-client"
            ).wait(timeout: .seconds(30))
            #expect(result.exitCode == 0, "\(result.standardError)")
            struct Printed: Decodable {
                var kind: UInt8
                var contentType: String?
                var reply: [String: String]
            }
            let printed = try JSONDecoder().decode(Printed.self, from: Data(result.standardOutput.utf8))
            #expect(printed.kind == MessageKind.reply.rawValue)
            #expect(printed.contentType == "application/cbor")
            #expect(printed.reply == ["message": "Hello, \(name)!"])

            try await fleet.withClient { client in
                // A content type no BoardKit board reads: a typed refusal, not a misread payload.
                let unknown = await #expect(throws: BusError.self) {
                    _ = try await client.call(GreeterIO.id, command: "greet", payload: Data("x".utf8), contentType: "application/x-protobuf")
                }
                #expect(unknown?.code == .unsupportedContentType)
                // A CBOR payload that is not the command's type: typeMismatch, answered in JSON.
                let wrong = await #expect(throws: BusError.self) {
                    _ = try await client.call(
                        GreeterIO.id, command: "greet", payload: Data([0xA1, 0x61, 0x78, 0x01]), contentType: "application/cbor")
                }
                #expect(wrong?.code == .typeMismatch)
                // Content types are for commands and replies: an action with one is refused by the broker.
                var header = EnvelopeHeader(kind: .action, typeName: "anything")
                header.contentType = PayloadFormat.cborContentType
                let action = await #expect(throws: BusError.self) {
                    _ = try await client.request(Envelope(header: header, payload: Data([0xA0])), timeout: .seconds(5))
                }
                #expect(action?.code == .badArgument)
                // And the typed round trip over BoardKit on both ends.
                client.payloadFormat = .cbor
                let greeting = try await client.interact(with: GreeterIO.id, GreeterIO.Greet(name: name))
                #expect(greeting.message == "Hello, \(name)!")
            }
        }
    }
}
