import BusCore
import BoardKit
import BoardKitTesting
import BusZeroMQ
import Foundation
import BoardBusDemoGreeterIO
import Testing

/// The broker survives any bytes on its socket.
@Suite("Hostile input", .serialized, .timeLimit(.minutes(3)))
struct HostileInputIntegrationTests {
    /// Random frames: pure garbage, truncated headers, valid headers of every kind with random
    /// fields and payloads, too many or too few frames, oversized payloads.
    static func randomMessage(_ generator: inout SeededRandom) throws -> [Data] {
        func bytes(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        switch Int.random(in: 0..<6, using: &generator) {
        case 0:
            return (0..<Int.random(in: 0...5, using: &generator)).map { _ in bytes(Int.random(in: 0...64, using: &generator)) }
        case 1:
            let header = try HeaderCodec.encode(EnvelopeHeader(kind: .command, target: "demo.greeter", typeName: "greet"))
            return [Data(header.prefix(Int.random(in: 0..<header.count, using: &generator))), bytes(8)]
        case 2, 3:
            let kind = MessageKind.allCases.randomElement(using: &generator) ?? .command
            let targets = ["demo.greeter", "auth.login", "", "nope", "comments", String(repeating: "x", count: 300)]
            let header = EnvelopeHeader(
                kind: kind, flags: MessageFlags(rawValue: UInt16.random(in: 0...3, using: &generator)),
                correlationID: UInt64.random(in: 0...5, using: &generator),
                timeoutMilliseconds: UInt32.random(in: 0...50, using: &generator),
                source: targets.randomElement(using: &generator) ?? "", target: targets.randomElement(using: &generator) ?? "",
                typeName: ["greet", "list", "status", "flows", "subscribe", "change", "register", ""].randomElement(using: &generator) ?? "")
            let payloads = [Data(), Data("{}".utf8), bytes(20), Data(#"{"id":"demo.greeter","pid":1}"#.utf8)]
            return try Envelope(header: header, payload: payloads.randomElement(using: &generator) ?? Data()).frames()
        case 4:
            let header = EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 9, target: "demo.greeter")
            return try Envelope(header: header, payload: Data(count: (4 << 20) + 10)).frames()
        default:
            var header = try HeaderCodec.encode(EnvelopeHeader(kind: .action, typeName: "app.announce"))
            header[Int.random(in: 0..<header.count, using: &generator)] ^= 0xFF
            return [Data(header), bytes(4), bytes(4)]
        }
    }

    @Test func thousandsOfRandomFramesLeaveTheBrokerServing() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let sent = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                var generator = SeededRandom(seed: 2026)
                var sent = 0
                for _ in 0..<5000 {
                    let message = try Self.randomMessage(&generator)
                    // Wait (boundedly) while our queue to the broker is full; never give up silently.
                    for _ in 0..<5000 {
                        if try socket.send(message) == .sent {
                            sent += 1
                            break
                        }
                        while (try? socket.receive()) != nil {}
                        usleep(1000)
                    }
                    // Read and discard what the broker answers, so its queue to us never fills.
                    while (try? socket.receive()) != nil {}
                }
                return sent
            }
            #expect(sent == 5000)
            let list = try await fleet.busctl("list", "--json")
            #expect(list.exitCode == 0, "\(list.standardError)")
            #expect(try decode(BoardList.self, from: list).boards.count == 3)
            let call = try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"still here"}"#)
            #expect(call.standardOutput.contains("Hello, still here!"))
        }
    }

    /// Large payloads cross the broker intact both ways (they travel without copies between
    /// libzmq and the SDK), and one over the limit gets a typed `tooLarge` answer.
    @Test func largePayloadsRoundTripAndOversizedOnesAreRefused() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            try await fleet.withClient { client in
                for length in [20_000, 300_000, 3_000_000] {
                    let name = String((0..<length).map { index in Character(UnicodeScalar(UInt8(97 + index % 26))) })
                    let greeting = try await client.interact(with: GreeterIO.id, GreeterIO.Greet(name: name), timeout: .seconds(20))
                    #expect(greeting.message == "Hello, \(name)!")
                }
                let oversized = Envelope(
                    header: EnvelopeHeader(kind: .command, target: GreeterIO.id.rawValue, typeName: "greet"), payload: Data(count: (4 << 20) + 1))
                let refused = try #require(throws: BusError.self) { try client.send(oversized) }
                #expect(refused.code == .tooLarge)
            }
            // A peer that ignores the limit is answered by the broker with a typed error.
            let answer = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                let header = EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 77, target: GreeterIO.id.rawValue, typeName: "greet")
                _ = try socket.send(try Envelope(header: header, payload: Data(count: (4 << 20) + 10)).frames())
                guard socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() else { return nil as Envelope? }
                return try Envelope(frames: frames)
            }
            let reply = try #require(answer)
            #expect(reply.header.correlationID == 77)
            #expect(reply.carriedError?.code == .tooLarge)
        }
    }
}

extension HostileInputIntegrationTests {
    /// A second frame after a message with a large payload (one the broker takes without a copy)
    /// is part of the same message: the broker refuses the whole message as malformed, answering once.
    @Test func extraFramesAfterALargePayloadMakeOneMalformedMessage() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let answers = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                let header = EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 41, target: GreeterIO.id.rawValue, typeName: "greet")
                _ = try socket.send(try Envelope(header: header, payload: Data(count: 40_000)).frames() + [Data("extra".utf8)])
                var answers: [Envelope] = []
                // Every answer the broker gives within two seconds of its first.
                var wait = 10_000
                while socket.waitReadable(timeoutMilliseconds: wait), let frames = try socket.receive() {
                    answers.append(try Envelope(frames: frames))
                    wait = 2_000
                }
                return answers
            }
            #expect(answers.count == 1)
            #expect(answers.first?.header.correlationID == 41)
            #expect(answers.first?.carriedError?.code == .malformed)
        }
    }
}

/// Runs `body` with a raw DEALER socket connected to `endpoint`, as a client in another language
/// would talk to the broker; closes it afterwards. `configure` sets options before it connects.
/// `body` may block: it runs on a thread of its own.
func withRawDealer<T: Sendable>(
    connectedTo endpoint: String, configure: @escaping @Sendable (ZMQSocket) throws -> Void = { _ in },
    _ body: @escaping @Sendable (ZMQSocket) throws -> T
) async throws -> T {
    try await onOwnThread {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, kind: .dealer)
        defer { socket.close() }
        try configure(socket)
        try socket.connect(endpoint)
        return try body(socket)
    }
}
