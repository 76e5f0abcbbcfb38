import BoardBusTestSupport
import BusZeroMQ
import Foundation
import Testing

@testable import BoardKit

/// A board or client on another host reaches the broker over tcp. Its connection must not ping
/// with ZMTP: libzmq 4.3 aborts the process when a connecting socket whose queue is full misses
/// its ping's answer (it reads nothing while the queue is full), reconnects and is read again
/// (zeromq/libzmq#3937), and when the broker goes away while its queue is full (#4364). Each case
/// runs in a process of its own; the broker's side has the broker's tcp settings.
@Suite("A tcp connection to the broker")
struct TCPConnectionTests {
    /// The broker's kernel gives up on the connection after 3 s without room in the board's (as
    /// the broker's pings did); the board keeps what it holds, and reconnects.
    @Test func aBoardBusyPastAPingTimeoutWithAFullQueueGoesOn() async {
        await #expect(processExitsWith: .success) {
            let received = try TCPConnectionTests.fillWhileBusy(ZeroMQConnection.options(tcp: true), brokerLeaves: false)
            guard received >= 10_000 else { exit(2) }
        }
    }

    @Test func aBoardWithAFullQueueOutlivesTheBrokerLeaving() async {
        await #expect(processExitsWith: .success) {
            let received = try TCPConnectionTests.fillWhileBusy(ZeroMQConnection.options(tcp: true), brokerLeaves: true)
            guard received >= 10_000 else { exit(2) }
        }
    }

    /// What the connection did before: with ZMTP pings, libzmq aborts in both cases. (Should a
    /// later libzmq no longer do so, this fails, and the pings could come back.) A canary:
    /// run with BOARDBUS_CANARIES=1, since under load libzmq may not abort within the test's time.
    @Test(.enabled(if: TestOptions.canaries && ZMQVersion.string.hasPrefix("4.3.")))
    func withZMTPPingsLibzmqAborts() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            _ = try TCPConnectionTests.fillWhileBusy(TCPConnectionTests.pinging, brokerLeaves: false)
        }
        await #expect(processExitsWith: .signal(SIGABRT)) {
            _ = try TCPConnectionTests.fillWhileBusy(TCPConnectionTests.pinging, brokerLeaves: true)
        }
    }

    static var pinging: [ZMQSocket.Option] {
        ZeroMQConnection.options(tcp: false) + [.heartbeatInterval(.seconds(1)), .heartbeatTimeout(.seconds(3))]
    }

    /// A board's DEALER with `options` says hello to a ROUTER on 127.0.0.1, which sends to it until
    /// it takes no more (it holds its receive high-water mark, 10 000, and the kernel's buffers
    /// are full) and, when `brokerLeaves`, closes. The board reads nothing for 7 s (past a ping's
    /// timeout and the reconnection after it), then all it can: how many messages that was.
    static func fillWhileBusy(_ options: [ZMQSocket.Option], brokerLeaves: Bool) throws -> Int {
        let context = try ZMQContext()
        defer { context.terminate() }
        let broker = try ZMQSocket(context: context, kind: .router)
        try broker.set(ZMQSocket.Option.tcpLiveness)
        try broker.set(.sendHighWaterMark(1_000), .linger(.zero), .routerMandatory(true))
        try broker.bind("tcp://127.0.0.1:*")
        let board = try ZMQSocket(context: context, kind: .dealer)
        defer { board.close() }
        try board.set(options)
        try board.set(.linger(.zero))
        try board.connect(broker.lastEndpoint ?? "")
        _ = try board.send([Data("hello".utf8)])
        guard broker.waitReadable(timeoutMilliseconds: 5_000), let hello = try broker.receive(), let boardID = hello.first else { exit(3) }
        let frame = Data(repeating: 0x79, count: 100)
        guard try sendUntilStalled({ try broker.send([boardID, frame]) == .sent }) else { exit(4) }
        if brokerLeaves { broker.close() }
        usleep(7_000_000)
        var received = 0
        while board.waitReadable(timeoutMilliseconds: 300), try board.receive() != nil { received += 1 }
        if !brokerLeaves { broker.close() }
        return received
    }
}
