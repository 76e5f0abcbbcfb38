import FoundationEssentials

/// The shape of a payload, as a JSON Schema (draft 2020-12 subset): derived from a `Decodable`
/// type by decoding it once with a recording decoder (``of(_:)``), never written by hand.
///
/// What it knows: objects with their fields (`properties`, `required` — an `Optional` field or one
/// read with `decodeIfPresent` is not required), strings, integers, numbers, booleans, arrays and
/// their element shape, string-keyed dictionaries (`additionalProperties`), enums of a
/// `CaseIterable` `RawRepresentable` type (`enum`), the Swift type's name (`title`). A type that
/// refuses the placeholder values the recorder decodes (a validating initializer) shows the
/// fields read before the refusal and `"$comment": "partial"`; such a type can describe itself
/// by conforming to ``PayloadSchemaProviding``. A type met again inside itself is a `$ref` to
/// `#/$defs/<title>`.
public final class PayloadSchema: Codable, Hashable, @unchecked Sendable {
    public var type: String?
    public var title: String?
    public var properties: [String: PayloadSchema]?
    public var required: [String]?
    public var items: PayloadSchema?
    public var additionalProperties: PayloadSchema?
    public var `enum`: [String]?
    public var ref: String?
    public var defs: [String: PayloadSchema]?
    public var comment: String?

    enum CodingKeys: String, CodingKey {
        case type, title, properties, required, items, additionalProperties, `enum`
        case ref = "$ref"
        case defs = "$defs"
        case comment = "$comment"
    }

    public init(
        type: String? = nil, title: String? = nil, properties: [String: PayloadSchema]? = nil, required: [String]? = nil,
        items: PayloadSchema? = nil, additionalProperties: PayloadSchema? = nil, enum cases: [String]? = nil, ref: String? = nil,
        comment: String? = nil
    ) {
        self.type = type
        self.title = title
        self.properties = properties
        self.required = required
        self.items = items
        self.additionalProperties = additionalProperties
        self.enum = cases
        self.ref = ref
        self.comment = comment
    }

    public static func == (lhs: PayloadSchema, rhs: PayloadSchema) -> Bool {
        (lhs.type, lhs.title, lhs.properties, lhs.required, lhs.items) == (rhs.type, rhs.title, rhs.properties, rhs.required, rhs.items)
            && (lhs.additionalProperties, lhs.enum, lhs.ref, lhs.defs, lhs.comment) == (
                rhs.additionalProperties, rhs.enum, rhs.ref, rhs.defs, rhs.comment
            )
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(type)
        hasher.combine(title)
        hasher.combine(properties)
        hasher.combine(items)
        hasher.combine(ref)
    }

    /// The schema of a `Decodable` type.
    public static func of<T: Decodable>(_ type: T.Type) -> PayloadSchema {
        let recorder = SchemaRecorder()
        let schema = recorder.schema(of: type)
        if !recorder.definitions.isEmpty {
            // A copy of each, so that a root that refers to itself does not contain itself.
            schema.defs = recorder.definitions.mapValues { $0.copy() }
        }
        return schema
    }

    /// The same schema in a new object (its `$defs` left out).
    func copy() -> PayloadSchema {
        PayloadSchema(
            type: type, title: title, properties: properties, required: required, items: items, additionalProperties: additionalProperties,
            enum: self.enum, ref: ref, comment: comment)
    }

    /// The shape in one line, for people: `{name: string, age?: integer, tags: [string]}`.
    public var summary: String {
        if let ref { return ref.split(separator: "/").last.map(String.init) ?? ref }
        if let cases = self.enum { return cases.map { "\"\($0)\"" }.joined(separator: "|") }
        switch type {
        case "object":
            if let properties {
                let required = Set(self.required ?? [])
                let fields = properties.keys.sorted().map { "\($0)\(required.contains($0) ? "" : "?"): \(properties[$0]!.summary)" }
                return "{" + fields.joined(separator: ", ") + (comment == "partial" ? ", …" : "") + "}"
            }
            if let additionalProperties { return "{string: \(additionalProperties.summary)}" }
            return "{}"
        case "array": return "[\(items?.summary ?? "any")]"
        case let type?: return type
        default: return "any"
        }
    }
}

