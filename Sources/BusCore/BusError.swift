/// A typed error of the bus. It travels on the wire as an `error` message whose payload is
/// `{"code": "...", "message": "..."}`, so every peer sees the same code.
public struct BusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, as a stable name. New codes can be added without breaking users:
    /// a peer that receives a code it does not know keeps its name.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible, Codable {
        /// The wire name, e.g. `noSuchBoard`.
        public let name: String

        public init(name: String) { self.name = name }

        /// The wire name (Codable as a plain string through `RawRepresentable`).
        public init(rawValue: String) { name = rawValue }
        public var rawValue: String { name }

        /// No live board has that id and the manifest cannot start one.
        public static let noSuchBoard = Code(name: "noSuchBoard")
        /// The manifest knows the board but it is not running: the request was not delivered to it.
        public static let boardNotRunning = Code(name: "boardNotRunning")
        /// A payload did not decode as the type the board declared.
        public static let typeMismatch = Code(name: "typeMismatch")
        /// No reply came before the deadline. A request that reached its board may still be carried out.
        public static let timeout = Code(name: "timeout")
        /// The request was delivered to its board, which ended (or lost its connection) before it
        /// answered: it may or may not have been carried out. A dispatch is safe to retry with
        /// the same dispatch id; anything else only if it is safe to repeat.
        public static let outcomeUnknown = Code(name: "outcomeUnknown")
        /// Frames that do not follow the protocol (truncated, wrong version, garbage).
        public static let malformed = Code(name: "malformed")
        /// A frame larger than the limit.
        public static let tooLarge = Code(name: "tooLarge")
        /// The board does not handle that command.
        public static let unknownCommand = Code(name: "unknownCommand")
        /// Another live board already holds that id.
        public static let idInUse = Code(name: "idInUse")
        /// The sender must register before it can do this (e.g. after a broker restart).
        public static let notRegistered = Code(name: "notRegistered")
        /// The board's handler threw; the message says why.
        public static let handlerFailed = Code(name: "handlerFailed")
        /// No motherboard answers at the bus address.
        public static let brokerNotRunning = Code(name: "brokerNotRunning")
        /// A caller-side argument is invalid (bad JSON, bad id).
        public static let badArgument = Code(name: "badArgument")
        /// A failure of the local transport (socket, context).
        public static let transport = Code(name: "transport")
        /// No live board owns a store of that name.
        public static let noSuchStore = Code(name: "noSuchStore")
        /// The store has no action of that name.
        public static let unknownAction = Code(name: "unknownAction")
        /// The requester may not do this (e.g. remove another board's flow).
        public static let unauthorized = Code(name: "unauthorized")
        /// The board is busy with a task and refuses another, or a bounded queue is full.
        public static let busy = Code(name: "busy")
        /// A store could not read or write its durable storage (locked past the caller's deadline,
        /// disk or size limit full, read-only); nothing was applied, and a retry with the same
        /// dispatch id is applied once when storage recovers.
        public static let storageFailed = Code(name: "storageFailed")
        /// The task was cancelled (a barrier cancelled, a newer task replaced it).
        public static let cancelled = Code(name: "cancelled")
        /// The header is of a protocol version this peer does not speak (answered, never misread).
        public static let unsupportedVersion = Code(name: "unsupportedVersion")
        /// The board is on another host whose link is down (or the link to the parent motherboard
        /// is): it is not gone, and the call may succeed once the link returns.
        public static let unreachable = Code(name: "unreachable")
        /// The payload's content type (header field 3) is one this peer does not read.
        public static let unsupportedContentType = Code(name: "unsupportedContentType")
        /// The access policy does not let the sender's principal do this; the message names the
        /// principal, the operation and the deciding rule.
        public static let forbidden = Code(name: "forbidden")
        /// The store refused the action (its handler threw a refusal): nothing was applied, and a
        /// retry with the same dispatch id is refused the same way.
        public static let rejected = Code(name: "rejected")
        /// This connection's board instance ended (it completed, or unregistered): unlike
        /// `notRegistered`, not an invitation to register again.
        public static let ended = Code(name: "ended")

        /// Every code this version defines (a peer may send others: keep them as they are).
        public static let defined: Set<String> = [
            noSuchBoard, boardNotRunning, typeMismatch, timeout, malformed, tooLarge, unknownCommand, idInUse, notRegistered, handlerFailed,
            brokerNotRunning, badArgument, transport, noSuchStore, unknownAction, unauthorized, busy, storageFailed, cancelled,
            unsupportedVersion, unreachable, unsupportedContentType, outcomeUnknown, forbidden, rejected, ended,
        ].reduce(into: Set<String>()) { $0.insert($1.name) }

        public var description: String { name }
    }

    /// What went wrong.
    public var code: Code
    /// A sentence for a person, saying what and, where possible, what to do.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// `error` itself when it is a `BusError`, else a `malformed` error that describes it.
    public init(wrapping error: any Error) {
        self = error as? BusError ?? BusError(.malformed, "\(error)")
    }

    public var description: String { "\(code.name): \(message)" }
}

extension BusError: Codable {
    private enum CodingKeys: String, CodingKey { case code, message }
}
