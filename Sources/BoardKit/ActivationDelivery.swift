import BusCore

/// Which delivery of an at-least-once activation a handler runs for (PROTOCOL 5.3): its id, the
/// same on every delivery, by which a board can tell one it has carried out already, and its
/// count (1 the first time). Read it in an activation handler as `context.delivery`.
public struct ActivationDelivery: Sendable, Hashable {
    public let id: UInt64
    public let count: Int

    /// Set by the runtime around an at-least-once activation's handler.
    @TaskLocal static var current: ActivationDelivery?
}

extension BoardContext {
    /// In an activation handler of an at-least-once board: which delivery this is (nil for an
    /// activation delivered at most once, and outside activation handlers).
    public var delivery: ActivationDelivery? { ActivationDelivery.current }

    /// Tells the broker the activation being handled is taken: it is not delivered again, even if
    /// this board ends before it answers (its sender then learns `outcomeUnknown`). For work that
    /// must not run twice, taken before it starts; the handler's answer still goes to the sender.
    public func takeDelivery(timeout: Duration = BusClient.defaultTimeout) async throws {
        guard let delivery = ActivationDelivery.current else {
            throw BusError(.badArgument, "takeDelivery() is for an activation handler of an at-least-once board")
        }
        try await client.takeDelivery(delivery.id, from: id, scope: scope, timeout: timeout)
    }
}

extension BusClient {
    /// `delivery.taken` (PROTOCOL 5.3), as board `board`.
    public func takeDelivery(_ id: UInt64, from board: BoardID, scope: Scope, timeout: Duration = BusClient.defaultTimeout) async throws {
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, source: board.rawValue, scope: scope, typeName: ControlOperation.deliveryTaken),
            payload: try PayloadCodec.encode(DeliveryTaken(id: id)))
        _ = try await request(envelope, timeout: timeout)
    }
}