/// A type that states its own payload schema (one whose decoding validates its value, e.g. an id
/// with a syntax), instead of having it recorded.
public protocol PayloadSchemaProviding {
    static var payloadSchema: PayloadSchema { get }
    /// A valid value, which the recorder hands to the type that contains this one.
    static var schemaPlaceholder: Self { get }
}

/// The shape of a store a board owns: its state, and the payload of each action it takes.
public struct StoreSchema: Codable, Hashable, Sendable {
    public var state: PayloadSchema?
    public var actions: [String: PayloadSchema]
    /// A keyed store's record (its state is a map of these by key); nil for other stores.
    public var record: PayloadSchema?
    /// The store's queries: each one's request and answer.
    public var queries: [String: BoardSchemas.Command]?
    /// The actions (of `actions`) only the owning board may dispatch, sorted; absent when none.
    public var ownerActions: [String]?

    public init(
        state: PayloadSchema? = nil, actions: [String: PayloadSchema] = [:], record: PayloadSchema? = nil,
        queries: [String: BoardSchemas.Command]? = nil, ownerActions: [String]? = nil
    ) {
        self.state = state
        self.actions = actions
        self.record = record
        self.queries = queries
        self.ownerActions = ownerActions
    }
}

/// The schemas of what a board registers: its input, each command's request and reply, each
/// output, each action and each store it owns, by name (sent in its registration, shown by
/// `introspect`).
public struct BoardSchemas: Codable, Hashable, Sendable {
    public struct Command: Codable, Hashable, Sendable {
        public var request: PayloadSchema
        public var reply: PayloadSchema
        public init(request: PayloadSchema, reply: PayloadSchema) {
            self.request = request
            self.reply = reply
        }
    }

    /// The input type's shape (the first input type's, for a board that takes several).
    public var input: PayloadSchema?
    /// Every input type's shape, by type name, for a board that takes several (absent otherwise).
    public var inputs: [String: PayloadSchema]?
    public var commands: [String: Command]
    public var outputs: [String: PayloadSchema]
    public var actions: [String: PayloadSchema]
    /// The stores the board owns, by name (absent from registrations of boards that own none,
    /// and of versions before stores described themselves).
    public var stores: [String: StoreSchema]?

    public init(
        input: PayloadSchema? = nil, commands: [String: Command] = [:], outputs: [String: PayloadSchema] = [:],
        actions: [String: PayloadSchema] = [:],
        stores: [String: StoreSchema]? = nil
    ) {
        self.input = input
        self.commands = commands
        self.outputs = outputs
        self.actions = actions
        self.stores = stores
    }

    public var isEmpty: Bool { input == nil && commands.isEmpty && outputs.isEmpty && actions.isEmpty && (stores ?? [:]).isEmpty }
}

extension BoardSchemas {
    /// Every payload shape, one line each, as `busctl introspect` shows them: each input (by type
    /// name, for a board of several), command (request → reply), output, action, and each store
    /// with its record, dispatches (owner-only ones marked) and queries.
    public var shapeLines: [String] {
        var lines: [String] = []
        if let inputs, !inputs.isEmpty {
            for (name, input) in inputs.sorted(by: { $0.key < $1.key }) { lines.append("input \(name)  \(input.summary)") }
        } else if let input {
            lines.append("input \(input.title ?? "")  \(input.summary)")
        }
        for (name, command) in commands.sorted(by: { $0.key < $1.key }) {
            lines.append("command \(name)  \(command.request.summary) → \(command.reply.summary)")
        }
        for (name, output) in outputs.sorted(by: { $0.key < $1.key }) { lines.append("output \(name)  \(output.summary)") }
        for (name, action) in actions.sorted(by: { $0.key < $1.key }) { lines.append("action \(name)  \(action.summary)") }
        for (name, store) in (stores ?? [:]).sorted(by: { $0.key < $1.key }) {
            lines.append("store \(name)  state \(store.state?.summary ?? "-")")
            if let record = store.record { lines.append("  record  \(record.summary)") }
            let ownerOnly = Set(store.ownerActions ?? [])
            for (action, payload) in store.actions.sorted(by: { $0.key < $1.key }) {
                lines.append("  dispatch \(action)  \(payload.summary)\(ownerOnly.contains(action) ? "  (owner only)" : "")")
            }
            for (query, shapes) in (store.queries ?? [:]).sorted(by: { $0.key < $1.key }) {
                lines.append("  query \(query)  \(shapes.request.summary) → \(shapes.reply.summary)")
            }
        }
        return lines
    }
}

