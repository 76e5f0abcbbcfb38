import BusCore
import CBoardBusNATS
import Foundation
import Glibc
import Synchronization

/// How to reach a NATS cluster and prove who this client is.
public struct NATSSettings: Sendable, Hashable {
    /// `nats://HOST:PORT` (or `tls://…`) of one or more servers of the cluster; user and password
    /// may be in a URL (`nats://USER:PASSWORD@HOST:PORT`).
    public var servers: [String]
    /// The connection's name, as `nats-server`'s monitoring shows it.
    public var name: String?
    /// A `.creds` file (a user JWT and its NKey seed, as `nsc` writes it).
    public var credentialsFile: String?
    /// The certificate authority that signs the servers' TLS certificates; set, the connection
    /// must be TLS.
    public var tlsCAFile: String?

    public init(servers: [String], name: String? = nil, credentialsFile: String? = nil, tlsCAFile: String? = nil)
        throws
    {
        let servers = servers.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !servers.isEmpty else { throw BusError(.badArgument, "NATS needs at least one server URL (nats://HOST:PORT)") }
        for server in servers where !(server.hasPrefix("nats://") || server.hasPrefix("tls://")) {
            throw BusError(.badArgument, "a NATS server URL starts with nats:// or tls://, not '\(server)'")
        }
        self.servers = servers
        self.name = name
        self.credentialsFile = credentialsFile
        self.tlsCAFile = tlsCAFile
    }
}

extension NATSSettings {
    /// Whether this client proves who it is (a user or token in a URL, a credentials file): a
    /// server that asks for that is expected to keep each user to its own subjects.
    public var hasCredentials: Bool {
        credentialsFile != nil
            || servers.contains { url in
                guard let scheme = url.range(of: "://") else { return false }
                let authority = url[scheme.upperBound...].prefix { $0 != "/" }
                return authority.contains("@")
            }
    }
}

extension NATSSettings: CustomStringConvertible {
    /// The servers, passwords hidden (what logs and errors say).
    public var description: String { servers.map(Self.redacted).joined(separator: ",") }

    /// A server URL with its password, if it has one, as `***`.
    public static func redacted(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@") else { return url }
        let userInfo = url[scheme.upperBound..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }
}

/// A message heard on a subscription.
public struct NATSMessage: Sendable {
    public var subject: String
    /// Where an answer goes (a request's inbox); nil for a plain publication.
    public var reply: String?
    /// The headers this side reads (``NATSConnection/readHeaders``) that the message has.
    public var headers: [String: String]
    public var payload: Data
    /// The server's `503` to a request nobody subscribes to.
    public var isNoResponders: Bool
    /// Which of this connection's subscriptions heard it.
    public var subscription: Int

    public init(
        subject: String, reply: String? = nil, headers: [String: String] = [:], payload: Data, isNoResponders: Bool = false, subscription: Int
    ) {
        self.subject = subject
        self.reply = reply
        self.headers = headers
        self.payload = payload
        self.isNoResponders = isNoResponders
        self.subscription = subscription
    }
}

/// A libnats connection whose subscriptions' messages are queued for one consumer thread, which
/// waits on ``wakeDescriptor`` (an eventfd, readable while messages wait) and takes them with
/// ``take()``. Publishing is thread-safe. The connection reconnects by itself, to any server of
/// the cluster, forever; publications made meanwhile are buffered (8 MiB) and sent on reconnect.
public final class NATSConnection: @unchecked Sendable {
    public enum Event: Sendable, Equatable {
        /// The connection dropped: the `epoch`-th time (what ``disconnections`` said before it).
        case disconnected(epoch: Int)
        /// Connected (again: or for the first time, when no server answered at start).
        case reconnected(url: String)
        /// An error libnats met on its own threads (a subscription that fell behind, a permission
        /// the server refused).
        case error(String)
    }

    private let connection: OpaquePointer
    private let options: OpaquePointer
    private let state: Shared
    private let subscriptions = Mutex<[Int: SubscriptionHandle]>([:])
    private let nextSubscription = Atomic<Int>(1)
    /// Readable while messages or events wait.
    public var wakeDescriptor: Int32 { state.wake }

    /// What the consumer takes: a message or a connection event, in the order they came.
    public enum Item: Sendable {
        case message(NATSMessage)
        case event(Event)
    }

    /// How many times the connection has dropped so far: a request sent while it reads `n` was
    /// sent after the `n`-th drop (and, when none came since, is in libnats's buffer or sent).
    public var disconnections: Int { state.disconnections.load(ordering: .acquiring) }

