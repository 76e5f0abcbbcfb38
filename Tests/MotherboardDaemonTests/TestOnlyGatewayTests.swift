import BoardKitTesting
import BusCore
import Foundation
import Logging
import Synchronization
import Testing

@testable import BusZeroMQ
@testable import MotherboardCore
@testable import MotherboardDaemon
@testable import MotherboardGateways

/// A gateway is one type that conforms to ``Gateway`` and reaches the routing loop through its
/// ``GatewayEnvironment``: this one exists only here, changes nothing in the broker, and serves
/// two boards over one connection to a real routing loop on a real socket.
@Suite("A test-only gateway", .timeLimit(.minutes(1)))
struct TestOnlyGatewayTests {
    /// Serves `echo.a` and `echo.b`, each answering every command with its own name and the payload.
    final class EchoGateway: Gateway, @unchecked Sendable {
        let description = "echo (test only)"
        private let socket: ZMQSocket
        private let ids: [BoardID]
        private let running = Atomic<Bool>(true)
        private let finished = DispatchSemaphore(value: 0)

        init(environment: GatewayEnvironment, ids: [BoardID]) throws {
            socket = try ZMQSocket(context: environment.context, kind: .dealer)
            try socket.set(.linger(.zero))
            try socket.connect(environment.localEndpoint)
            self.ids = ids
        }

        func start() {
            Thread { [self] in
                for (index, id) in ids.enumerated() {
                    var header = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: UInt64(index + 1), source: id.rawValue)
                    header.flags.insert(.replyExpected)
                    _ = try? socket.send(
                        Envelope(
                            header: header,
                            payload: PayloadCodec.encodeOrEmpty(Registration(id: id, pid: 0, commands: ["echo"], sharesConnection: true))))
                }
                while running.load(ordering: .acquiring) {
                    guard socket.waitReadable(timeoutMilliseconds: 50), let frames = try? socket.receive(),
                        let envelope = try? Envelope(frames: frames)
                    else { continue }
                    guard envelope.header.kind == .command else { continue }
                    // The broker names the board; the answer names it back.
                    var reply = envelope.reply(payload: Data("\(envelope.header.target):".utf8) + envelope.payload, source: envelope.header.target)
                    reply.header.scope = envelope.header.scope
                    _ = try? socket.send(reply)
                }
                socket.close()
                finished.signal()
            }.start()
        }

        func stop() {
            guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
            finished.wait()
        }
    }

    @Test func aGatewayOfItsOwnServesBoardsOverOneConnection() async throws {
        try await onOwnThread { try Self.serve() }
    }

    static func serve() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let endpoint = "inproc://test-only-gateway"
        let router = try ZMQSocket(context: context, kind: .router)
        try router.set(.routerMandatory(true), .linger(.zero))
        try router.bind(endpoint)
        let transport = RouterTransport(socket: router)
        let motherboard = try Motherboard(manifest: FleetManifest(), transport: transport, logger: Logger(label: "test"))
        let loop = try SocketLoop(name: "test-broker", socket: router, handler: RouterLoopHandler(motherboard: motherboard, transport: transport))
        loop.start()
        defer { loop.stop() }

        let environment = GatewayEnvironment(
            context: context, localEndpoint: endpoint, limits: .default, logger: Logger(label: "test"), curveSecretKey: nil,
            watchConnections: { _ in }, keys: NoConnectionKeys())
        let gateway = try EchoGateway(environment: environment, ids: ["echo.a", "echo.b"])
        gateway.start()
        defer { gateway.stop() }

        let client = try ZMQSocket(context: context, kind: .dealer)
        defer { client.close() }
        try client.set(.linger(.zero))
        try client.connect(endpoint)
        func call(_ target: String, _ correlation: UInt64) throws -> Envelope {
            try client.send(
                Envelope(
                    header: EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: correlation, timeoutMilliseconds: 2_000, target: target,
                        typeName: "echo"),
                    payload: Data("hi".utf8)))
            guard client.waitReadable(timeoutMilliseconds: 5_000), let frames = try client.receive() else {
                throw BusError(.timeout, "no answer from \(target)")
            }
            return try Envelope(frames: frames)
        }
        // The registrations are asynchronous: ask until both answer (each call has its deadline).
        var answers: [String: String] = [:]
        for attempt in 0..<50 where answers.count < 2 {
            for target in ["echo.a", "echo.b"] where answers[target] == nil {
                let answer = try call(target, UInt64(100 + attempt * 2 + (target == "echo.a" ? 0 : 1)))
                if answer.header.kind == .reply { answers[target] = String(decoding: answer.payload, as: UTF8.self) }
            }
            if answers.count < 2 { Thread.sleep(forTimeInterval: 0.02) }
        }
        #expect(answers == ["echo.a": "echo.a:hi", "echo.b": "echo.b:hi"])
    }
}
