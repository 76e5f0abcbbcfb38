import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct DeadLetters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dead-letters",
            abstract:
                "List the activations of at-least-once boards that ran out of deliveries or were given up; --show ID, --replay ID, --drop ID.")
        @OptionGroup var options: GlobalOptions
        @Option(help: "Deliver this dead letter again, as a new activation (its delivery count starts over).") var replay: UInt64?
        @Option(help: "Show this dead letter whole: its payload, its board's last error, when.") var show: UInt64?
        @Option(help: "Take this dead letter off the list for good.") var drop: UInt64?

        func validate() throws {
            guard [replay, show, drop].compactMap({ $0 }).count <= 1 else {
                throw ValidationError("give one of --replay, --show and --drop")
            }
        }

        func run() async throws {
            try await options.withClient { client in
                if let replay {
                    try await client.replayDeadLetter(replay, timeout: options.deadline)
                    return print("dead letter \(replay) delivered again")
                }
                if let drop {
                    try await client.dropDeadLetter(drop, timeout: options.deadline)
                    return print("dead letter \(drop) dropped")
                }
                if let show {
                    let detail = try await client.deadLetter(show, timeout: options.deadline)
                    if options.json { return try options.printJSON(detail) }
                    let letter = detail.letter
                    print("dead letter \(letter.id): \(letter.scope.isRoot ? "" : "\(letter.scope.name)/")\(letter.board) \(letter.type)")
                    print("at:          \(letter.at ?? DeadLetter.isoTime(letter.time))")
                    print("deliveries:  \(letter.attempts)")
                    print("why:         \(letter.reason.escapedForDisplay(limit: 1_000))")
                    if let error = letter.lastError { print("last error:  \(error.code.name): \(error.message.escapedForDisplay(limit: 1_000))") }
                    if let json = detail.payloadJSON {
                        print("payload:     \(json.escapedForDisplay(limit: 4_000))")
                    } else {
                        print("payload:     \(letter.payloadBytes) bytes (\(detail.contentType ?? "not JSON")), base64 \(detail.payloadBase64 ?? "")")
                    }
                    return
                }
                let list = try await client.deadLetters(timeout: options.deadline)
                if options.json { return try options.printJSON(list) }
                let rows = list.letters.map { letter in
                    [
                        "\(letter.id)", letter.board.rawValue, letter.scope.isRoot ? "-" : letter.scope.name, letter.type.isEmpty ? "-" : letter.type,
                        "\(letter.attempts)", "\(letter.payloadBytes)", letter.at ?? DeadLetter.isoTime(letter.time),
                        letter.reason.escapedForDisplay(limit: 200),
                    ]
                }
                printTable(header: ["ID", "BOARD", "SCOPE", "TYPE", "DELIVERIES", "BYTES", "AT", "WHY"], rows: rows)
            }
        }
    }
}
