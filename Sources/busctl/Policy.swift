import ArgumentParser
import BoardKit
import BusCore
import BusZeroMQ
import Foundation

extension Busctl {
    /// The access policy for remote principals (PROTOCOL §5.10).
    struct Policy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "policy",
            abstract: "The access policy: check a file, ask the motherboard what it allows a principal, show the policy in force.",
            subcommands: [Check.self, Show.self])

        struct Check: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "check",
                abstract: "With FILE: check a policy file as the motherboard reads it (exit 2 at its first mistake). "
                    + "With --principal NAME OPERATION TARGET [COMMAND]: ask the motherboard; prints allowed or denied and the deciding rule, exit 0 or 1."
            )
            @OptionGroup var options: GlobalOptions
            @Option(help: "The principal to ask about: a key's name in the allow-list.") var principal: String?
            @Argument(help: "FILE, or OPERATION TARGET [COMMAND] with --principal (e.g. call demo.greeter greet).") var words: [String] = []

            func run() async throws {
                guard let principal else {
                    guard words.count == 1 else { throw ValidationError("give one policy FILE, or --principal NAME OPERATION TARGET [COMMAND]") }
                    do {
                        let policy = try AccessPolicy.load(path: words[0]).policy
                        print("\(words[0]): \(policy.rules.count) rule(s), \(policy.groups.count) group(s)")
                    } catch let error as BusError {
                        FileHandle.standardError.write(Data("busctl: \(error.code.name): \(error.message)\n".utf8))
                        throw ExitCode(2)
                    }
                    return
                }
                guard (2...3).contains(words.count) else { throw ValidationError("give OPERATION TARGET [COMMAND] with --principal") }
                let question = PolicyCheck(principal: principal, operation: words[0], target: words[1], command: words.count == 3 ? words[2] : nil)
                var allowed = false
                try await options.withClient { client in
                    let answer = try await client.policyCheck(question, timeout: options.deadline)
                    allowed = answer.allowed
                    if options.json { return try options.printJSON(answer) }
                    print("\(answer.allowed ? "allowed" : "denied"): \(answer.rule)\(answer.source.map { " (\($0))" } ?? "")")
                }
                if !allowed { throw ExitCode(1) }
            }
        }

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "show", abstract: "Print the access policy in force and where it was read.")
            @OptionGroup var options: GlobalOptions

            func run() async throws {
                try await options.withClient { client in
                    let policy = try await client.policyShow(timeout: options.deadline)
                    if options.json { return try options.printJSON(policy) }
                    FileHandle.standardError.write(
                        Data("# \(policy.source ?? "no file")\(policy.text.isEmpty ? ": no policy (a remote principal may do nothing)" : "")\n".utf8))
                    print(policy.text, terminator: policy.text.hasSuffix("\n") || policy.text.isEmpty ? "" : "\n")
                }
            }
        }
    }
}
