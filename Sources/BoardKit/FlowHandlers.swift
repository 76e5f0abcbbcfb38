import BusCore
import FoundationEssentials
import Glibc
import Synchronization

/// The closures of the flows a board registered with "deliver to me", by flow id.
final class FlowHandlers: Sendable {
    typealias Handler = @Sendable (Envelope, BoardContext) async throws -> Void
    private let handlers = Mutex<[FlowID: Handler]>([:])

    func set(_ id: FlowID, _ handler: @escaping Handler) {
        handlers.withLock { $0[id] = handler }
    }

    func remove(_ id: FlowID) {
        _ = handlers.withLock { $0.removeValue(forKey: id) }
    }

    func handler(for id: FlowID) -> Handler? {
        handlers.withLock { $0[id] }
    }
}
