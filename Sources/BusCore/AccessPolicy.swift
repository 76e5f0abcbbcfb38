import FoundationEssentials

/// Who may do what on a broker (PROTOCOL §5.10): rules over principals, operations and targets.
///
/// A principal is a remote peer's name: the name its CURVE key has in the allow-list (a child
/// motherboard's included, `insecure` for a plaintext tcp peer). The broker's own user on the
/// ipc socket is not subject to the policy. Rules are read in order; a matching `deny` beats
/// any `allow`, and the first matching rule of the side that decides is named. What no rule
/// allows is denied.
public struct AccessPolicy: Sendable, Equatable {
    /// What a rule grants or denies. Targets are `scope/name` (a root-scope name alone).
    public enum Operation: String, CaseIterable, Sendable, Hashable {
        /// A command to a board (target: the board; `commands` narrows it).
        case call
        /// An activation of a board (target: the board).
        case activate
        /// A command or activation that has to wait for an on-demand board to be started (target:
        /// the board); asked besides `call` or `activate`.
        case start
        /// An output as a board other than the sender's own registered one (target: that board).
        case emit
        /// An action (target: `scope/action`, the scope it is sent in).
        case action
        /// A dispatch to a store (target: `scope/store`).
        case dispatch
        /// A store's state.
        case state
        /// Watching a store's changes.
        case watch
        /// A store's query leases.
        case query
        /// Registering an id the manifest does not declare (target: `scope/id`).
        case register
        /// Registering ids of a scope this peer serves as a child motherboard, the manifest's own
        /// included (target: `scope/id`).
        case serve
        /// A monitor that sees the messages of a board (target: the board sending or receiving).
        case monitor
        /// The payloads of what such a monitor sees.
        case monitorPayloads = "monitor.payloads"
        /// A control operation (target: its name: `list`, `flow.remove`, `metrics`, …).
        case control
    }

    /// One rule: `allow` or `deny`, its operations, for whom and on what.
    public struct Rule: Sendable, Equatable {
        public var name: String
        public var allows: Bool
        /// Nil for every operation (`"*"`).
        public var operations: Set<Operation>?
        public var principals: [String]
        public var targets: [String]
        /// For `call` only: the commands (nil for any).
        public var commands: [String]?

        public init(
            name: String, allows: Bool, operations: Set<Operation>?, principals: [String], targets: [String] = ["*"], commands: [String]? = nil
        ) {
            self.name = name
            self.allows = allows
            self.operations = operations
            self.principals = principals
            self.targets = targets
            self.commands = commands
        }
    }

    /// What the policy says to one question, and the rule that said it.
    public struct Decision: Sendable, Equatable, CustomStringConvertible {
        public var allowed: Bool
        public var rule: String

        public init(allowed: Bool, rule: String) {
            self.allowed = allowed
            self.rule = rule
        }

        /// What no rule allows.
        public static let byDefault = Decision(allowed: false, rule: AccessPolicy.defaultRuleName)

        public var description: String { "\(allowed ? "allowed" : "denied") by \(rule)" }
    }

    /// The rule named when no rule of the policy matches.
    public static let defaultRuleName = "the default (a remote principal may do only what the policy allows)"

    public var groups: [String: Set<String>]
    public var rules: [Rule]

    public init(groups: [String: Set<String>] = [:], rules: [Rule] = []) {
        self.groups = groups
        self.rules = rules
    }

    /// The answer to "may `principal` do `operation` on `target`?" (`command` for `call`).
    public func decide(principal: String, _ operation: Operation, target: String, command: String? = nil) -> Decision {
        var allowedBy: String?
        for rule in rules where rule.operations?.contains(operation) ?? true {
            guard rule.principals.contains(where: { matches(principal: principal, $0) }),
                rule.targets.contains(where: { Self.glob($0, target) })
            else { continue }
            if let commands = rule.commands, !commands.contains(where: { Self.glob($0, command ?? "") }) { continue }
            if !rule.allows { return Decision(allowed: false, rule: "rule '\(rule.name)'") }
            if allowedBy == nil { allowedBy = rule.name }
        }
        return allowedBy.map { Decision(allowed: true, rule: "rule '\($0)'") } ?? .byDefault
    }

