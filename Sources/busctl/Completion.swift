import ArgumentParser
import BoardKit
import BusZeroMQ
import BusCore
import Foundation

/// Tab completion of what only the running fleet knows: board ids, scopes, a board's commands,
/// store names. The shells' completion scripts (`--generate-completion-script`) run busctl's
/// hidden completion entry, which calls these: they ask the broker named by the words typed so far
/// (`--bus`, keys, `--scope`) and give up silently within half a second; with no broker, at once.
enum LiveCompletion {
    /// Board ids in the typed scope: live ones and those the manifest can start.
    static let boards = CompletionKind.custom { words, _, prefix in
        await ask(words) { client, scope in
            try await client.tree(timeout: deadline).scopes.filter { $0.name == scope }.flatMap(\.boards).map(\.id.rawValue)
        }.filter { $0.hasPrefix(prefix) }
    }

    /// The fleet's scopes (the root shown as `/`).
    static let scopes = CompletionKind.custom { words, _, prefix in
        await ask(words) { client, _ in
            try await client.tree(timeout: deadline).scopes.map { $0.name.isRoot ? "/" : $0.name.rawValue }
        }.filter { $0.hasPrefix(prefix) }
    }

    /// The commands of the board typed just before (`call ID <tab>`).
    static let commands = CompletionKind.custom { words, index, prefix in
        guard index >= 1 else { return [] }
        let id = words[index - 1]
        return await ask(words) { client, scope in
            try await client.list(timeout: deadline).boards.first { $0.id.rawValue == id && $0.scope == scope }?.commands ?? []
        }.filter { $0.hasPrefix(prefix) }
    }

    /// Store names of the live fleet.
    static let stores = CompletionKind.custom { words, _, prefix in
        await ask(words) { client, _ in
            Set(try await client.stores(timeout: deadline).stores.map(\.store)).sorted()
        }.filter { $0.hasPrefix(prefix) }
    }

    static let deadline: Duration = .milliseconds(500)

    /// The answer of the broker the words name, or nothing: no broker, a refusal, no answer in time.
    private static func ask(_ words: [String], _ question: @Sendable @escaping (BusClient, Scope) async throws -> [String]) async -> [String] {
        var environment = ProcessInfo.processInfo.environment
        func value(_ option: String) -> String? {
            for (index, word) in words.enumerated() {
                if word == option, index + 1 < words.count { return words[index + 1] }
                if word.hasPrefix(option + "=") { return String(word.dropFirst(option.count + 1)) }
            }
            return nil
        }
        if let key = value("--server-key") { environment["BOARDBUS_SERVER_KEY"] = key }
        if let key = value("--client-key") { environment["BOARDBUS_CLIENT_KEY"] = key }
        var address = BusAddress.resolve(explicitEndpoint: value("--bus"), environment: environment, userID: getuid())
        address.insecureTCP = words.contains("--insecure")
        if let path = address.ipcPath, !FileManager.default.fileExists(atPath: path) { return [] }
        if address.isTCP {
            do {
                address.curve = try address.tcpCredentials(environment: environment)
            } catch {
                return []
            }
        }
        let scope = value("--scope").map { $0 == "/" ? Scope.root : Scope($0) } ?? .root
        guard let client = try? BusClient(address: address) else { return [] }
        defer { client.close() }
        return await withTaskGroup(of: [String]?.self) { group in
            group.addTask { try? await question(client, scope) }
            group.addTask {
                try? await Task.sleep(for: deadline + .milliseconds(100))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? []
        }
    }
}
