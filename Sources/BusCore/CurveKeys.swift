import FoundationEssentials

/// A CURVE key pair as ZeroMQ writes keys: 40 Z85 characters each. The secret may be absent (a
/// peer's public key alone, e.g. the broker's as a client knows it).
///
/// Key files use ZeroMQ's certificate format (the one czmq's `zcert` and pyzmq's
/// `zmq.auth.create_certificates` write and `zmq.auth.load_certificate` reads):
///
/// ```
/// # BoardBus CURVE key pair: keep this file secret
/// metadata
///     name = "edge-b"
/// curve
///     public-key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yu7"
///     secret-key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
/// ```
public struct CurveKeyPair: Sendable, Hashable {
    public var publicKey: String
    public var secretKey: String?
    /// The name written in the file's metadata, if any.
    public var name: String?

    public init(publicKey: String, secretKey: String?, name: String? = nil) throws {
        guard Self.isKey(publicKey) else { throw BusError(.badArgument, "not a CURVE public key (40 Z85 characters): '\(publicKey.prefix(60))'") }
        if let secretKey, !Self.isKey(secretKey) { throw BusError(.badArgument, "not a CURVE secret key (40 Z85 characters)") }
        self.publicKey = publicKey
        self.secretKey = secretKey
        self.name = name
    }

    /// Z85's alphabet (ZeroMQ RFC 32).
    static let z85Alphabet = Set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")

    /// Whether `text` is a 32-byte key in Z85 (40 characters of its alphabet).
    public static func isKey(_ text: String) -> Bool {
        text.count == 40 && text.allSatisfy { z85Alphabet.contains($0) }
    }

    /// Reads a certificate's text (see ``load(path:)``); a `badArgument` naming `source` otherwise.
    /// Read by Unicode scalars, not characters: a value that starts with a combining mark (which
    /// would join the space or quote before it into one character) reads as it is written.
    public init(certificate text: String, source: String) throws {
        var values: [String: String] = [:]
        let lines = text.unicodeScalars.split { $0 == "\n" || $0 == "\r" }
        for line in lines {
            let trimmed = Self.trimmed(line)
            guard trimmed.first != "#", let equals = trimmed.firstIndex(of: "=") else { continue }
            let key = Self.trimmed(trimmed[..<equals])
            var value = Self.trimmed(trimmed[trimmed.index(after: equals)...])
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            values[String(String.UnicodeScalarView(key))] = String(String.UnicodeScalarView(value))
        }
        if values["public-key"] == nil, let first = lines.first.map({ String(String.UnicodeScalarView($0)) }), Self.isKey(first) {
            try self.init(publicKey: first, secretKey: nil)
            return
        }
        guard let publicKey = values["public-key"] else { throw BusError(.badArgument, "key file \(source) has no public-key") }
        do {
            try self.init(publicKey: publicKey, secretKey: values["secret-key"], name: values["name"])
        } catch let error as BusError {
            throw BusError(error.code, "key file \(source): \(error.message)")
        }
    }

    /// `scalars` without the spaces and tabs around them.
    private static func trimmed(_ scalars: Substring.UnicodeScalarView) -> Substring.UnicodeScalarView {
        let blank: (Unicode.Scalar) -> Bool = { $0 == " " || $0 == "\t" }
        guard let start = scalars.firstIndex(where: { !blank($0) }), let last = scalars.lastIndex(where: { !blank($0) }) else {
            return scalars[scalars.endIndex...]
        }
        return scalars[start...last]
    }

    /// The certificate text: with the secret key (the secret file) or without (the public one).
    public func certificate(includingSecret: Bool) -> String {
        var text = includingSecret ? "# BoardBus CURVE key pair: keep this file secret\n" : "# BoardBus CURVE public key\n"
        text += "metadata\n"
        if let name { text += "    name = \"\(name)\"\n" }
        text += "curve\n    public-key = \"\(publicKey)\"\n"
        if includingSecret, let secretKey { text += "    secret-key = \"\(secretKey)\"\n" }
        return text
    }

}

/// The public keys allowed to connect to a motherboard's tcp endpoints: one per line, a name then
/// the key (`edge-b rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yu7`), anything after them ignored; a
/// line starting with `#` is a comment.
public struct CurveAllowList: Sendable, Equatable {
    /// Name of each allowed key, by key.
    public private(set) var names: [String: String] = [:]

    public init(entries: [(name: String, key: String)] = []) {
        for entry in entries { names[entry.key] = entry.name }
    }

    /// The list `text` holds; `badArgument` naming the first line that is not a name and a key.
    public init(parsing text: String, source: String = "allow-list") throws {
        let (list, setAside) = Self.parse(text, source: source)
        if let first = setAside.first { throw first.error }
        self = list
    }

    /// A line of an allow-list that is not a name and a key, by number from 1, with why.
    public struct SetAsideLine: Sendable, Equatable {
        public let number: Int
        public let error: BusError
    }

    /// The list of the lines of `text` that are a name and a key, and the others, set aside: a line
    /// left out only refuses its own key, so a broker that starts on a damaged list still lets in
    /// the keys it can read (and no key it cannot).
    public static func parse(_ text: String, source: String = "allow-list") -> (list: CurveAllowList, setAside: [SetAsideLine]) {
        var list = CurveAllowList()
        var setAside: [SetAsideLine] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            // '#' is a Z85 character too: only a line that starts with it is a comment.
            let raw = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if raw.isEmpty || raw[0].hasPrefix("#") { continue }
            let number = index + 1
            guard raw.count >= 2, BoardID.isValid(String(raw[0])) else {
                setAside.append(SetAsideLine(number: number, error: BusError(.badArgument, "\(source) line \(number): expected 'NAME PUBLIC-KEY'")))
                continue
            }
            let key = String(raw[1])
            guard CurveKeyPair.isKey(key) else {
                setAside.append(
                    SetAsideLine(
                        number: number,
                        error: BusError(
                            .badArgument, "\(source) line \(number): '\(raw[1].prefix(60))' is not a CURVE public key (40 Z85 characters)")))
                continue
            }
            list.names[key] = String(raw[0])
        }
        return (list, setAside)
    }

    public func name(of key: String) -> String? { names[key] }
}

/// What a client needs to reach a motherboard over `tcp://`: the broker's public key and its own
/// key pair (CURVE), or nothing for a broker started with `--insecure`.
public struct CurveClientCredentials: Sendable, Hashable {
    public var serverKey: String
    public var client: CurveKeyPair

    public init(serverKey: String, client: CurveKeyPair) throws {
        guard CurveKeyPair.isKey(serverKey) else { throw BusError(.badArgument, "not a CURVE public key for the server: '\(serverKey.prefix(60))'") }
        guard client.secretKey != nil else { throw BusError(.badArgument, "the client key file has no secret-key") }
        self.serverKey = serverKey
        self.client = client
    }

}