    /// What libnats's threads hand the consumer, in order. Retained for the life of the process
    /// (one per connection): libnats may call its connection handlers after the connection closed.
    final class Shared: @unchecked Sendable {
        let wake: Int32
        let headers: [String]
        let queue = Mutex<[Item]>([])
        let disconnections = Atomic<Int>(0)
        init(wake: Int32, headers: [String]) {
            self.wake = wake
            self.headers = headers
        }
        func signal() {
            var one: UInt64 = 1
            _ = write(wake, &one, 8)
        }
        /// Queues `item`; the consumer is woken once for all that waits, by the first it has not taken.
        func post(_ item: Item) {
            let first = queue.withLock { queue in
                queue.append(item)
                return queue.count == 1
            }
            if first { signal() }
        }
    }

    /// Connects. When no server answers yet, it goes on trying in the background (publications
    /// wait in the buffer); a server that answers but refuses (credentials, TLS) is an error at
    /// once. `readHeaders` are the header names copied from each message heard.
    public init(settings: NATSSettings, readHeaders: [String]) throws {
        let wake = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wake >= 0 else { throw BusError(.transport, "eventfd failed: errno \(errno)") }
        state = Shared(wake: wake, headers: readHeaders)
        var made: OpaquePointer?
        guard natsOptions_Create(&made) == NATS_OK, let options = made else {
            Glibc.close(wake)
            throw BusError(.transport, "cannot make libnats options")
        }
        self.options = options
        do {
            try Self.configure(options, settings, state: state)
            made = nil
            let servers = settings.description
            var status = natsConnection_Connect(&made, options)
            if status == NATS_NO_SERVER {
                // Nothing listens yet: the same again, now retrying in the background.
                try Self.check(
                    natsOptions_SetRetryOnFailedConnect(
                        options, true,
                        { connection, closure in
                            let state = Unmanaged<Shared>.fromOpaque(closure!).takeUnretainedValue()
                            state.post(.event(.reconnected(url: NATSConnection.connectedURL(of: connection) ?? "")))
                        }, Unmanaged.passUnretained(state).toOpaque()), "NATS connect retries")
                made = nil
                status = natsConnection_Connect(&made, options)
                if status == NATS_NOT_YET_CONNECTED { status = NATS_OK }
            }
            if status != NATS_OK {
                var last = status
                let detail = nats_GetLastError(&last).map { String(cString: $0) } ?? ""
                let text = String(cString: natsStatus_GetText(status))
                throw BusError(.transport, "cannot connect to NATS at \(servers): \(text)\(detail.isEmpty || detail == text ? "" : " (\(detail))")")
            }
            guard let made else { throw BusError(.transport, "natsConnection_Connect gave nothing") }
            connection = made
        } catch {
            natsOptions_Destroy(options)
            Glibc.close(wake)
            throw error
        }
    }

