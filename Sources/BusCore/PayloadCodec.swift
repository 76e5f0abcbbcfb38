import FoundationEssentials

/// A value that can travel as a payload: `Codable`, with a type name carried in the header so
/// that receivers can refuse a payload of the wrong type with ``BusError/Code/typeMismatch``.
public protocol BusPayload: Codable, Sendable {
    /// The name written in the header's type-name field. Defaults to the Swift type's name.
    static var busTypeName: String { get }
}

extension BusPayload {
    public static var busTypeName: String { String(describing: Self.self) }
}

/// An empty payload, for commands and inputs that carry nothing. Encodes as `{}`.
public struct Empty: BusPayload, Hashable {
    public init() {}
}

/// How a payload is encoded: the header's content type (optional field 3; docs/PROTOCOL.md,
/// "Payload content types"). JSON is the default, which busctl and foreign clients speak; a
/// client may ask for CBOR per message, and a board answers in the format it was asked in.
public enum PayloadFormat: String, Sendable, Hashable, CaseIterable, Codable {
    /// `application/json`: a header without a content type.
    case json
    /// `application/cbor` (RFC 8949): the JSON data model in binary, without escaping or number
    /// text (see ``CBOREncoder``).
    case cbor

    /// The content type a header carries for this format: none for JSON, the default.
    public var contentType: String? {
        switch self {
        case .json: nil
        case .cbor: Self.cborContentType
        }
    }

    public static let jsonContentType = "application/json"
    public static let cborContentType = "application/cbor"

    /// The format a header's content type names: JSON when it has none. Any other content type
    /// is refused with `unsupportedContentType`.
    public init(contentType: String?) throws(BusError) {
        switch contentType {
        case nil, Self.jsonContentType: self = .json
        case Self.cborContentType: self = .cbor
        case let other?:
            throw BusError(
                .unsupportedContentType,
                "payload content type '\(other)' is not supported (this peer reads \(Self.jsonContentType) and \(Self.cborContentType))")
        }
    }
}

/// Encoding of payloads: JSON, the bus's default payload format, or CBOR when a message's
/// content type says so.
public enum PayloadCodec {
    // Shared: making a coder per message costs more than a small payload's coding. Both are
    // safe to use from several threads as long as their options never change.
    @usableFromInline static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
    @usableFromInline static let decoder = JSONDecoder()

    /// Encodes a payload as JSON with sorted keys (stable output for tools and tests): the bytes
    /// Foundation's `JSONEncoder` writes, through ``JSONPayload``'s fast path where it can.
    @inlinable
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        if let data = JSONPayload.encode(value) { return data }
        do {
            return try encoder.encode(value)
        } catch {
            throw BusError(.badArgument, "cannot encode \(T.self) as JSON: \(error)")
        }
    }

    /// Encodes a payload in `format`.
    @inlinable
    public static func encode<T: Encodable>(_ value: T, format: PayloadFormat) throws -> Data {
        switch format {
        case .json: return try encode(value)
        case .cbor:
            do {
                return try CBOREncoder().encode(value)
            } catch {
                throw BusError(.badArgument, "cannot encode \(T.self) as CBOR: \(error)")
            }
        }
    }

    /// Decodes a payload in `format`; a payload that does not fit the type is a `typeMismatch`.
    /// An empty payload is an empty map, as `{}`.
    @inlinable
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data, format: PayloadFormat) throws -> T {
        switch format {
        case .json: return try decode(T.self, from: data)
        case .cbor:
            do {
                return try CBORDecoder().decode(T.self, from: data.isEmpty ? Data([0xA0]) : data)
            } catch let error as DecodingError {
                throw BusError(.typeMismatch, "payload is not a valid \(T.self): \(describe(error, format: "CBOR"))")
            } catch {
                throw BusError(.typeMismatch, "payload is not a valid \(T.self): \(error)")
            }
        }
    }

    /// Encodes a value the caller knows to be encodable (simple structs of our own); empty on failure.
    public static func encodeOrEmpty<T: Encodable>(_ value: T) -> Data {
        (try? encode(value)) ?? Data()
    }

    /// Decodes a JSON payload; a payload that does not fit the type is a `typeMismatch`. The
    /// value Foundation's `JSONDecoder` reads, through ``JSONPayload``'s fast path where it can;
    /// errors are always Foundation's.
    @inlinable
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        let payload = data.isEmpty ? Data("{}".utf8) : data
        if let value = JSONPayload.decode(T.self, from: payload) { return value }
        do {
            return try decoder.decode(T.self, from: payload)
        } catch let error as DecodingError {
            throw BusError(.typeMismatch, "payload is not a valid \(T.self): \(describe(error))")
        } catch {
            throw BusError(.typeMismatch, "payload is not a valid \(T.self): \(error)")
        }
    }

    /// A one-line account of a decoding error (Foundation's default is a multi-line dump).
    @usableFromInline
    static func describe(_ error: DecodingError, format: String = "JSON") -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map(\.stringValue).joined(separator: ".")
            return keys.isEmpty ? "" : " at '\(keys)'"
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing key '\(key.stringValue)'\(path(context))"
        case .typeMismatch(let type, let context): return "expected \(type)\(path(context))"
        case .valueNotFound(let type, let context): return "missing \(type) value\(path(context))"
        case .dataCorrupted(let context): return "not valid \(format)\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