// MARK: - Recording

/// Knows which dictionaries have string keys, and their value type.
private protocol StringKeyedDictionary {
    static var valueType: any Decodable.Type { get }
}

extension Dictionary: StringKeyedDictionary where Key == String, Value: Decodable {
    static var valueType: any Decodable.Type { Value.self }
}

/// Lists the raw values of a `CaseIterable` `RawRepresentable` type.
private func enumCases<T>(_ type: T.Type) -> [String]? {
    guard let iterable = type as? any CaseIterable.Type else { return nil }
    func rawValues<C: CaseIterable>(_: C.Type) -> [String]? {
        let values = C.allCases.compactMap { ($0 as? any RawRepresentable).map { "\($0.rawValue)" } }
        return values.isEmpty ? nil : values
    }
    return rawValues(iterable)
}

/// The first case of a `CaseIterable` type, as the placeholder to decode.
private func firstCase<T>(_ type: T.Type) -> T? {
    guard let iterable = type as? any CaseIterable.Type else { return nil }
    func first<C: CaseIterable>(_: C.Type) -> Any? { C.allCases.first }
    return first(iterable) as? T
}

final class SchemaRecorder {
    var definitions: [String: PayloadSchema] = [:]
    private var inProgress: Set<String> = []

    func schema<T: Decodable>(of type: T.Type) -> PayloadSchema {
        _ = try? value(of: type)
        return lastSchema ?? PayloadSchema()
    }

    /// The schema of the value most recently recorded by ``value(of:)``.
    private(set) var lastSchema: PayloadSchema?

    /// Records `type`'s schema (in ``lastSchema``) and returns a placeholder value of it.
    func value<T: Decodable>(of type: T.Type) throws -> T {
        let title = Self.title(of: type)
        if let provided = type as? any PayloadSchemaProviding.Type {
            lastSchema = provided.payloadSchema
            func placeholder<P: PayloadSchemaProviding>(_: P.Type) -> Any { P.schemaPlaceholder }
            guard let value = placeholder(provided) as? T else { throw SchemaRecorderError.noPlaceholder }
            return value
        }
        if let primitive = Self.primitive(type) {
            lastSchema = PayloadSchema(type: primitive.type)
            return primitive.value as! T
        }
        if let cases = enumCases(type), let first = firstCase(type) {
            lastSchema = PayloadSchema(type: "string", title: title, enum: cases)
            return first
        }
        if let dictionary = type as? any StringKeyedDictionary.Type {
            let valueSchema = try? record(dictionary.valueType)
            lastSchema = PayloadSchema(type: "object", additionalProperties: valueSchema ?? PayloadSchema())
            return try T(from: SchemaDecoder(recorder: self, schema: PayloadSchema(), placeholderOnly: true))
        }
        if placeholderDepth > 0 {
            return try T(from: SchemaDecoder(recorder: self, schema: PayloadSchema(), placeholderOnly: true))
        }
        if inProgress.contains(title) {
            // A type inside itself: a reference, and a value decoded from placeholders alone
            // (empty arrays, absent optionals), so that the outer type's decoding goes on.
            definitionsWanted.insert(title)
            placeholderDepth += 1
            defer {
                placeholderDepth -= 1
                lastSchema = PayloadSchema(ref: "#/$defs/\(title)")
            }
            return try T(from: SchemaDecoder(recorder: self, schema: PayloadSchema(), placeholderOnly: true))
        }
        inProgress.insert(title)
        defer { inProgress.remove(title) }
        let schema = PayloadSchema(title: title)
        let decoder = SchemaDecoder(recorder: self, schema: schema, placeholderOnly: false)
        do {
            let result = try T(from: decoder)
            lastSchema = schema
            if definitionsWanted.contains(title) { definitions[title] = schema }
            return result
        } catch {
            if schema.type == nil { schema.type = "object" }
            schema.comment = "partial"
            lastSchema = schema
            if definitionsWanted.contains(title) { definitions[title] = schema }
            throw error
        }
    }

