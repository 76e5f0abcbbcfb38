import BusCore
import CBoardBusLinux
import CBoardBusZeroMQ
import FoundationEssentials
import Glibc

/// One libzmq socket. Not thread-safe: it belongs to one thread (a ``SocketLoop``), and only that
/// thread touches it after it has been handed over.
package final class ZMQSocket {
    /// The socket types BoardBus uses.
    package enum Kind: Sendable {
        case router, dealer
        /// REP: answers one request at a time (the ZAP handler).
        case reply
        /// PAIR: reads a socket monitor's events.
        case pair

        var rawValue: Int32 {
            switch self {
            case .router: ZMQ_ROUTER
            case .dealer: ZMQ_DEALER
            case .reply: ZMQ_REP
            case .pair: ZMQ_PAIR
            }
        }
    }

    /// The outcome of a non-blocking send.
    package enum SendResult: Sendable, Equatable {
        case sent
        /// The peer's queue is full (high-water mark) or, on a ROUTER, the peer is gone.
        case wouldBlock
        case peerUnreachable
    }

    package let kind: Kind
    // Read on every call, by the owning thread only: no exclusivity checks.
    @exclusivity(unchecked) private(set) var handle: UnsafeMutableRawPointer?
    /// One heap-allocated message reused for every receive (a `zmq_msg_t` must not move).
    private let message: UnsafeMutablePointer<zmq_msg_t>
    /// Where outgoing headers are encoded, reused for every send.
    let headerBuffer: UnsafeMutableRawBufferPointer
    /// The message a new frame is built in, reused for every send (libzmq empties it on success).
    private let outgoing: UnsafeMutablePointer<zmq_msg_t>
    /// The frames of the last envelope received, kept while it is handled (until
    /// ``releaseReceivedFrames()`` or the next receive): an envelope sent on with that payload (a
    /// broker forwarding a message, an echo) goes out in these frames, moved to libzmq
    /// rather than allocated and copied again, and the I/O thread that allocated them frees them.
    /// `lastPayloadData` is the `Data` the payload was copied into, held so that its bytes
    /// identify it (no other buffer can share their address while it is held, and a `Data` that
    /// is not uniquely referenced is copied before it is changed).
    /// In version 4 the one frame is `lastHeader` (`lastFraming` says where header and payload
    /// are in it) and `lastPayload` is empty.
    let lastHeader: UnsafeMutablePointer<zmq_msg_t>
    let lastPayload: UnsafeMutablePointer<zmq_msg_t>
    @exclusivity(unchecked) var lastPayloadData: Data?
    /// Where payloads too long to be held inline and too short to be lent are copied: the same
    /// storage again for the next one whenever nothing holds the last any more (a `Data` whose
    /// storage something else holds is copied before it is changed), so that a board or client
    /// handling one message at a time allocates nothing for what it receives.
    /// `payloadBufferBytes` is the most it was given since it was made: a payload under half of
    /// that gets storage of its own, so that a payload kept (queued by a broker) holds at most
    /// about three times its size (`Data` grows its storage by half as much again).
    @exclusivity(unchecked) private var payloadBuffer = Data()
    @exclusivity(unchecked) private var payloadBufferBytes = 0
    @exclusivity(unchecked) var lastFraming: WireFraming = .two
    /// On a ROUTER socket, the peers that last spoke version 3: they are answered in it.
    @exclusivity(unchecked) private var previousVersionPeers = RecentPeers()
    /// The names of the last header decoded here, which the next one most often repeats.
    @exclusivity(unchecked) private var recentNames = HeaderCodec.RecentNames()
    /// How many frames went out in received frames rather than new ones (for tests). Counted on
    /// the owning thread only.
    @exclusivity(unchecked) var framesReused = 0

    package init(context: ZMQContext, kind: Kind) throws {
        guard let handle = zmq_socket(context.handle, kind.rawValue) else {
            throw ZMQContext.lastError("zmq_socket")
        }
        self.kind = kind
        self.handle = handle
        self.message = .allocate(capacity: 1)
        zmq_msg_init(message)
        self.outgoing = .allocate(capacity: 1)
        zmq_msg_init(outgoing)
        self.lastHeader = .allocate(capacity: 1)
        zmq_msg_init(lastHeader)
        self.lastPayload = .allocate(capacity: 1)
        zmq_msg_init(lastPayload)
        // Four fields of at most 1 KiB, their lengths and the fixed part.
        self.headerBuffer = .allocate(byteCount: HeaderCodec.maximumHeaderBytes, alignment: 8)
        try set(.linger(.zero))
    }

    deinit {
        close()
        for frame in [message, lastHeader, lastPayload, outgoing] {
            zmq_msg_close(frame)
            frame.deallocate()
        }
        headerBuffer.deallocate()
    }

    package func bind(_ endpoint: String) throws {
        guard zmq_bind(handle, endpoint) == 0 else { throw ZMQContext.lastError("zmq_bind(\(endpoint))") }
    }

    package func connect(_ endpoint: String) throws {
        guard zmq_connect(handle, endpoint) == 0 else { throw ZMQContext.lastError("zmq_connect(\(endpoint))") }
    }

    /// The endpoint last bound or connected (`ZMQ_LAST_ENDPOINT`), with the port the system chose
    /// for `tcp://ADDRESS:*`.
    package var lastEndpoint: String? {
        var buffer = [UInt8](repeating: 0, count: 1_024)
        var size = buffer.count
        guard zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size) == 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// Sends a multipart message without blocking.
    @discardableResult
    package func send(_ frames: [Data]) throws -> SendResult {
        for (index, frame) in frames.enumerated() {
            let more = index < frames.count - 1
            let result = try send(frame: frame, more: more)
            // Only the first frame can fail with EAGAIN/EHOSTUNREACH; later parts are queued atomically.
            if result != .sent { return result }
        }
        return .sent
    }

    func send(frame: Data, more: Bool) throws -> SendResult {
        try frame.withUnsafeBytes { try send(frame: $0, more: more) }
    }

    func send(frame bytes: UnsafeRawBufferPointer, more: Bool) throws -> SendResult {
        try check(zmq_send(handle, bytes.baseAddress, bytes.count, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)))
    }

    /// Sends an envelope after the peer's routing id on a ROUTER socket: in one frame (version 4),
    /// or in version 3's two to a peer that last spoke it. One frame is written straight into a
    /// libzmq message; when the payload is the one last received in one frame and the new header
    /// has the old one's size, that frame goes out again with the header rewritten in it.
    /// `validatedHeaderBytes` is the header's ``HeaderCodec/validatedSize(_:)`` when the caller has
    /// already checked it (a client, before queueing), so that it is not checked twice.
    @discardableResult
    package func send(_ envelope: Envelope, routingID: Data? = nil, validatedHeaderBytes: Int? = nil) throws -> SendResult {
        if let routingID, !previousVersionPeers.isEmpty, previousVersionPeers.contains(routingID) {
            return try sendPreviousVersion(envelope, routingID: routingID)
        }
        let headerBytes = try validatedHeaderBytes ?? HeaderCodec.validatedSize(envelope.header)
        assert(headerBytes == HeaderCodec.encodedSize(envelope.header), "the header's size was validated for another header")
        let routed = try sendRoutingID(routingID)
        if routed != .sent { return routed }
        if case .one(let header, _) = lastFraming, header.count == headerBytes, isLastPayload(envelope.payload) {
            _ = HeaderCodec.write(envelope.header, into: lastFrameBytes)
            lastPayloadData = nil
            framesReused += 1
            return try check(zmq_msg_send(lastHeader, handle, ZMQ_DONTWAIT))
        }
        guard zmq_msg_init_size(outgoing, headerBytes + 1 + envelope.payload.count) == 0 else {
            throw ZMQContext.lastError("zmq_msg_init_size")
        }
        Envelope.write(
            envelope.header, headerBytes: headerBytes, payload: envelope.payload,
            into: UnsafeMutableRawBufferPointer(start: zmq_msg_data(outgoing), count: zmq_msg_size(outgoing)))
        let rc = zmq_msg_send(outgoing, handle, ZMQ_DONTWAIT)
        if rc < 0 {
            // On failure the frame is still ours: let it go, and leave the message empty.
            zmq_msg_close(outgoing)
            zmq_msg_init(outgoing)
        }
        return try check(rc)
    }

    /// On a ROUTER socket, the first frame: the peer's routing id (the only frame that can be refused).
    func sendRoutingID(_ routingID: Data?) throws -> SendResult {
        guard let routingID else { return .sent }
        return try send(frame: routingID, more: true)
    }

    /// The file descriptor of the connection the last received message came in on (libzmq's
    /// `ZMQ_SRCFD`), or -1: a way to ask the kernel how much waits unread toward that peer.
    package var lastSourceDescriptor: Int32 {
        zmq_msg_get(lastHeader, ZMQ_SRCFD)
    }

    /// The process at the other end of the connection the last message came in on, as the
    /// kernel knows it (`SO_PEERCRED`): for an ipc peer, its real pid whatever it claims; nil for
    /// tcp and in-process peers.
    package var lastSourceProcessID: Int32? {
        let pid = boardbus_peer_process_id(lastSourceDescriptor)
        return pid > 0 ? pid : nil
    }

    /// The bytes of the last received first frame (the header frame in version 3; header, 0 byte
    /// and payload in version 4), in place.
    var lastFrameBytes: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: zmq_msg_data(lastHeader), count: zmq_msg_size(lastHeader))
    }

    /// Whether `payload` is the `Data` made from the last payload received (or a copy of
    /// it): the same bytes at the same address. Only payloads held in storage of their own count
    /// (a `Data` of a few bytes is stored inline and has no stable address).
    func isLastPayload(_ payload: Data) -> Bool {
        guard let last = lastPayloadData, payload.count == last.count, payload.count > Self.inlineDataLimit else { return false }
        let address = payload.withUnsafeBytes { $0.baseAddress }
        return address != nil && address == last.withUnsafeBytes { $0.baseAddress }
    }

    /// Lets go of the frames of the last envelope received, once it has been handled. libzmq's
    /// I/O thread decodes small frames into a shared receive buffer, and allocates a new buffer
    /// for each read while any frame of the last one is still held.
    package func releaseReceivedFrames() {
        lastPayloadData = nil
        lastFraming = .two
        zmq_msg_close(lastPayload)
        zmq_msg_init(lastPayload)
        zmq_msg_close(lastHeader)
        zmq_msg_init(lastHeader)
    }

    /// A payload of up to this many bytes is never told by its address (a `Data` of up to
    /// ``inlineDataCapacity`` bytes is held in the value, which has no stable address).
    static let inlineDataLimit = 32

    /// The most bytes a `Data` holds inline on 64-bit platforms: a longer one has heap storage.
    /// Fewer in `payloadBuffer` would turn it inline and let its storage go.
    static let inlineDataCapacity = 14

    /// Payloads from this size on are lent to libzmq rather than copied.
    static let zeroCopyThreshold = 16 * 1024

    func sendWithoutCopy(_ payload: Data) throws -> SendResult {
        let owner = Unmanaged.passRetained(PayloadOwner(payload))
        let bytes = payload.withUnsafeBytes { UnsafeMutableRawPointer(mutating: $0.baseAddress!) }
        let frame = UnsafeMutablePointer<zmq_msg_t>.allocate(capacity: 1)
        defer { frame.deallocate() }
        // libzmq calls the free function (on its I/O thread) once the frame is written or dropped.
        guard
            zmq_msg_init_data(
                frame, bytes, payload.count,
                { _, hint in
                    Unmanaged<PayloadOwner>.fromOpaque(hint!).release()
                }, owner.toOpaque()) == 0
        else {
            owner.release()
            throw ZMQContext.lastError("zmq_msg_init_data")
        }
        let rc = zmq_msg_send(frame, handle, ZMQ_DONTWAIT)
        if rc < 0 { zmq_msg_close(frame) }  // on failure the frame is still ours
        return try check(rc)
    }

    func check(_ rc: Int32) throws -> SendResult {
        if rc >= 0 { return .sent }
        switch zmq_errno() {
        case EAGAIN: return .wouldBlock
        case EHOSTUNREACH: return .peerUnreachable
        default: throw ZMQContext.lastError("zmq_send")
        }
    }

    /// Receives one message as an envelope without blocking; nil when none is waiting. The header
    /// is decoded straight from libzmq's buffer; a large payload becomes a `Data` over libzmq's
    /// buffer, without a copy. Frames that are not a valid envelope come back as a
    /// ``MalformedMessage``.
    package func receiveEnvelope(limits: BusLimits) throws -> ReceivedMessage? {
        switch try receive(limits: limits, intercept: { _, _, _ in false }) {
        case .message(let message): message
        case .nothing, .intercepted: nil
        }
    }

    /// What ``receive(limits:intercept:)`` found.
    package enum ReceiveOutcome: Sendable {
        /// No message was waiting.
        case nothing
        /// The interceptor dealt with the message.
        case intercepted
        /// A message, parsed.
        case message(ReceivedMessage)
    }

    /// Receives one message without blocking. A message of one frame (version 4) whose payload is
    /// within the limits is first offered to `intercept`, unparsed: the sender's routing id (on a
    /// ROUTER socket), the header's bytes in the frame, which it may rewrite in place, and the
    /// payload's size. When it returns true it has dealt with the message (a router typically
    /// sends it on with ``forwardReceived(to:)``); otherwise the message is parsed as by
    /// ``receiveEnvelope(limits:)``. A version-3 message (two frames) is always parsed, and its
    /// sender is answered in version 3 from then on.
    package func receive(
        limits: BusLimits, intercept: (_ routingID: Data?, _ header: UnsafeMutableRawBufferPointer, _ payloadBytes: Int) -> Bool
    ) throws -> ReceiveOutcome {
        let routed = kind == .router
        var routingID: Data?
        var parts = 0
        var secondFrameBytes = 0
        let received = try receiveFrames { index, bytes in
            if routed && index == 0 {
                routingID = bytes.isEmpty ? Data() : Data(bytes: bytes.baseAddress!, count: bytes.count)
                return
            }
            switch parts {
            case 0:
                releaseReceivedFrames()
                zmq_msg_move(lastHeader, message)
            case 1:
                secondFrameBytes = bytes.count
                zmq_msg_move(lastPayload, message)
            default:
                break
            }
            parts += 1
        }
        guard received else { return .nothing }
        let first = lastFrameBytes
        let framing = WireFraming.accepted(first: UnsafeRawBufferPointer(first), frameCount: parts)
        switch framing {
        case .one(let header, let payload):
            lastFraming = .one(header: header, payload: payload)
            if routed, let routingID, !previousVersionPeers.isEmpty { previousVersionPeers.remove(routingID) }
            if payload.count <= limits.maximumPayloadBytes,
                intercept(routingID, UnsafeMutableRawBufferPointer(rebasing: first[header]), payload.count)
            {
                return .intercepted
            }
        case .two:
            // Answered in version 3 from now on; never routed in place.
            if routed, let routingID { previousVersionPeers.insert(routingID) }
        case nil:
            break  // refused below, saying why
        }
        let content = Envelope.assemble(
            first: UnsafeRawBufferPointer(first), frameCount: parts, secondFrameBytes: secondFrameBytes, limits: limits, framing: framing,
            recentNames: &recentNames
        ) {
            self.takePayload(inFirstFrame: $0, secondFrameBytes: secondFrameBytes)
        }
        return .message(ReceivedMessage(routingID: routingID, content: content))
    }

    /// `forwardReceived(to:)` toward a broker's peer: its id goes out from where it is held
    /// (the common case, one frame toward a peer that speaks the current version).
    package func forwardReceived(to peer: PeerID) throws -> SendResult {
        guard case .one = lastFraming, previousVersionPeers.isEmpty else { return try forwardReceived(to: peer.bytes) }
        return try sendReceivedFrame(after: peer.withUnsafeBytes { try send(frame: $0, more: true) })
    }

    /// Sends the envelope last received on to `routingID` (on a ROUTER socket) as it is, with the
    /// header as an interceptor may have rewritten it: its frame goes back to libzmq, no copy (to a
    /// peer that speaks version 3, header and payload are copied into two frames). Only once per
    /// received envelope.
    package func forwardReceived(to routingID: Data?) throws -> SendResult {
        guard case .one(let header, let payload) = lastFraming else { return try forwardPreviousVersion(to: routingID) }
        if let routingID, !previousVersionPeers.isEmpty, previousVersionPeers.contains(routingID) {
            return try forwardAsPreviousVersion(to: routingID, header: header, payload: payload)
        }
        return try sendReceivedFrame(after: sendRoutingID(routingID))
    }

    /// The received version-4 frame, sent on after its routing id went (`routed`).
    private func sendReceivedFrame(after routed: SendResult) throws -> SendResult {
        if routed != .sent { return routed }
        framesReused += 1
        return try check(zmq_msg_send(lastHeader, handle, ZMQ_DONTWAIT))
    }

    /// The payload of the message last received: in version 4 the end of `lastHeader`, in version
    /// 3 `lastPayload`. Copied when small, into `payloadBuffer` unless held inline (the frame
    /// stays, so that sending the same `Data` on can hand it back to libzmq), else a `Data` over
    /// libzmq's buffer, which holds the frame (a reference to it, in version 4) until it is freed.
    private func takePayload(inFirstFrame range: Range<Int>?, secondFrameBytes: Int) -> Data {
        let frame = range == nil ? lastPayload : lastHeader
        let range = range ?? 0..<secondFrameBytes
        let start = zmq_msg_data(frame)! + range.lowerBound
        guard range.count >= Self.zeroCopyThreshold else {
            guard range.count > Self.inlineDataCapacity else { return range.isEmpty ? Data() : Data(bytes: start, count: range.count) }
            if range.count * 2 < payloadBufferBytes {
                payloadBuffer = Data(bytes: start, count: range.count)
                payloadBufferBytes = range.count
            } else {
                payloadBuffer.count = range.count
                payloadBuffer.withUnsafeMutableBytes { $0.baseAddress!.copyMemory(from: start, byteCount: range.count) }
                payloadBufferBytes = max(payloadBufferBytes, range.count)
            }
            if range.count > Self.inlineDataLimit { lastPayloadData = payloadBuffer }
            return payloadBuffer
        }
        let owned = OwnedMessage()
        guard frame == lastHeader else {
            zmq_msg_move(owned.message, frame)
            return Data(bytesNoCopy: zmq_msg_data(owned.message), count: range.count, deallocator: .custom { _, _ in owned.close() })
        }
        // The one frame stays with the socket too (its properties are read after, and it may go
        // out again): both hold it.
        zmq_msg_copy(owned.message, frame)
        let payload = Data(
            bytesNoCopy: zmq_msg_data(owned.message)! + range.lowerBound, count: range.count, deallocator: .custom { _, _ in owned.close() })
        lastPayloadData = payload
        return payload
    }

    /// Receives one whole multipart message without blocking; nil when none is waiting.
    package func receive() throws -> [Data]? {
        var descriptor: Int32 = -1
        return try receive(sourceDescriptor: &descriptor)
    }

    /// Receives one whole multipart message without blocking, and the descriptor of the
    /// connection it came on (`ZMQ_SRCFD` of its last frame; -1 when there is none, e.g. inproc),
    /// for a ``ConnectionBacklog``.
    package func receive(sourceDescriptor: inout Int32) throws -> [Data]? {
        var frames: [Data] = []
        let received = try receiveFrames { _, bytes in
            frames.append(bytes.isEmpty ? Data() : Data(bytes: bytes.baseAddress!, count: bytes.count))
        }
        // The last frame is still in `message` (frames are copied out above).
        sourceDescriptor = received ? zmq_msg_get(message, ZMQ_SRCFD) : -1
        return received ? frames : nil
    }

    /// A property of the last message ``receive(sourceDescriptor:)`` received (`User-Id`,
    /// `Peer-Address`), if it has it.
    package func lastMessageProperty(_ name: String) -> String? {
        guard let value = zmq_msg_gets(message, name) else { return nil }
        return String(cString: value)
    }

    /// Receives the frames of one message without blocking, handing each to `frame` (its index and
    /// its bytes in libzmq's buffer, valid during the call; `frame` may move the current message
    /// out). Returns false when none was waiting.
    private func receiveFrames(_ frame: (Int, UnsafeRawBufferPointer) -> Void) throws -> Bool {
        var index = 0
        while true {
            let rc = zmq_msg_recv(message, handle, index == 0 ? ZMQ_DONTWAIT : 0)
            if rc < 0 {
                let error = zmq_errno()
                if error == EAGAIN && index == 0 { return false }
                if error == EINTR { continue }
                throw ZMQContext.lastError("zmq_msg_recv")
            }
            // Asked first: `frame` may move the message out (a payload lent without a copy).
            let more = zmq_msg_more(message) != 0
            frame(index, UnsafeRawBufferPointer(start: zmq_msg_data(message), count: zmq_msg_size(message)))
            index += 1
            if !more { return true }
        }
    }

    /// Waits until a message can be received, up to `timeoutMilliseconds` (-1: forever).
    /// For callers that own the socket on a thread of their own (e.g. a benchmark client).
    package func waitReadable(timeoutMilliseconds: Int) -> Bool {
        var item = zmq_pollitem_t(socket: handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0)
        return zmq_poll(&item, 1, timeoutMilliseconds) > 0
    }

    /// Waits until one of `sockets` has a message, up to `timeoutMilliseconds`; returns which do.
    /// For a thread that owns several sockets (the uplink).
    package static func poll(_ sockets: [ZMQSocket], timeoutMilliseconds: Int) -> [Bool] {
        var items = sockets.map { zmq_pollitem_t(socket: $0.handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0) }
        guard zmq_poll(&items, Int32(items.count), timeoutMilliseconds) > 0 else { return Array(repeating: false, count: sockets.count) }
        return items.map { $0.revents & Int16(ZMQ_POLLIN) != 0 }
    }

    /// As ``poll(_:timeoutMilliseconds:)``, with file descriptors beside the sockets (another
    /// library's wake-up eventfd): whether each socket, then each descriptor, is readable.
    package static func poll(_ sockets: [ZMQSocket], descriptors: [Int32], timeoutMilliseconds: Int) -> [Bool] {
        var items = sockets.map { zmq_pollitem_t(socket: $0.handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0) }
        items += descriptors.map { zmq_pollitem_t(socket: nil, fd: $0, events: Int16(ZMQ_POLLIN), revents: 0) }
        guard zmq_poll(&items, Int32(items.count), timeoutMilliseconds) > 0 else { return Array(repeating: false, count: items.count) }
        return items.map { $0.revents & Int16(ZMQ_POLLIN) != 0 }
    }

    /// The socket's notification descriptor (`ZMQ_FD`): it becomes readable when the socket's
    /// state may have changed, after which ``hasIncoming`` tells whether a message waits.
    func notificationDescriptor() throws -> Int32 {
        var descriptor: Int32 = -1
        var size = MemoryLayout<Int32>.size
        guard zmq_getsockopt(handle, ZMQ_FD, &descriptor, &size) == 0 else { throw ZMQContext.lastError("zmq_getsockopt(ZMQ_FD)") }
        return descriptor
    }

    /// Whether a message can be received now (`ZMQ_EVENTS`). Reading it also processes libzmq's
    /// pending commands, which re-arms the notification descriptor.
    var hasIncoming: Bool {
        var events: Int32 = 0
        var size = MemoryLayout<Int32>.size
        guard zmq_getsockopt(handle, ZMQ_EVENTS, &events, &size) == 0 else { return true }  // let a receive report it
        return events & Int32(ZMQ_POLLIN) != 0
    }

    /// A property of the connection the last received envelope came on (`Peer-Address`,
    /// `User-Id` — the name the ZAP handler gave its key), while its frames are held.
    package func lastReceivedProperty(_ name: String) -> String? {
        guard let value = zmq_msg_gets(lastHeader, name) else { return nil }
        return String(cString: value)
    }

    /// The `User-Id` of the connection the last received envelope came on: the remote principal
    /// the ZAP handler named (`unnamed` if it named none), nil on a connection that did not pass
    /// a ZAP handler (ipc). Asked for every message: the name is handed to libzmq as a
    /// C string made once, not bridged from a Swift string each time.
    package var lastReceivedUserID: String? { Self.userID(of: lastHeader) }

    /// The same for the last message ``receive(sourceDescriptor:)`` received.
    package var lastMessageUserID: String? { Self.userID(of: message) }

    private static func userID(of message: UnsafeMutablePointer<zmq_msg_t>) -> String? {
        // A static string is stored with a terminating NUL.
        let name = UnsafeRawPointer(userIDProperty.utf8Start).assumingMemoryBound(to: CChar.self)
        guard let value = zmq_msg_gets(message, name) else { return nil }
        return value.pointee == 0 ? "unnamed" : String(cString: value)
    }

    private static let userIDProperty: StaticString = "User-Id"

    /// Closes the socket; later calls do nothing.
    package func close() {
        if let handle {
            zmq_close(handle)
            self.handle = nil
        }
    }
}

