import ArgumentParser
import BusCore
import BusZeroMQ
import Foundation

extension Busctl {
    /// CURVE keys for tcp endpoints: the motherboard's public key, and client key pairs.
    struct Keys: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "keys",
            abstract: "CURVE keys for tcp: print the motherboard's public key, make a client key pair, check an allow-list.",
            subcommands: [Server.self, New.self, Show.self, Check.self])

        struct Server: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "server",
                abstract: "Print the public key of the motherboard of this state directory (made on its first start with --listen).")
            @Option(help: "The motherboard's state directory (default: $BOARDBUS_STATE_DIR, $XDG_STATE_HOME/boardbus or ~/.local/state/boardbus).")
            var stateDir: String?

            func run() throws {
                var environment = ProcessInfo.processInfo.environment
                if let stateDir { environment["BOARDBUS_STATE_DIR"] = stateDir }
                let path = "\(BusAddress.stateDirectory(environment: environment, userID: getuid()))/curve/server.key"
                print(try keysOrExit { try CurveKeyPair.load(path: path) }.publicKey)
            }
        }

        struct New: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "new",
                abstract: "Make a client key pair: writes the secret file (mode 0600) and prints the line for the motherboard's allow-list.")
            @Argument(help: "The key's name in the allow-list (a board-id-like name, e.g. edge-b).") var name: String
            @Option(help: "Where to write the key pair (default: ./NAME.key); never overwritten.") var out: String?

            func run() throws {
                guard BoardID.isValid(name) else {
                    throw keysFailure(BusError(.badArgument, "'\(name)' is not a valid key name (letters, digits, . _ -)"))
                }
                let path = out ?? "\(name).key"
                guard !FileManager.default.fileExists(atPath: path) else {
                    throw keysFailure(BusError(.badArgument, "\(path) exists; not overwriting a key"))
                }
                let keys = try keysOrExit { try CurveKeyPair.generate(name: name) }
                try keysOrExit { try keys.writeSecret(to: path) }
                FileHandle.standardError.write(Data("busctl: wrote \(path) (mode 0600); add this line to the motherboard's allow-list:\n".utf8))
                print("\(name) \(keys.publicKey)")
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "show", abstract: "Print the allow-list line (name and public key) of a key file.")
            @Argument(help: "A key file.") var file: String

            func run() throws {
                let keys = try keysOrExit { try CurveKeyPair.load(path: file) }
                print("\(keys.name ?? URL(fileURLWithPath: file).deletingPathExtension().lastPathComponent) \(keys.publicKey)")
            }
        }
    }
}

/// Runs a key operation; a failure is one line on stderr and exit 1 (2 for a bad argument).
extension Busctl.Keys {
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Check an allow-list as the motherboard reads it: its first bad line (exit 2), or its names.")
        @Argument(help: "The allow-list file ('NAME KEY' per line).") var file: String

        func run() throws {
            guard FileManager.default.fileExists(atPath: file) else { throw keysFailure(BusError(.badArgument, "no file \(file)")) }
            let list = try keysOrExit { try CurveAllowList.load(path: file) }
            print("\(file): \(list.names.count) key(s): \(Set(list.names.values).sorted().joined(separator: ", "))")
        }
    }
}

private func keysOrExit<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as BusError {
        throw keysFailure(error)
    }
}

private func keysFailure(_ error: BusError) -> ExitCode {
    FileHandle.standardError.write(Data("busctl: \(error.code.name): \(error.message.escapedForDisplay(limit: 2_000))\n".utf8))
    return ExitCode(error.code == .badArgument ? 2 : 1)
}