    /// Titles referenced from inside themselves: their schemas go in `$defs`.
    private var definitionsWanted: Set<String> = []
    /// Above 0 while a value is made of placeholders only: nothing is recorded, arrays are empty
    /// and optionals absent.
    private(set) var placeholderDepth = 0

    /// The schema of a type known only as a metatype.
    func record(_ type: any Decodable.Type) throws -> PayloadSchema {
        func open<T: Decodable>(_ type: T.Type) -> PayloadSchema {
            _ = try? value(of: type)
            return lastSchema ?? PayloadSchema()
        }
        return open(type)
    }

    /// The type's name without its module: `GreeterIO.Greet`.
    static func title<T>(of type: T.Type) -> String {
        let full = String(reflecting: type)
        guard let dot = full.firstIndex(of: "."), !full[..<dot].contains("<") else { return full }
        return String(full[full.index(after: dot)...])
    }

    private static func primitive<T>(_ type: T.Type) -> (type: String, value: Any)? {
        switch type {
        case is String.Type: ("string", "")
        case is Bool.Type: ("boolean", false)
        case is Int.Type: ("integer", 0 as Int)
        case is Int8.Type: ("integer", 0 as Int8)
        case is Int16.Type: ("integer", 0 as Int16)
        case is Int32.Type: ("integer", 0 as Int32)
        case is Int64.Type: ("integer", 0 as Int64)
        case is UInt.Type: ("integer", 0 as UInt)
        case is UInt8.Type: ("integer", 0 as UInt8)
        case is UInt16.Type: ("integer", 0 as UInt16)
        case is UInt32.Type: ("integer", 0 as UInt32)
        case is UInt64.Type: ("integer", 0 as UInt64)
        case is Double.Type: ("number", 0.0 as Double)
        case is Float.Type: ("number", 0 as Float)
        case is Date.Type: ("number", Date(timeIntervalSinceReferenceDate: 0))
        case is UUID.Type: ("string", UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        case is URL.Type: ("string", URL(fileURLWithPath: "/"))
        case is Data.Type: ("string", Data())
        default: nil
        }
    }
}

enum SchemaRecorderError: Error { case noPlaceholder }

/// Decodes placeholders while writing down what the type asked for.
private struct SchemaDecoder: Decoder {
    let recorder: SchemaRecorder
    let schema: PayloadSchema
    /// Keys asked about with `decodeNil` (by `decodeIfPresent`): optional fields.
    private let optionals = OptionalKeys()
    var optionalKeys: Set<String> {
        get { optionals.keys }
        nonmutating set { optionals.keys = newValue }
    }
    /// The schema is known already (a provided one): decode placeholders, record nothing.
    let placeholderOnly: Bool
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] = [:]

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if !placeholderOnly {
            schema.type = "object"
            if schema.properties == nil { schema.properties = [:] }
            if schema.required == nil { schema.required = [] }
        }
        return KeyedDecodingContainer(KeyedRecorder<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        if !placeholderOnly { schema.type = "array" }
        return UnkeyedRecorder(decoder: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleRecorder(decoder: self)
    }

    /// Records `type` as the shape of this decoder's value (single value) and returns a placeholder.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        let value = try recorder.value(of: type)
        if !placeholderOnly, let recorded = recorder.lastSchema { adopt(recorded) }
        return value
    }

