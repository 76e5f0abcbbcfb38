import BusCore
import Foundation
import Testing

@Suite("Access policy: the file and its decisions")
struct AccessPolicyTests {
    static let text = """
        {
          "groups": { "edges": [ "edge-a", "edge-b" ] },
          "rules": [
            { "name": "edges greet", "allow": [ "call" ], "principals": [ "@edges" ], "targets": [ "demo.greeter" ], "commands": [ "greet" ] },
            { "name": "edges serve edge", "allow": [ "serve", "register" ], "principals": [ "@edges" ], "targets": [ "edge/*" ] },
            { "name": "ops do anything", "allow": [ "*" ], "principals": [ "ops" ] },
            { "name": "nobody in vault", "deny": [ "*" ], "principals": [ "*" ], "targets": [ "vault/*" ] }
          ]
        }
        """

    func parse(_ text: String) throws -> AccessPolicy { try AccessPolicy.parse(Data(text.utf8), source: "p.json") }

    @Test func rulesAllowWhatTheyNameAndNothingElse() throws {
        let policy = try parse(Self.text)
        #expect(
            policy.decide(principal: "edge-a", .call, target: "demo.greeter", command: "greet") == .init(allowed: true, rule: "rule 'edges greet'"))
        // Another command, another board, another operation, another principal: the default.
        #expect(policy.decide(principal: "edge-a", .call, target: "demo.greeter", command: "ping") == .byDefault)
        #expect(policy.decide(principal: "edge-a", .call, target: "demo.other", command: "greet") == .byDefault)
        #expect(policy.decide(principal: "edge-a", .activate, target: "demo.greeter") == .byDefault)
        #expect(policy.decide(principal: "stranger", .call, target: "demo.greeter", command: "greet") == .byDefault)
        // A name that only looks like a group member is not one.
        #expect(policy.decide(principal: "@edges", .call, target: "demo.greeter", command: "greet") == .byDefault)
        #expect(policy.decide(principal: "edge-b", .serve, target: "edge/sensor").allowed)
        // `edge/*` does not reach the root scope or another scope that starts the same.
        #expect(!policy.decide(principal: "edge-b", .serve, target: "sensor").allowed)
        #expect(!policy.decide(principal: "edge-b", .serve, target: "edgy/sensor").allowed)
        #expect(policy.allowsSome(principal: "edge-a", .serve))
        #expect(!policy.allowsSome(principal: "edge-a", .monitor))
    }

    /// A deny beats an allow that comes before it, and names itself.
    @Test func aDenyBeatsEveryAllow() throws {
        let policy = try parse(Self.text)
        #expect(policy.decide(principal: "ops", .control, target: "list") == .init(allowed: true, rule: "rule 'ops do anything'"))
        #expect(
            policy.decide(principal: "ops", .call, target: "vault/vault.greeter", command: "greet")
                == .init(allowed: false, rule: "rule 'nobody in vault'"))
        #expect(policy.decide(principal: "edge-b", .serve, target: "vault/x") == .init(allowed: false, rule: "rule 'nobody in vault'"))
    }

    @Test func globsMatchAnyRunOfCharacters() {
        for (pattern, text, matches) in [
            ("*", "", true), ("*", "a/b", true), ("a*", "a", true), ("a*c", "abc", true), ("a*c", "abcd", false), ("*b*", "abc", true),
            ("a*b*c", "aXbYbZc", true), ("a*b*c", "acb", false), ("checkout/*", "checkout/checkout.payment", true),
            ("checkout/*", "checkout.payment", false), ("x", "xx", false), ("**", "q", true),
        ] {
            #expect(AccessPolicy.glob(pattern, text) == matches, "\(pattern) ~ \(text)")
        }
    }

    /// Each mistake is refused with its path in the file, never guessed at.
    @Test func aFileWithAMistakeIsRefusedWithItsPath() {
        func refusal(_ text: String) -> String {
            do {
                _ = try parse(text)
                return "accepted"
            } catch {
                return (error as? BusError)?.message ?? "\(error)"
            }
        }
        let cases: [(String, String)] = [
            (#"{"rules": [], "extra": 1}"#, "extra: unknown key"),
            (#"{"rules": [{"allow": ["call"], "principals": ["a"], "target": ["x"]}]}"#, "rules[0].target: unknown key"),
            (#"{"rules": [{"allow": ["cal"], "principals": ["a"]}]}"#, "rules[0].allow[0]: unknown operation 'cal'"),
            (#"{"rules": [{"allow": ["call"], "deny": ["call"], "principals": ["a"]}]}"#, "rules[0]: needs exactly one of"),
            (#"{"rules": [{"principals": ["a"]}]}"#, "rules[0]: needs exactly one of"),
            (#"{"rules": [{"allow": ["call"], "principals": ["@nobody"]}]}"#, "rules[0].principals[0]: no group '@nobody'"),
            (#"{"rules": [{"allow": ["call"], "principals": ["edge-*"]}]}"#, "rules[0].principals[0]: a principal is a name"),
            (#"{"rules": [{"allow": ["call"], "principals": []}]}"#, "rules[0].principals: must be a non-empty list"),
            (#"{"rules": [{"allow": ["call", "state"], "principals": ["a"], "commands": ["greet"]}]}"#, "rules[0].commands: narrows \"call\" only"),
            (
                #"{"rules": [{"allow": ["call"], "principals": ["a"], "targets": ["caf\#u{E9}"]}]}"#,
                "rules[0].targets[0]: must be a non-empty string of printable ASCII"
            ),
            (#"{"rules": [{"allow": ["call"], "principals": ["a b"]}]}"#, "rules[0].principals[0]: must be a non-empty string"),
            (#"{"groups": {"g": ["@h"]}, "rules": []}"#, "groups.g: '@h': a group lists principals by name"),
            (#"{"rules": {}}"#, "rules: must be a list of rules"),
            (#"[1]"#, "must be a JSON object"),
            ("{", "not valid JSON"),
            // A key twice in one object, however it is spelt, is refused rather than read as one.
            (#"{"rules": [{"allow": ["call"], "principals": ["*"], "principals": ["ops"]}]}"#, "key 'principals' appears twice"),
            (#"{"rules": [{"allow": ["call"], "principals": ["ops"], "principal\u0073": ["*"]}]}"#, "key 'principals' appears twice"),
            (#"{"rules": [], "rules": [{"allow": ["*"], "principals": ["*"]}]}"#, "key 'rules' appears twice"),
            (#"{"groups": {"g": ["a"], "g": ["b"]}, "rules": []}"#, "key 'g' appears twice"),
        ]
        for (text, expected) in cases {
            let message = refusal(text)
            #expect(message.contains(expected) && message.hasPrefix("policy p.json"), "\(text) → \(message)")
        }
        // The same key in two objects is two keys; quotes and braces inside strings are text.
        #expect(
            refusal(
                #"{"rules": [{"name": "a \"}{\" b", "allow": ["call"], "principals": ["a"]}, {"deny": ["call"], "principals": ["a"]}]}"#)
                == "accepted")
        // At the length limit and one past it.
        let longest = String(repeating: "t", count: 256)
        #expect(refusal(#"{"rules": [{"allow": ["call"], "principals": ["a"], "targets": ["\#(longest)"]}]}"#) == "accepted")
        #expect(refusal(#"{"rules": [{"allow": ["call"], "principals": ["a"], "targets": ["\#(longest)t"]}]}"#).contains("targets[0]"))
    }

    /// A rule's name is what a denial says; without one, its place in the file.
    @Test func aRuleWithoutANameIsNamedByItsPlace() throws {
        let policy = try parse(#"{"rules": [{"deny": ["monitor"], "principals": ["*"]}]}"#)
        #expect(policy.decide(principal: "any", .monitor, target: "x") == .init(allowed: false, rule: "rule 'rules[0]'"))
    }
}