    private static func configure(_ options: OpaquePointer, _ settings: NATSSettings, state: Shared) throws {
        var urls = settings.servers.map { strdup($0) }
        defer { urls.forEach { free($0) } }
        try urls.withUnsafeMutableBufferPointer { buffer in
            try buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { pointer in
                try check(natsOptions_SetServers(options, pointer, Int32(buffer.count)), "NATS server URLs")
            }
        }
        if let name = settings.name { try check(natsOptions_SetName(options, name), "NATS connection name") }
        if let file = settings.credentialsFile {
            try check(natsOptions_SetUserCredentialsFromFiles(options, file, nil), "NATS credentials file '\(file)'")
        }
        if let file = settings.tlsCAFile {
            try check(natsOptions_SetSecure(options, true), "NATS TLS")
            try check(natsOptions_LoadCATrustedCertificates(options, file), "NATS TLS certificate authority '\(file)'")
        }
        // Forever, quickly: a cluster node that goes away is replaced by another within a second.
        try check(natsOptions_SetMaxReconnect(options, -1), "NATS reconnects")
        try check(natsOptions_SetReconnectWait(options, 250), "NATS reconnect wait")
        try check(natsOptions_SetPingInterval(options, 1000), "NATS ping interval")
        try check(natsOptions_SetMaxPingsOut(options, 2), "NATS pings out")
        try check(natsOptions_SetTimeout(options, 2000), "NATS connect timeout")
        // Each publication is written at once: libnats's flusher thread waits a millisecond to
        // gather more, which is a millisecond on every hop of a call.
        try check(natsOptions_SetSendAsap(options, true), "NATS send at once")
        // One thread delivers every subscription's messages, in the order they came: a store's
        // snapshot (an answer, on the inbox) and its changes (on their subject) stay in order.
        try check(natsOptions_UseGlobalMessageDelivery(options, true), "NATS message delivery")
        // Its own publications (announcements) are not heard back.
        try check(natsOptions_SetNoEcho(options, true), "NATS no echo")
        let closure = Unmanaged.passRetained(state).toOpaque()
        try check(
            natsOptions_SetDisconnectedCB(
                options,
                { _, closure in
                    let state = Unmanaged<Shared>.fromOpaque(closure!).takeUnretainedValue()
                    let epoch = state.disconnections.add(1, ordering: .acquiringAndReleasing).newValue
                    state.post(.event(.disconnected(epoch: epoch)))
                }, closure), "NATS disconnect handler")
        try check(
            natsOptions_SetErrorHandler(
                options,
                { _, _, status, closure in
                    var last = status
                    let detail = nats_GetLastError(&last).map { String(cString: $0) } ?? String(cString: natsStatus_GetText(status))
                    Unmanaged<Shared>.fromOpaque(closure!).takeUnretainedValue().post(.event(.error(detail)))
                }, closure), "NATS error handler")
        try check(
            natsOptions_SetReconnectedCB(
                options,
                { connection, closure in
                    let state = Unmanaged<Shared>.fromOpaque(closure!).takeUnretainedValue()
                    state.post(.event(.reconnected(url: NATSConnection.connectedURL(of: connection) ?? "")))
                }, closure), "NATS reconnect handler")
    }

    deinit {
        natsConnection_Destroy(connection)
        natsOptions_Destroy(options)
        Glibc.close(state.wake)
    }

    /// Closes the connection: buffered publications are flushed first, for at most `flush`.
    public func close(flush: Duration = .milliseconds(500)) {
        _ = natsConnection_FlushTimeout(connection, flush.wholeMilliseconds64)
        let subscriptions = self.subscriptions.withLock { all in
            defer { all = [:] }
            return all
        }
        for subscription in subscriptions.values.map(\.pointer) {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
        }
        natsConnection_Close(connection)
    }

    /// Whether the connection is up now.
    public var isConnected: Bool { natsConnection_Status(connection) == NATS_CONN_STATUS_CONNECTED }

    /// The URL of the server `connection` is connected to, if any.
    static func connectedURL(of connection: OpaquePointer?) -> String? {
        var buffer = [CChar](repeating: 0, count: 512)
        guard natsConnection_GetConnectedUrl(connection, &buffer, buffer.count) == NATS_OK else { return nil }
        let url = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return url.isEmpty ? nil : url
    }

    /// Subscribes to `subject` (wildcards allowed); returns the subscription's number, which the
    /// messages it hears carry.
    public func subscribe(_ subject: String) throws -> Int {
        let number = nextSubscription.add(1, ordering: .relaxed).oldValue
        // The box lives until libnats says the subscription's last callback returned.
        let box = Unmanaged.passRetained(SubscriptionBox(state: state, number: number))
        var subscription: OpaquePointer?
        let status =
            natsConnection_Subscribe(
                &subscription, connection, subject,
                { _, subscription, message, closure in
                    guard let message else { return }
                    let box = Unmanaged<SubscriptionBox>.fromOpaque(closure!).takeUnretainedValue()
                    box.deliver(message)
                }, box.toOpaque())
        guard status == NATS_OK, let subscription else {
            box.release()
            try Self.check(status, "cannot subscribe to '\(subject)'")
            throw BusError(.transport, "natsConnection_Subscribe gave nothing")
        }
        let completed = natsSubscription_SetOnCompleteCB(
            subscription, { closure in Unmanaged<SubscriptionBox>.fromOpaque(closure!).release() }, box.toOpaque())
        // Without the completion callback (libnats refused it), the box stays: a few bytes, never freed.
        _ = completed
        // A consumer that falls behind loses messages rather than the process its memory.
        natsSubscription_SetPendingLimits(subscription, 65_536, 64 << 20)
        let handle = SubscriptionHandle(pointer: subscription)
        subscriptions.withLock { $0[number] = handle }
        return number
    }

    /// Ends subscription `number`.
    public func unsubscribe(_ number: Int) {
        guard let subscription = subscriptions.withLock({ $0.removeValue(forKey: number) })?.pointer else { return }
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
    }