    private func adopt(_ other: PayloadSchema) {
        schema.type = other.type
        schema.enum = other.enum
        schema.items = other.items
        schema.properties = other.properties
        schema.required = other.required
        schema.additionalProperties = other.additionalProperties
        schema.ref = other.ref
        schema.comment = other.comment
        if other.title != nil, schema.type != "object" { schema.title = schema.title ?? other.title }
    }
}

private struct KeyedRecorder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var allKeys: [Key] { [] }

    func contains(_ key: Key) -> Bool { true }

    /// Asked by `decodeIfPresent` (the default implementations for the standard types): the field
    /// is optional. Placeholders leave it out.
    func decodeNil(forKey key: Key) throws -> Bool {
        decoder.optionalKeys.insert(key.stringValue)
        return decoder.placeholderOnly
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try field(type, key, required: true)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        try field(type, key, required: false)
    }

    private func field<T: Decodable>(_ type: T.Type, _ key: Key, required: Bool) throws -> T {
        do {
            let value = try decoder.recorder.value(of: type)
            note(key, required: required)
            return value
        } catch {
            note(key, required: required)
            throw error
        }
    }

    private func note(_ key: Key, required: Bool) {
        guard !decoder.placeholderOnly, let recorded = decoder.recorder.lastSchema else { return }
        decoder.schema.properties?[key.stringValue] = recorded
        let required = required && !decoder.optionalKeys.contains(key.stringValue)
        if required, !(decoder.schema.required ?? []).contains(key.stringValue) { decoder.schema.required?.append(key.stringValue) }
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        let nested = PayloadSchema()
        if !decoder.placeholderOnly { decoder.schema.properties?[key.stringValue] = nested }
        return try SchemaDecoder(recorder: decoder.recorder, schema: nested, placeholderOnly: decoder.placeholderOnly).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let nested = PayloadSchema()
        if !decoder.placeholderOnly { decoder.schema.properties?[key.stringValue] = nested }
        return try SchemaDecoder(recorder: decoder.recorder, schema: nested, placeholderOnly: decoder.placeholderOnly).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder }
}

private final class OptionalKeys {
    var keys: Set<String> = []
}

/// An array of one element: its shape is the array's `items` (of none, for placeholders).
private struct UnkeyedRecorder: UnkeyedDecodingContainer {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { decoder.placeholderOnly ? 0 : 1 }
    var currentIndex = 0
    var isAtEnd: Bool { decoder.placeholderOnly || currentIndex >= 1 }

    mutating func decodeNil() throws -> Bool { false }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        currentIndex += 1
        do {
            let value = try decoder.recorder.value(of: type)
            if !decoder.placeholderOnly { decoder.schema.items = decoder.recorder.lastSchema }
            return value
        } catch {
            if !decoder.placeholderOnly { decoder.schema.items = decoder.recorder.lastSchema }
            throw error
        }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        currentIndex += 1
        let nested = PayloadSchema()
        if !decoder.placeholderOnly { decoder.schema.items = nested }
        return try SchemaDecoder(recorder: decoder.recorder, schema: nested, placeholderOnly: decoder.placeholderOnly).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        currentIndex += 1
        let nested = PayloadSchema()
        if !decoder.placeholderOnly { decoder.schema.items = nested }
        return try SchemaDecoder(recorder: decoder.recorder, schema: nested, placeholderOnly: decoder.placeholderOnly).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { decoder }
}

private struct SingleRecorder: SingleValueDecodingContainer {
    let decoder: SchemaDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    /// An `Optional` asks first: say "not nil", so that its wrapped shape is recorded.
    func decodeNil() -> Bool { decoder.placeholderOnly }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decoder.decodeValue(type)
    }
}
