import BusCore
import Foundation
import Logging
import MotherboardCore

/// A broker's logic with a recording transport and a clock the caller moves by hand.
package final class Harness {
    package let transport: RecordingTransport
    package let motherboard: Motherboard
    package var now = ContinuousClock.now
    package let client = PeerID(Data([0xC0]))

    package init(manifest: FleetManifest = FleetManifest(), logger: Logger = Logger(label: "test"), metrics: BrokerMetrics = BrokerMetrics())
        throws
    {
        transport = RecordingTransport()
        motherboard = try Motherboard(manifest: manifest, transport: transport, logger: logger, metrics: metrics)
    }

    package init(manifest: FleetManifest, producer: RecordingProducer) throws {
        transport = RecordingTransport()
        motherboard = try Motherboard(manifest: manifest, transport: transport, producer: producer, logger: Logger(label: "test"))
    }

    /// Hands the broker `envelope` as its frames, as a socket would.
    package func deliver(_ envelope: Envelope, from peer: PeerID) {
        guard let frames = try? envelope.frames() else {
            preconditionFailure("the caller's own envelope does not encode: \(envelope.header)")
        }
        motherboard.receive(frames, from: peer, now: now)
    }

    package func request(_ header: EnvelopeHeader, payload: Data = Data(), from peer: PeerID, correlation: UInt64 = 77) {
        var header = header
        header.flags.insert(.replyExpected)
        header.correlationID = correlation
        deliver(Envelope(header: header, payload: payload), from: peer)
    }

    /// Registers `id` from `peer` and returns what the broker answered.
    @discardableResult
    package func register(_ id: BoardID, peer: PeerID, pid: Int32 = 100, actions: [String] = [], secret: String? = nil) -> [Envelope] {
        let registration = Registration(id: id, pid: pid, commands: ["greet"], actions: actions, secret: secret)
        return register(registration, peer: peer)
    }

    /// Registers in `scope` as the process `pid` that ``RecordingProducer`` started would: with its
    /// secret (unless another is given).
    @discardableResult
    package func register(_ id: BoardID, scope: Scope, peer: PeerID, pid: Int32 = 100, actions: [String] = [], secret: String? = nil)
        -> [Envelope]
    {
        register(Registration(id: id, pid: pid, scope: scope, actions: actions, secret: secret ?? "secret-\(pid)"), peer: peer)
    }

    private func register(_ registration: Registration, peer: PeerID) -> [Envelope] {
        guard let payload = try? PayloadCodec.encode(registration) else { preconditionFailure("a registration that does not encode") }
        request(EnvelopeHeader(kind: .register, source: registration.id.rawValue), payload: payload, from: peer)
        return transport.take(for: peer)
    }

    /// Asks for control operation `operation` from `peer` and decodes the answer (throwing the
    /// error it carries).
    package func control<T: BusPayload>(_ operation: String, _ value: some BusPayload = Empty(), from peer: PeerID, as: T.Type) throws -> T {
        request(EnvelopeHeader(kind: .control, typeName: operation), payload: try PayloadCodec.encode(value), from: peer)
        guard let reply = transport.take(for: peer).last else { throw BusError(.timeout, "no answer to \(operation)") }
        if let error = reply.carriedError { throw error }
        return try PayloadCodec.decode(T.self, from: reply.payload)
    }

    package func list() throws -> BoardList {
        request(EnvelopeHeader(kind: .control, typeName: ControlOperation.list), from: client)
        guard let reply = transport.take(for: client).last else { throw BusError(.timeout, "no answer to list") }
        return try PayloadCodec.decode(BoardList.self, from: reply.payload)
    }
}
