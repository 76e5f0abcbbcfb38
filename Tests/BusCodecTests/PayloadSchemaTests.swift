import BusCore
import Foundation
import Testing

@Suite("Payload schemas")
struct PayloadSchemaTests {
    enum Priority: String, Codable, CaseIterable { case low, high }

    struct Tag: Codable { var name: String }

    struct Order: Codable {
        var id: Int
        var note: String?
        var price: Double
        var urgent: Bool
        var priority: Priority
        var tags: [Tag]
        var counts: [String: Int]
        var matrix: [[Int]]
        var owner: BoardID
        var placed: Date
    }

    final class Node: Codable {
        var value: Int = 0
        var children: [Node] = []
    }

    struct Validated: Codable {
        var before: Int
        var positive: Positive
        var after: String
    }

    struct Positive: Codable {
        var value: Int
        init(from decoder: any Decoder) throws {
            value = try decoder.singleValueContainer().decode(Int.self)
            guard value > 0 else { throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not positive")) }
        }
    }

    @Test func recordsFieldsTypesOptionalsNestingArraysDictionariesAndEnums() throws {
        let schema = PayloadSchema.of(Order.self)
        #expect(schema.type == "object" && schema.title == "PayloadSchemaTests.Order")
        let properties = try #require(schema.properties)
        #expect(properties["id"]?.type == "integer" && properties["price"]?.type == "number" && properties["urgent"]?.type == "boolean")
        #expect(properties["note"]?.type == "string")
        #expect(Set(schema.required ?? []) == ["id", "price", "urgent", "priority", "tags", "counts", "matrix", "owner", "placed"])
        #expect(properties["priority"]?.enum == ["low", "high"])
        #expect(properties["tags"]?.type == "array" && properties["tags"]?.items?.properties?["name"]?.type == "string")
        #expect(properties["counts"]?.type == "object" && properties["counts"]?.additionalProperties?.type == "integer")
        #expect(properties["matrix"]?.items?.items?.type == "integer")
        #expect(properties["owner"]?.type == "string" && properties["placed"]?.type == "number")
        #expect(
            schema.summary
                == #"{counts: {string: integer}, id: integer, matrix: [[integer]], note?: string, owner: string, placed: number, price: number, priority: "low"|"high", tags: [{name: string}], urgent: boolean}"#
        )
    }

    @Test func aTypeInsideItselfIsAReference() {
        let schema = PayloadSchema.of(Node.self)
        #expect(schema.properties?["children"]?.items?.ref == "#/$defs/PayloadSchemaTests.Node")
        #expect(schema.properties?["value"]?.type == "integer")
    }

    /// A type that refuses the placeholder shows what was read before, marked partial.
    @Test func aValidatingTypeLeavesAPartialSchema() {
        let schema = PayloadSchema.of(Validated.self)
        #expect(schema.comment == "partial")
        #expect(schema.properties?["before"]?.type == "integer")
        #expect(schema.properties?["positive"] != nil)
        #expect(schema.properties?["after"] == nil)
    }

    /// The schema is JSON Schema: `$ref`, `$defs` and `$comment` under their JSON Schema names.
    @Test func encodesAsJSONSchema() throws {
        let json = String(decoding: try PayloadCodec.encode(PayloadSchema.of(Node.self)), as: UTF8.self)
        #expect(json.contains(#""$ref":"#) && json.contains(#""$defs":"#))
        let back = try PayloadCodec.decode(PayloadSchema.self, from: Data(json.utf8))
        #expect(back == PayloadSchema.of(Node.self))
    }

    /// A registration is a peer's word: a schema nested past the JSON parser's depth is refused
    /// with a typed error, not a stack overflow in the broker.
    @Test func aSchemaNestedTooDeepIsRefusedNotACrash() {
        let depth = 100_000
        let json = String(repeating: #"{"items":"#, count: depth) + "{}" + String(repeating: "}", count: depth)
        #expect(throws: BusError.self) { try PayloadCodec.decode(PayloadSchema.self, from: Data(json.utf8)) }
        let registration = #"{"id":"a.b","pid":1,"schemas":{"commands":{},"outputs":{},"actions":{},"input":"# + json + "}}"
        #expect(throws: BusError.self) { try PayloadCodec.decode(Registration.self, from: Data(registration.utf8)) }
    }

    struct JobResult: Codable {
        var job: String
        var output: String
    }
    struct JobFailed: Codable {
        var job: String
        var error: String
    }

    /// `introspect`'s lines: every input of a board of several (it showed only the first's), and
    /// a store's owner-only actions marked.
    @Test func theShapesShowEveryInputAndMarkOwnerOnlyActions() {
        let several = BoardSchemas(
            input: PayloadSchema.of(JobResult.self),
            stores: [
                "jobs": StoreSchema(
                    state: PayloadSchema.of([String: String].self),
                    actions: ["done": PayloadSchema.of(Tag.self), "submit": PayloadSchema.of(Tag.self)], ownerActions: ["done"])
            ])
        var withInputs = several
        withInputs.inputs = ["JobResult": PayloadSchema.of(JobResult.self), "JobFailed": PayloadSchema.of(JobFailed.self)]
        #expect(
            withInputs.shapeLines == [
                "input JobFailed  {error: string, job: string}", "input JobResult  {job: string, output: string}",
                "store jobs  state {string: string}", "  dispatch done  {name: string}  (owner only)", "  dispatch submit  {name: string}",
            ])
        #expect(several.shapeLines.first?.hasSuffix("{job: string, output: string}") == true)
    }
}
