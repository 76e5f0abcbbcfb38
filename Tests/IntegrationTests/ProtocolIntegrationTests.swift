import BusCore
import BoardKit
import BoardKitTesting
import Foundation
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

            // SIGTERM reaches it (no signal left blocked by the spawning thread) and it says goodbye.
            #expect(await board.stop() == .terminated)
            let gone = try await eventually {
                try await fleet.withClient { try await $0.list().boards.allSatisfy { $0.id != "py.echo" } }
            }
            #expect(gone)
        }
    }
}