    /// Publishes `payload` on `subject`, with a reply subject and headers when given.
    public func publish(_ subject: String, reply: String? = nil, headers: [(String, String)] = [], payload: Data) throws {
        var message: OpaquePointer?
        let status = payload.withUnsafeBytes { bytes in
            natsMsg_Create(&message, subject, reply, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
        }
        try Self.check(status, "cannot make a NATS message for '\(subject)'")
        guard let message else { throw BusError(.transport, "natsMsg_Create gave nothing") }
        defer { natsMsg_Destroy(message) }
        for (name, value) in headers {
            try Self.check(natsMsgHeader_Set(message, name, value), "NATS header '\(name)'")
        }
        let limit = maximumPayload
        guard limit <= 0 || payload.count <= limit else {
            throw BusError(.tooLarge, "a message of \(payload.count) bytes is past the NATS server's max_payload of \(limit) bytes")
        }
        try Self.check(natsConnection_PublishMsg(connection, message), "cannot publish to NATS subject '\(subject)'")
    }

    /// Whether the server lets this connection publish on `subject`: an empty message is sent
    /// there and a round trip made; false when the server answered it with a permissions violation
    /// for that subject (it does before the round trip's PONG), nil when the round trip did not end
    /// within `timeout` (not connected).
    public func mayPublish(on subject: String, timeout: Duration) -> Bool? {
        guard natsConnection_PublishString(connection, subject, "") == NATS_OK,
            natsConnection_FlushTimeout(connection, timeout.wholeMilliseconds64) == NATS_OK
        else { return nil }
        var text: UnsafePointer<CChar>?
        let status = natsConnection_GetLastError(connection, &text)
        return !(status == NATS_NOT_PERMITTED && (text.map { String(cString: $0) } ?? "").contains(subject))
    }

    /// A new inbox subject (`_INBOX.…`), unique in the cluster.
    public static func makeInbox() -> String {
        var inbox: UnsafeMutablePointer<CChar>?
        guard natsInbox_Create(&inbox) == NATS_OK, let inbox else { return "_INBOX.\(UUID().uuidString.replacingOccurrences(of: "-", with: ""))" }
        defer { natsInbox_Destroy(inbox) }
        return String(cString: inbox)
    }

    /// What waits, oldest first; the wake descriptor is drained (before the queue is taken: an
    /// item queued after it wakes the consumer again).
    public func take() -> [Item] {
        var count: UInt64 = 0
        _ = read(state.wake, &count, 8)
        return state.queue.withLock { queue in
            defer { queue = [] }
            return queue
        }
    }

    static func check(_ status: natsStatus, _ what: @autoclosure () -> String) throws {
        guard status != NATS_OK else { return }
        let text = String(cString: natsStatus_GetText(status))
        throw BusError(status == NATS_MAX_PAYLOAD ? .tooLarge : .transport, "\(what()): \(text)")
    }

    /// The largest message (headers and payload) the server takes: its `max_payload`, 1 MB by
    /// default.
    public var maximumPayload: Int { Int(natsConnection_GetMaxPayload(connection)) }
}

/// A libnats subscription, used by one thread at a time (under the connection's lock, or after
/// it was taken out of the table).
struct SubscriptionHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What a subscription's callback finds through its closure pointer: the connection's queue and
/// the subscription's number.
final class SubscriptionBox: @unchecked Sendable {
    let state: NATSConnection.Shared
    let number: Int
    init(state: NATSConnection.Shared, number: Int) {
        self.state = state
        self.number = number
    }

    func deliver(_ message: OpaquePointer) {
        defer { natsMsg_Destroy(message) }
        let subject = String(cString: natsMsg_GetSubject(message))
        let reply = natsMsg_GetReply(message).map { String(cString: $0) }
        var headers: [String: String] = [:]
        for name in state.headers {
            var value: UnsafePointer<CChar>?
            if natsMsgHeader_Get(message, name, &value) == NATS_OK, let value { headers[name] = String(cString: value) }
        }
        let length = Int(natsMsg_GetDataLength(message))
        let payload = length > 0 ? Data(bytes: natsMsg_GetData(message), count: length) : Data()
        let heard = NATSMessage(
            subject: subject, reply: reply, headers: headers, payload: payload, isNoResponders: natsMsg_IsNoResponders(message),
            subscription: number)
        state.post(.message(heard))
    }
}

extension Duration {
    fileprivate var wholeMilliseconds64: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
