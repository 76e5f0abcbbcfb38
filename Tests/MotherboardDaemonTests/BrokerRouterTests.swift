import BoardBusTestSupport
import BusCore
import BusZeroMQ
import Foundation
import Testing

/// libzmq 4.3 aborts the whole process when a ZMTP ping falls due on a connection whose peer hung
/// up while the socket held as many of its messages as its receive high-water mark
/// (zeromq/libzmq#4364: `Assertion failed: !_io_error (src/stream_engine_base.cpp:331)`). Any peer
/// can bring that about, and so can a broker that falls behind while boards leave: the broker's
/// ROUTER must not ping (each such case runs in a process of its own); the kernel's keepalive
/// probes close an idle tcp connection whose host is gone instead.
@Suite("The broker's ROUTER")
struct BrokerRouterTests {
    @Test func aPeerThatHangsUpOnAFullQueueCannotAbortIt() async {
        await #expect(processExitsWith: .success) {
            let received = try BrokerRouterTests.hangUpOnAFullQueue(with: ZMQSocket.Option.peerRouter(limits: .default))
            // What the broker held of the peer's messages is still there to read.
            guard received >= 10_000 else { exit(2) }
        }
    }

    /// What the broker's ROUTER did before: with ZMTP pings, libzmq aborts. (Should a later
    /// libzmq no longer do so, this fails, and the pings could come back.) A canary:
    /// run with BOARDBUS_CANARIES=1, since under load libzmq may not abort within the test's time.
    @Test(.enabled(if: TestOptions.canaries && ZMQVersion.string.hasPrefix("4.3.")))
    func withZMTPPingsLibzmqAborts() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            let pinging = ZMQSocket.Option.peerRouter(limits: .default) + [.heartbeatInterval(.seconds(1)), .heartbeatTimeout(.seconds(3))]
            _ = try BrokerRouterTests.hangUpOnAFullQueue(with: pinging)
        }
    }

    /// Set on the listener, the keepalive and the user timeout reach each accepted tcp connection.
    @Test func anAcceptedTCPConnectionIsProbedByTheKernel() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try ZMQSocket(context: context, kind: .router)
        defer { router.close() }
        try router.set(ZMQSocket.Option.peerRouter(limits: .default))
        try router.set(.linger(.zero))
        try router.bind("tcp://127.0.0.1:*")
        let endpoint = try #require(router.lastEndpoint)
        let peer = try ZMQSocket(context: context, kind: .dealer)
        defer { peer.close() }
        try peer.set(.linger(.zero))
        try peer.connect(endpoint)
        _ = try peer.send([Data("hello".utf8)])
        #expect(router.waitReadable(timeoutMilliseconds: 5_000))
        var descriptor: Int32 = -1
        _ = try router.receive(sourceDescriptor: &descriptor)
        #expect(descriptor >= 0)
        func option(_ level: Int32, _ name: Int32) -> Int32 {
            var value: Int32 = -1
            var size = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(descriptor, level, name, &value, &size) == 0 ? value : -1
        }
        #expect(option(SOL_SOCKET, SO_KEEPALIVE) == 1)
        #expect(option(Int32(IPPROTO_TCP), TCP_KEEPIDLE) == 1)
        #expect(option(Int32(IPPROTO_TCP), TCP_KEEPINTVL) == 1)
        #expect(option(Int32(IPPROTO_TCP), TCP_KEEPCNT) == 3)
        #expect(option(Int32(IPPROTO_TCP), TCP_USER_TIMEOUT) == 3_000)
    }

    /// A ROUTER with `options` that reads nothing while a DEALER sends to it until it stops taking
    /// more (the ROUTER holds its receive high-water mark, 10 000, of them, and the kernel's
    /// buffers are full) and hangs up, then, after more than a ping interval, reads what it holds:
    /// how many messages that was.
    static func hangUpOnAFullQueue(with options: [ZMQSocket.Option]) throws -> Int {
        // An abstract socket: nothing is left on disk when the process aborts.
        let endpoint = "ipc://@boardbus-hangup-\(UUID().uuidString)"
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try ZMQSocket(context: context, kind: .router)
        defer { router.close() }
        try router.set(options)
        try router.set(.linger(.zero))
        try router.bind(endpoint)
        let peer = try ZMQSocket(context: context, kind: .dealer)
        try peer.set(.sendHighWaterMark(1_000), .linger(.zero))
        try peer.connect(endpoint)
        let frame = Data(repeating: 0x78, count: 100)
        guard try sendUntilStalled({ try peer.send([frame]) == .sent }) else { exit(4) }
        peer.close()
        usleep(2_500_000)
        var received = 0
        while router.waitReadable(timeoutMilliseconds: 500), try router.receive() != nil { received += 1 }
        return received
    }
}