    /// Whether some rule allows `principal` `operation` on some target (a monitor may attach, a
    /// child motherboard may ask for the chain above).
    public func allowsSome(principal: String, _ operation: Operation) -> Bool {
        rules.contains { rule in
            rule.allows && (rule.operations?.contains(operation) ?? true) && rule.principals.contains { matches(principal: principal, $0) }
        }
    }

    private func matches(principal: String, _ pattern: String) -> Bool {
        if pattern == "*" { return true }
        if pattern.hasPrefix("@") { return groups[String(pattern.dropFirst())]?.contains(principal) ?? false }
        return pattern == principal
    }

    /// `*` matches any run of characters (`/` included); everything else itself.
    public static func glob(_ pattern: String, _ text: String) -> Bool {
        let pattern = Array(pattern.utf8)
        let text = Array(text.utf8)
        var (p, t) = (0, 0)
        var star: (p: Int, t: Int)?
        while t < text.count {
            if p < pattern.count, pattern[p] == UInt8(ascii: "*") {
                star = (p, t)
                p += 1
            } else if p < pattern.count, pattern[p] == text[t] {
                p += 1
                t += 1
            } else if let last = star {
                p = last.p + 1
                t = last.t + 1
                star = (last.p, last.t + 1)
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == UInt8(ascii: "*") { p += 1 }
        return p == pattern.count
    }
}

extension AccessPolicy {
    /// Reads a policy file strictly: unknown keys, unknown operations, unknown groups, empty or
    /// malformed patterns are refused with their path (`rules[2].allow[0]`).
    public static func parse(_ data: Data, source: String) throws -> AccessPolicy {
        func fail(_ path: String, _ why: String) -> BusError {
            BusError(.badArgument, "policy \(source): \(path.isEmpty ? "" : "\(path): ")\(why)")
        }
        let top: [String: Any]
        do {
            guard let object = try JSONDecoder().decode(PolicyJSON.self, from: data).value as? [String: Any] else {
                throw fail("", "must be a JSON object with \"rules\" (and \"groups\")")
            }
            top = object
        } catch let error as BusError {
            throw error
        } catch let DecodingError.dataCorrupted(context) {
            throw fail("", "not valid JSON (\(context.underlyingError.map { "\($0)" } ?? context.debugDescription))")
        } catch {
            throw fail("", "not valid JSON (\(error))")
        }
        // A key twice in one object would be read as one of its values, silently: a rule's
        // principals or targets written twice must not widen or narrow it unseen.
        if let key = PolicyJSON.firstDuplicateKey(in: data) { throw fail("", "key '\(key)' appears twice in one object") }
        for key in top.keys where !["groups", "rules"].contains(key) { throw fail(key, "unknown key") }
        func strings(_ value: Any?, _ path: String, allowEmpty: Bool = false) throws -> [String] {
            guard let list = value as? [Any], allowEmpty || !list.isEmpty else { throw fail(path, "must be a non-empty list of strings") }
            return try list.enumerated().map { index, item in
                guard let text = item as? String, Self.isPattern(text) else {
                    throw fail("\(path)[\(index)]", "must be a non-empty string of printable ASCII without spaces")
                }
                return text
            }
        }
        var groups: [String: Set<String>] = [:]
        if let value = top["groups"] {
            guard let object = value as? [String: Any] else { throw fail("groups", "must be an object of group name → list of principals") }
            for (name, members) in object {
                guard Self.isPattern(name), !name.contains("*"), !name.hasPrefix("@") else { throw fail("groups.\(name)", "not a group name") }
                let list = try strings(members, "groups.\(name)", allowEmpty: true)
                if let bad = list.first(where: { $0.contains("*") || $0.hasPrefix("@") }) {
                    throw fail("groups.\(name)", "'\(bad)': a group lists principals by name")
                }
                groups[name] = Set(list)
            }
        }
        guard let ruleList = top["rules"] as? [Any] else { throw fail("rules", "must be a list of rules") }
        var rules: [Rule] = []
        for (index, item) in ruleList.enumerated() {
            let path = "rules[\(index)]"
            guard let object = item as? [String: Any] else { throw fail(path, "must be an object") }
            for key in object.keys where !["name", "allow", "deny", "principals", "targets", "commands"].contains(key) {
                throw fail("\(path).\(key)", "unknown key")
            }
            guard (object["allow"] == nil) != (object["deny"] == nil) else { throw fail(path, "needs exactly one of \"allow\" and \"deny\"") }
            let allows = object["allow"] != nil
            let side = allows ? "allow" : "deny"
            let names = try strings(object[side], "\(path).\(side)")
            var operations: Set<Operation>? = []
            for (position, name) in names.enumerated() {
                if name == "*" {
                    operations = nil
                } else if let operation = Operation(rawValue: name) {
                    operations?.insert(operation)
                } else {
                    throw fail(
                        "\(path).\(side)[\(position)]",
                        "unknown operation '\(name)' (one of: \(Operation.allCases.map(\.rawValue).joined(separator: ", ")), or *)")
                }
            }
            let principals = try strings(object["principals"], "\(path).principals")
            for (position, principal) in principals.enumerated() where principal.hasPrefix("@") {
                guard groups[String(principal.dropFirst())] != nil else { throw fail("\(path).principals[\(position)]", "no group '\(principal)'") }
            }
            if let bad = principals.firstIndex(where: { $0 != "*" && $0.contains("*") }) {
                throw fail("\(path).principals[\(bad)]", "a principal is a name, @group or * alone")
            }
            let targets = try object["targets"].map { try strings($0, "\(path).targets") } ?? ["*"]
            let commands = try object["commands"].map { try strings($0, "\(path).commands") }
            if commands != nil, operations != [.call] {
                throw fail("\(path).commands", "narrows \"call\" only: a rule with commands allows or denies call alone")
            }
            if let name = object["name"], !(name is String) { throw fail("\(path).name", "must be a string") }
            rules.append(
                Rule(
                    name: (object["name"] as? String) ?? "rules[\(index)]", allows: allows, operations: operations, principals: principals,
                    targets: targets, commands: commands))
        }
        return AccessPolicy(groups: groups, rules: rules)
    }

    private static func isPattern(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 256 && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}

/// A policy file's JSON as the reader walks it: objects, lists and strings as Swift's own, and
/// anything else (numbers, booleans, null) as a value that is none of them.
private enum PolicyJSON: Decodable {
    case object([String: PolicyJSON])
    case list([PolicyJSON])
    case string(String)
    case other

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let list = try? container.decode([PolicyJSON].self) {
            self = .list(list)
        } else if let object = try? container.decode([String: PolicyJSON].self) {
            self = .object(object)
        } else {
            self = .other
        }
    }

    /// The first key that one object of `data` (valid JSON) has twice, as the decoder reads keys
    /// (escapes resolved); nil when there is none.
    static func firstDuplicateKey(in data: Data) -> String? {
        let bytes = [UInt8](data)
        // One entry per open container: the keys seen so far for an object, nil for an array.
        var open: [Set<String>?] = []
        var expectsKey = false
        var index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "{"):
                open.append([])
                expectsKey = true
            case UInt8(ascii: "["):
                open.append(nil)
                expectsKey = false
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                _ = open.popLast()
                expectsKey = false
            case UInt8(ascii: ","):
                expectsKey = open.last.map { $0 != nil } ?? false
            case UInt8(ascii: "\""):
                var end = index + 1
                while end < bytes.count, bytes[end] != UInt8(ascii: "\"") { end += bytes[end] == UInt8(ascii: "\\") ? 2 : 1 }
                if expectsKey, open.count > 0, open[open.count - 1] != nil {
                    let quoted = Data(bytes[index...min(end, bytes.count - 1)])
                    let key = (try? JSONDecoder().decode(String.self, from: quoted)) ?? String(decoding: quoted, as: UTF8.self)
                    if !open[open.count - 1]!.insert(key).inserted { return key }
                }
                expectsKey = false
                index = end
            default:
                break
            }
            index += 1
        }
        return nil
    }

    var value: Any {
        switch self {
        case .object(let object): object.mapValues(\.value)
        case .list(let list): list.map(\.value)
        case .string(let text): text
        case .other: self
        }
    }
}
