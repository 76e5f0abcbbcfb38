import BoardKit
import BoardKitTesting
import CounterIO
import Foundation
import Testing

@Suite("Counter board", .timeLimit(.minutes(2)))
struct CounterTests {
    /// In one process, in milliseconds: the broker's routing logic and the board, joined in memory.
    @Test func countsAndResetsInProcess() async throws {
        try await InProcessFleet.with { fleet in
            try await fleet.start(CounterIO.board(environment: [:]))
            _ = try await fleet.client.interact(with: CounterIO.id, CounterIO.Add(amount: 2))
            #expect(try await fleet.client.interact(with: CounterIO.id, CounterIO.Add(amount: 3)).value == 5)
            #expect(try await fleet.client.send(action: CounterIO.Reset()) == 1)
            #expect(try await fleet.client.interact(with: CounterIO.id, CounterIO.Read()).value == 0)
        }
    }

    /// The real thing: the motherboard process starts the Counter executable from a manifest, and
    /// busctl talks to it over ZeroMQ.
    @Test func runsAsItsOwnProcessUnderTheMotherboard() async throws {
        let manifest = #"{ "boards": [ { "id": "example.counter", "executable": "Counter" } ] }"#
        try await TestFleet.with(manifest: manifest) { fleet in
            let added = try await fleet.busctl("call", "example.counter", "add", #"{"amount":4}"#, "--json")
            #expect(added.exitCode == 0, "\(added.standardError)")
            #expect(try added.decodedOutput(as: CounterIO.Count.self).value == 4)
            let listed = try await fleet.busctl("list")
            #expect(listed.standardOutput.contains("example.counter"))
        }
    }
}
