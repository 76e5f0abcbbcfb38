import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct DeadLetters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dead-letters",
            abstract: "List the activations of at-least-once boards that ran out of deliveries; --replay ID delivers one again.")
        @OptionGroup var options: GlobalOptions
        @Option(help: "Deliver this dead letter again, as a new activation (its delivery count starts over).") var replay: UInt64?

        func run() async throws {
            try await options.withClient { client in
                if let replay {
                    try await client.replayDeadLetter(replay, timeout: options.deadline)
                    return print("dead letter \(replay) delivered again")
                }
                let list = try await client.deadLetters(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                let rows = list.letters.map { letter in
                    [
                        "\(letter.id)", letter.board.rawValue, letter.scope.isRoot ? "-" : letter.scope.name, letter.type.isEmpty ? "-" : letter.type,
                        "\(letter.attempts)", "\(letter.payloadBytes)", letter.reason.escapedForDisplay(limit: 200),
                    ]
                }
                printTable(header: ["ID", "BOARD", "SCOPE", "TYPE", "DELIVERIES", "BYTES", "WHY"], rows: rows)
            }
        }
    }
}
