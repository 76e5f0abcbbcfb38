import BoardKitTesting
import BusCore
import Foundation
import Logging
import Testing

@testable import BusZeroMQ
@testable import MotherboardCore
@testable import MotherboardDaemon

/// The server's socket handler, over real `ipc://` sockets: commands and replies go on in the
/// frames they came in, everything else through the parsed path.
@Suite("Broker socket routing", .timeLimit(.minutes(1)))
struct ServerRoutingIntegrationTests {
    @Test func aCommandAndItsReplyGoOnInPlaceAndARegistrationIsParsed() async throws {
        // libzmq sockets are used from one thread: a thread of their own.
        try await withTemporaryEndpoint("server") { endpoint in try await onOwnThread { try Self.exchange(endpoint) } }
    }

    static func exchange(_ endpoint: String) throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try ZMQSocket(context: context, kind: .router)
        defer { router.close() }
        try router.set(.routerMandatory(true))
        try router.bind(endpoint)
        let board = try ZMQSocket(context: context, kind: .dealer)
        defer { board.close() }
        try board.connect(endpoint)
        let client = try ZMQSocket(context: context, kind: .dealer)
        defer { client.close() }
        try client.connect(endpoint)

        let transport = RouterTransport(socket: router)
        let motherboard = try Motherboard(manifest: FleetManifest(), transport: transport, logger: Logger(label: "test"))
        let handler: any SocketLoopHandler = RouterLoopHandler(motherboard: motherboard, transport: transport)
        /// Handles one message as the socket loop does.
        func serve() throws -> ZMQSocket.ReceiveOutcome {
            guard router.waitReadable(timeoutMilliseconds: 5_000) else { throw BusError(.timeout, "the broker received nothing") }
            let receipt = try router.receive(limits: .default) { routingID, header, payloadBytes in
                handler.intercept(from: routingID, header: header, payloadBytes: payloadBytes, on: router)
            }
            if case .message(let message) = receipt { handler.received(message, on: router) }
            router.releaseReceivedFrames()
            return receipt
        }
        func next(_ socket: ZMQSocket) throws -> Envelope {
            guard socket.waitReadable(timeoutMilliseconds: 5_000), let frames = try socket.receive() else {
                throw BusError(.timeout, "nothing arrived")
            }
            return try Envelope(frames: frames)
        }

        try board.send(
            Envelope(
                header: EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1, source: "demo.greeter"),
                payload: try PayloadCodec.encode(Registration(id: "demo.greeter", pid: getpid(), commands: ["greet"]))))
        guard case .message = try serve() else { throw BusError(.malformed, "a registration was not parsed") }
        #expect(try next(board).header.kind == .reply)

        let reusedBefore = router.framesReused
        let payload = Data(#"{"name":"Ann"}"#.utf8)
        try client.send(
            Envelope(
                header: EnvelopeHeader(kind: .command, flags: .replyExpected, correlationID: 7, target: "demo.greeter", typeName: "greet"),
                payload: payload))
        guard case .intercepted = try serve() else { throw BusError(.malformed, "a command was not routed in place") }
        let command = try next(board)
        #expect(command.header.kind == .command && command.header.typeName == "greet")
        #expect(command.header.correlationID != 7 && command.header.correlationID != 0)
        #expect(command.payload == payload)

        let answer = Data(#"{"message":"Hello, Ann!"}"#.utf8)
        try board.send(command.reply(payload: answer, source: "demo.greeter"))
        guard case .intercepted = try serve() else { throw BusError(.malformed, "a reply was not routed in place") }
        let reply = try next(client)
        #expect(reply.header.kind == .reply && reply.header.correlationID == 7 && reply.header.source == "demo.greeter")
        #expect(reply.payload == answer)
        // Both messages went on in the frame each came in.
        #expect(router.framesReused - reusedBefore == 2)
        #expect(motherboard.replies.isEmpty)
    }
}
