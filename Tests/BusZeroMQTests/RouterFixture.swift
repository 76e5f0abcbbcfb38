import BoardKitTesting
import BusCore
@testable import BusZeroMQ
import Foundation

/// A ROUTER bound to a temporary `ipc://` endpoint and one DEALER connected to it per hello, used
/// from a thread of their own: each dealer sends its hello's frames in turn, and the router
/// learns its routing id from it. `body` gets the router and the dealers with their ids, in the
/// hellos' order; everything is closed after it.
func withRouterAndDealers<T: Sendable>(
    _ name: String, hellos: [[Data]], _ body: @escaping @Sendable (ZMQSocket, [(socket: ZMQSocket, id: Data)]) throws -> T
) async throws -> T {
    try await withTemporaryEndpoint(name) { endpoint in
        try await onOwnThread {
            let context = try ZMQContext()
            defer { context.terminate() }
            let router = try ZMQSocket(context: context, kind: .router)
            defer { router.close() }
            try router.bind(endpoint)
            var dealers: [(socket: ZMQSocket, id: Data)] = []
            defer { for dealer in dealers { dealer.socket.close() } }
            for hello in hellos {
                let dealer = try ZMQSocket(context: context, kind: .dealer)
                try dealer.connect(endpoint)
                dealers.append((dealer, Data()))
                try dealer.send(hello)
                guard router.waitReadable(timeoutMilliseconds: 5_000), let first = try router.receiveEnvelope(limits: .default),
                    let id = first.routingID
                else { throw BusError(.timeout, "the router received nothing") }
                router.releaseReceivedFrames()
                dealers[dealers.count - 1].id = id
            }
            return try body(router, dealers)
        }
    }
}

/// A heartbeat, the hello of ``withRouterAndDealers(_:hellos:_:)``, in the frames of `version`.
func heartbeatFrames(version: UInt8 = EnvelopeHeader.currentVersion) throws -> [Data] {
    try Envelope(header: EnvelopeHeader(kind: .heartbeat)).frames(version: version)
}