/// One message read from a socket by ``ZMQSocket/receiveEnvelope(limits:)``.
package struct ReceivedMessage: Sendable {
    /// The sender's routing id, on a ROUTER socket.
    package var routingID: Data?
    /// The envelope, or why the frames are not one.
    package var content: Result<Envelope, MalformedMessage>

    /// The envelope, moved out of the message (nil for frames that are not one): what a client's
    /// loop hands on. Reading `content` would copy the envelope and destroy the message's copy,
    /// field by field, for every message.
    package consuming func takeEnvelope() -> Envelope? {
        withUnsafeMutablePointer(to: &content) { pointer in
            switch pointer.move() {
            case .success(let envelope):
                pointer.initialize(to: .failure(Self.movedOut))
                return envelope
            case .failure(let malformed):
                pointer.initialize(to: .failure(malformed))
                return nil
            }
        }
    }

    private static let movedOut = MalformedMessage(BusError(.malformed, "moved out"), answerWith: nil)
}

/// Keeps a sent payload alive until libzmq has written it.
private final class PayloadOwner {
    let payload: Data
    init(_ payload: Data) { self.payload = payload }
}

/// A received libzmq message that a `Data` lends out; closed when that `Data` is freed, on
/// whatever thread frees it (closing a message is thread-safe in libzmq).
private final class OwnedMessage: @unchecked Sendable {
    let message: UnsafeMutablePointer<zmq_msg_t>

    init() {
        message = .allocate(capacity: 1)
        zmq_msg_init(message)
    }

    func close() {
        zmq_msg_close(message)
        message.deallocate()
    }
}
