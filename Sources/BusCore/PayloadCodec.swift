import Foundation

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

/// JSON encoding of payloads, the bus's default payload format.
public enum PayloadCodec {
    // Shared: making a coder per message costs more than a small payload's coding. Both are
    // safe to use from several threads as long as their options never change.
    @usableFromInline static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
    @usableFromInline static let decoder = JSONDecoder()

    /// Encodes a payload as JSON with sorted keys (stable output for tools and tests).
    @inlinable
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        do {
            return try encoder.encode(value)
        } catch {
            throw BusError(.badArgument, "cannot encode \(T.self) as JSON: \(error)")
        }
    }

    /// Encodes a value the caller knows to be encodable (simple structs of our own); empty on failure.
    public static func encodeOrEmpty<T: Encodable>(_ value: T) -> Data {
        (try? encode(value)) ?? Data()
    }

    /// Decodes a JSON payload; a payload that does not fit the type is a `typeMismatch`.
    @inlinable
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        let payload = data.isEmpty ? Data("{}".utf8) : data
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
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map(\.stringValue).joined(separator: ".")
            return keys.isEmpty ? "" : " at '\(keys)'"
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing key '\(key.stringValue)'\(path(context))"
        case .typeMismatch(let type, let context): return "expected \(type)\(path(context))"
        case .valueNotFound(let type, let context): return "missing \(type) value\(path(context))"
        case .dataCorrupted(let context): return "not valid JSON\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
