import BusCore
import FoundationEssentials
import Glibc
import Synchronization

extension BusClient {
    /// Attaches a monitor to the broker (`busctl monitor`): every message it routes that `request`'s
    /// filter selects, as it routes it. Reading the sequence tells the broker how far this monitor
    /// has read; when it falls `request.window` events behind, the broker drops events and the
    /// next push says how many. The monitor ends when the sequence's consumer stops.
    public func monitor(_ request: MonitorRequest, timeout: Duration = BusClient.defaultTimeout) async throws -> MonitorStream {
        try request.validate()
        let (stream, continuation) = AsyncStream<MonitorPush>.makeStream(bufferingPolicy: .bufferingOldest(request.window + 64))
        let subscription = MonitorSubscription(request: request, continuation: continuation)
        let id = addSubscription(subscription)
        continuation.onTermination = { [weak self] _ in self?.removeSubscription(id) }
        let envelope = Envelope(
            header: EnvelopeHeader(kind: .control, typeName: ControlOperation.monitor), payload: try PayloadCodec.encode(request))
        do {
            _ = try await self.request(envelope, timeout: timeout)
        } catch {
            continuation.finish()
            throw error
        }
        return MonitorStream(stream: stream, subscription: subscription, client: self)
    }
}

/// The pushes of one monitor, in the order the broker routed the messages. Iterating it reports
/// what was read to the broker every quarter window (and every second, with the renewal).
public struct MonitorStream: AsyncSequence, Sendable {
    public typealias Element = MonitorPush
    let stream: AsyncStream<MonitorPush>
    let subscription: MonitorSubscription
    let client: BusClient

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<MonitorPush>.AsyncIterator
        let subscription: MonitorSubscription
        let client: BusClient

        public mutating func next() async -> MonitorPush? {
            guard let push = await base.next() else { return nil }
            if subscription.markRead() { try? client.send(subscription.renewal) }
            return push
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), subscription: subscription, client: client)
    }
}

/// A monitor's side of the subscription: pushes in, read counts out.
final class MonitorSubscription: BusSubscription {
    private let request: MonitorRequest
    private let continuation: AsyncStream<MonitorPush>.Continuation
    /// Events read, and the count last reported to the broker.
    private let counts = Mutex<(read: UInt64, reported: UInt64)>((0, 0))

    init(request: MonitorRequest, continuation: AsyncStream<MonitorPush>.Continuation) {
        self.request = request
        self.continuation = continuation
    }

    func matches(_ header: EnvelopeHeader) -> Bool {
        header.kind == .control && header.typeName == MonitorPush.typeName
    }

    func receive(_ envelope: Envelope) {
        guard let push = try? PayloadCodec.decode(MonitorPush.self, from: envelope.payload) else { return }
        continuation.yield(push)
    }

    /// One push was read; true when a quarter window has been read since the last report.
    func markRead() -> Bool {
        counts.withLock { counts in
            counts.read += 1
            return counts.read - counts.reported >= UInt64(max(1, request.window / 4))
        }
    }

    /// The monitor request again, with how far this monitor has read (no answer wanted).
    var renewal: Envelope {
        var renewed = request
        renewed.read = counts.withLock { counts in
            counts.reported = counts.read
            return counts.read
        }
        return Envelope(header: EnvelopeHeader(kind: .control, typeName: ControlOperation.monitor), payload: PayloadCodec.encodeOrEmpty(renewed))
    }
}
