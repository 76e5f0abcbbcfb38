import BusCore
import CBoardBusZeroMQ
import FoundationEssentials

// Protocol version 3 (a header frame, then a payload frame), which peers of the release before
// may still speak: the socket answers a peer in the version it last spoke. Everything of it is
// here but the checks that lead here (``ZMQSocket/send(_:routingID:validatedHeaderBytes:)``,
// ``ZMQSocket/receive(limits:intercept:)``, ``ZMQSocket/forwardReceived(to:)``) and
// ``WireFraming``'s reading of the two frames.
extension ZMQSocket {
    /// Version 3's two frames: the header (encoded into the last received header frame when it
    /// fits exactly), then the payload, in the last received payload frame when it is that one, else
    /// copied, or lent to libzmq without a copy when large.
    func sendPreviousVersion(_ envelope: Envelope, routingID: Data) throws -> SendResult {
        let headerBytes = try HeaderCodec.validatedSize(envelope.header)
        let routed = try sendRoutingID(routingID)
        if routed != .sent { return routed }
        let headerResult = try sendHeader(envelope.header, size: headerBytes)
        if headerResult != .sent { return headerResult }
        if case .two = lastFraming, isLastPayload(envelope.payload) {
            lastPayloadData = nil
            framesReused += 1
            return try check(zmq_msg_send(lastPayload, handle, ZMQ_DONTWAIT))
        }
        if envelope.payload.count < Self.zeroCopyThreshold {
            return try send(frame: envelope.payload, more: false)
        }
        return try sendWithoutCopy(envelope.payload)
    }

    /// Sends a version-3 header frame: encoded into the last received header frame when that was
    /// a version-3 one of the size, else into the socket's buffer and copied.
    /// `size` is its ``HeaderCodec/validatedSize(_:)``, found by the caller.
    func sendHeader(_ header: EnvelopeHeader, size: Int) throws -> SendResult {
        if case .two = lastFraming, zmq_msg_size(lastHeader) == size {
            _ = HeaderCodec.write(header, version: EnvelopeHeader.previousVersion, into: lastFrameBytes)
            framesReused += 1
            // On success libzmq takes the frame and leaves `lastHeader` empty (size 0).
            return try check(zmq_msg_send(lastHeader, handle, ZMQ_DONTWAIT | ZMQ_SNDMORE))
        }
        let headerBytes = HeaderCodec.write(header, version: EnvelopeHeader.previousVersion, into: headerBuffer)
        return try check(zmq_send(handle, headerBuffer.baseAddress, headerBytes, ZMQ_DONTWAIT | ZMQ_SNDMORE))
    }

    /// Version 3's two frames received, sent on as they came (every peer reads them).
    func forwardPreviousVersion(to routingID: Data?) throws -> SendResult {
        let routed = try sendRoutingID(routingID)
        if routed != .sent { return routed }
        let headerResult = try check(zmq_msg_send(lastHeader, handle, ZMQ_DONTWAIT | ZMQ_SNDMORE))
        if headerResult != .sent { return headerResult }
        framesReused += 2
        return try check(zmq_msg_send(lastPayload, handle, ZMQ_DONTWAIT))
    }

    /// The version-4 frame received, to a peer that speaks version 3: header and payload copied
    /// into two frames.
    func forwardAsPreviousVersion(to routingID: Data, header: Range<Int>, payload: Range<Int>) throws -> SendResult {
        let bytes = lastFrameBytes
        bytes[2] = EnvelopeHeader.previousVersion
        let routed = try sendRoutingID(routingID)
        if routed != .sent { return routed }
        let headerResult = try send(frame: Data(UnsafeRawBufferPointer(rebasing: bytes[header])), more: true)
        if headerResult != .sent { return headerResult }
        return try send(frame: Data(UnsafeRawBufferPointer(rebasing: bytes[payload])), more: false)
    }
}

/// A set of routing ids bounded by forgetting the least recently seen: two generations of at most
/// `generation` ids each; when the newer is full it becomes the older and the older is dropped.
/// An id seen again is kept in the newer one. At most twice `generation` ids are held, whatever a
/// peer sends.
struct RecentPeers {
    private var newer = Set<Data>()
    private var older = Set<Data>()
    let generation: Int

    init(generation: Int = 4096) { self.generation = generation }

    var isEmpty: Bool { newer.isEmpty && older.isEmpty }
    var count: Int { newer.count + older.count }

    func contains(_ id: Data) -> Bool { newer.contains(id) || older.contains(id) }

    mutating func insert(_ id: Data) {
        guard !newer.contains(id) else { return }
        older.remove(id)
        if newer.count >= generation {
            older = newer
            newer = []
        }
        newer.insert(id)
    }

    mutating func remove(_ id: Data) {
        newer.remove(id)
        older.remove(id)
    }
}
