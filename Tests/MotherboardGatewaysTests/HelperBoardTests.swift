import BusCore
import BusZeroMQ
import Foundation
import Testing

@testable import MotherboardGateways

/// A helper's board (the uplink's, the gateways'): refused, it asks again later and later.
@Suite("Helper boards")
struct HelperBoardTests {
    @Test func aHelperAsksAgainLaterAndLaterWhileItIsRefused() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, kind: .dealer)
        defer { socket.close() }
        try socket.set(.linger(.zero))
        var board = HelperBoard(connection: socket, registration: Registration(id: "edge.sensor", pid: 0))
        let now = ContinuousClock.now
        var id: UInt64 = 1
        func refuse() {
            let error = BusError(.idInUse, "held by another")
            _ = board.read(Envelope.error(error, correlationID: id))
        }
        board.register(now: now, id: id)
        refuse()
        #expect(board.retryAfter == .seconds(2))
        for expected in [4, 8, 16, 32, 60, 60] {
            id += 1
            board.register(now: now, id: id)
            refuse()
            #expect(board.retryAfter == .seconds(expected))
        }
        // Accepted: back to a second.
        id += 1
        board.register(now: now, id: id)
        _ = board.read(Envelope(header: EnvelopeHeader(kind: .reply, correlationID: id)))
        #expect(board.retryAfter == .seconds(1))
    }
}
