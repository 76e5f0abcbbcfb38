import BusCore

/// The subjects a fleet uses on a NATS cluster (PROTOCOL §10). Every subject starts with
/// `boardbus.<fleet>`; names are subject tokens escaped by ``token(_:)``.
public struct NATSSubjects: Sendable, Hashable {
    public let fleet: String
    private let prefix: String

    /// A fleet name is 1–64 of `A–Z a–z 0–9 _ -`: motherboards of one fleet use the same.
    public init(fleet: String) throws {
        guard (1...64).contains(fleet.utf8.count), fleet.utf8.allSatisfy(Self.isPlain) else {
            throw BusError(.badArgument, "a NATS fleet name is 1–64 of A–Z a–z 0–9 _ -, not '\(fleet.escapedForDisplay())'")
        }
        self.fleet = fleet
        prefix = "boardbus.\(fleet)"
    }

    // What a motherboard publishes as itself carries its host's token after the kind
    // (`boardbus.<fleet>.output.<host>.…`): NATS never says who published a message, so a server
    // that lets each motherboard's user publish only under its own token (fleet/nats/server.conf)
    // makes the subject say it, and the gateway takes an output, change or announcement only on the
    // subject of the host it is about.

    /// Motherboard `host` says which boards it serves here, every interval and when that changes:
    /// `boardbus.<fleet>.announce.<host>`.
    public func announce(host: String) -> String { "\(prefix).announce.\(Self.token(host))" }
    /// Every motherboard's announcements.
    public var anyAnnounce: String { "\(prefix).announce.*" }
    /// Motherboard `host`, stopping, says so here: `boardbus.<fleet>.withdraw.<host>`.
    public func withdraw(host: String) -> String { "\(prefix).withdraw.\(Self.token(host))" }
    /// Every motherboard's withdrawals.
    public var anyWithdraw: String { "\(prefix).withdraw.*" }
    /// A motherboard that joins asks the others to announce now.
    public var hello: String { "\(prefix).hello" }

    /// The host an announcement or withdrawal subject names; nil for another subject.
    public func host(ofMembership subject: String) -> String? {
        let tokens = subject.split(separator: ".", omittingEmptySubsequences: false)
        guard tokens.count == 4, tokens[0] == "boardbus", tokens[1] == fleet, tokens[2] == "announce" || tokens[2] == "withdraw",
            let host = Self.untoken(tokens[3]), !host.isEmpty
        else { return nil }
        return host
    }

    /// Where the answers to the requests of motherboard `host` come:
    /// `_INBOX.boardbus.<fleet>.<host>`, a reply subject being this, a dot and one token that ends
    /// in a random part. The server lets only that host's user subscribe here.
    public func inbox(host: String) -> String { "_INBOX.boardbus.\(fleet).\(Self.token(host))" }

    /// A command, activation or other request for board `board` of `scope`:
    /// `boardbus.<fleet>.board.<scope>.<board>.<kind>.<type name>`.
    public func board(_ board: String, scope: Scope, kind: MessageKind, typeName: String) -> String {
        "\(prefix).board.\(Self.scopeToken(scope)).\(Self.token(board)).\(kind.description).\(Self.token(typeName))"
    }

    /// Every request for board `board` of `scope` (what its motherboard subscribes to).
    public func anyRequest(board: String, scope: Scope) -> String {
        "\(prefix).board.\(Self.scopeToken(scope)).\(Self.token(board)).>"
    }

    /// A request for store `store` of `scope` (`dispatch`, `store` with its operation):
    /// `boardbus.<fleet>.store.<scope>.<store>.<kind>.<type name>`.
    public func store(_ store: String, scope: Scope, kind: MessageKind, typeName: String) -> String {
        "\(prefix).store.\(Self.scopeToken(scope)).\(Self.token(store)).\(kind.description).\(Self.token(typeName))"
    }

    /// Every request for store `store` of `scope`.
    public func anyRequest(store: String, scope: Scope) -> String {
        "\(prefix).store.\(Self.scopeToken(scope)).\(Self.token(store)).>"
    }

    /// What travels as a request through NATS: what a board or a store's owner answers.
    public static let requestKinds: [MessageKind] = [.command, .activate, .dispatch, .store]

    /// Every change of store `store` of `scope`, published by the motherboard of `host` that serves
    /// its owner (the payload of the store's `change`): `boardbus.<fleet>.change.<host>.<scope>.<store>`.
    public func changes(store: String, scope: Scope, host: String) -> String {
        "\(prefix).change.\(Self.token(host)).\(Self.scopeToken(scope)).\(Self.token(store))"
    }

    /// An action sent in `scope` through the motherboard of `host` (every motherboard subscribes to
    /// all): `boardbus.<fleet>.action.<host>.<scope>.<name>`.
    public func action(_ name: String, scope: Scope, host: String) -> String {
        "\(prefix).action.\(Self.token(host)).\(Self.scopeToken(scope)).\(Self.token(name))"
    }

    /// Every action of the fleet.
    public var anyAction: String { "\(prefix).action.>" }

    /// An action's subject read back: the host it came through, its scope and name.
    public func action(_ subject: String) -> (host: String, scope: Scope, name: String)? {
        let tokens = subject.split(separator: ".", omittingEmptySubsequences: false)
        guard tokens.count == 6, tokens[0] == "boardbus", tokens[1] == fleet, tokens[2] == "action", let host = Self.untoken(tokens[3]),
            !host.isEmpty, let scope = Self.untoken(tokens[4]), let name = Self.untoken(tokens[5]), !name.isEmpty
        else { return nil }
        return (host, Scope(scope), name)
    }

    /// An output of board `board` of `scope`, published by the motherboard of `host` that serves it
    /// (the others run their flows on it): `boardbus.<fleet>.output.<host>.<scope>.<board>.<type name>`.
    public func output(_ board: String, scope: Scope, typeName: String, host: String) -> String {
        "\(prefix).output.\(Self.token(host)).\(Self.scopeToken(scope)).\(Self.token(board)).\(Self.token(typeName))"
    }

    /// Every output of board `board` of `scope` from the motherboard of `host`: what one that
    /// knows the board from afar subscribes to, so that an output under another host's token never
    /// reaches it.
    public func anyOutput(board: String, scope: Scope, host: String) -> String {
        "\(prefix).output.\(Self.token(host)).\(Self.scopeToken(scope)).\(Self.token(board)).*"
    }

    /// A request's subject read back: what it is for.
    public struct Request: Sendable, Hashable {
        public var isStore: Bool
        public var scope: Scope
        public var name: String
        public var kind: MessageKind
        public var typeName: String
    }

    /// Reads a subject made by ``board(_:scope:kind:typeName:)`` or ``store(_:scope:kind:typeName:)``;
    /// nil for anything else.
    public func request(_ subject: String) -> Request? {
        let tokens = subject.split(separator: ".", omittingEmptySubsequences: false)
        guard tokens.count == 7, tokens[0] == "boardbus", tokens[1] == fleet, tokens[2] == "board" || tokens[2] == "store",
            let scope = Self.untoken(tokens[3]), let name = Self.untoken(tokens[4]), !name.isEmpty,
            let kind = Self.requestKinds.first(where: { $0.description == tokens[5] }), let typeName = Self.untoken(tokens[6])
        else { return nil }
        return Request(isStore: tokens[2] == "store", scope: Scope(scope), name: name, kind: kind, typeName: typeName)
    }

    /// A name as one subject token: `A–Z a–z 0–9 _ -` as they are, every other byte of its UTF-8
    /// (`.` `/` `*` `>` `%` `~`, spaces, non-ASCII) as `%XX`; the empty name is `~`.
    public static func token(_ name: String) -> String {
        guard !name.isEmpty else { return "~" }
        if name.utf8.allSatisfy(isPlain) { return name }
        var token = ""
        for byte in name.utf8 {
            if isPlain(byte) {
                token.unicodeScalars.append(UnicodeScalar(byte))
            } else {
                token += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return token
    }

    /// The root scope is `~`, as the empty name.
    public static func scopeToken(_ scope: Scope) -> String { token(scope.name) }

    /// A token read back; nil when it is not one ``token(_:)`` makes.
    public static func untoken(_ token: Substring) -> String? {
        if token == "~" { return "" }
        guard !token.isEmpty else { return nil }
        var bytes: [UInt8] = []
        var utf8 = token.utf8.makeIterator()
        while let byte = utf8.next() {
            if isPlain(byte) {
                bytes.append(byte)
            } else if byte == UInt8(ascii: "%"), let high = utf8.next().flatMap(hexValue), let low = utf8.next().flatMap(hexValue) {
                let value = high << 4 | low
                // Only what token(_:) escapes: a plain byte written as %XX is another spelling.
                guard !isPlain(value) else { return nil }
                bytes.append(value)
            } else {
                return nil
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default: false
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// The NATS headers BoardBus header fields travel as.
public enum NATSHeader {
    public static let contentType = "Content-Type"
    public static let traceparent = "traceparent"
    public static let tracestate = "tracestate"
    /// How long the caller waits, in milliseconds.
    public static let timeout = "BoardBus-Timeout"
    public static let dispatchID = "BoardBus-Dispatch-Id"
    /// The board a request comes from (absent for clients).
    public static let source = "BoardBus-Source"
    /// On an answer: `ok`, else the error's code (`notFound`, `timeout`, …) with
    /// `{"code","message"}` as payload.
    public static let status = "BoardBus-Status"
    /// On a request: the host of the motherboard it came through.
    public static let via = "BoardBus-Via"
    /// On an answer: the motherboard (its instance) that gave it, so that the sender of an action
    /// counts each motherboard's answer once.
    public static let instance = "BoardBus-Instance"

    public static let all = [contentType, traceparent, tracestate, timeout, dispatchID, source, status, via, instance]
}
