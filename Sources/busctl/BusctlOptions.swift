import ArgumentParser
import BoardKit
import Foundation

/// Options every busctl verb takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The motherboard endpoint (default: $BOARDBUS_ADDRESS, else ipc://<runtime dir>/motherboard.sock).")
    var bus: String?

    @Flag(name: .long, help: "Print JSON instead of text.")
    var json = false

    @Option(name: .long, help: "Seconds to wait for an answer.")
    var timeout: Double = 25

    @Option(name: .long, help: "The motherboard scope the board ids are in (default: the root scope).")
    var scope: String = ""

    var deadline: Duration { .milliseconds(Int64(max(0.001, timeout) * 1000)) }

    /// Connects, runs `body`, and turns every failure into one line on stderr and a non-zero exit.
    func withClient(_ body: (BusClient) async throws -> Void) async throws {
        let address = BusAddress.resolve(explicitEndpoint: bus, environment: ProcessInfo.processInfo.environment, userID: getuid())
        do {
            let client = try BusClient(address: address)
            defer { client.close() }
            try await body(client)
        } catch let error as BusError {
            FileHandle.standardError.write(Data("busctl: \(error.code): \(error.message)\n".utf8))
            throw ExitCode(error.code == .badArgument ? 2 : 1)
        }
    }

    /// Prints a value as pretty JSON.
    func printJSON<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}

/// Parses a board id argument; a bad one is a `badArgument`.
func boardID(_ text: String) throws -> BoardID {
    try BoardID(validating: text)
}

/// Checks a JSON argument and returns its bytes; `{}` when it is absent.
func jsonPayload(_ text: String?) throws -> Data {
    guard let text else { return Data("{}".utf8) }
    let data = Data(text.utf8)
    do {
        _ = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
    } catch {
        throw BusError(.badArgument, "argument is not valid JSON: \(text)")
    }
    return data
}

/// Re-indents a JSON payload for people; leaves it as is when it is not JSON.
func prettyJSON(_ data: Data) -> String {
    guard let object = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]),
          let pretty = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes])
    else { return String(decoding: data, as: UTF8.self) }
    return String(decoding: pretty, as: UTF8.self)
}

/// Flushes stdout, so that a watcher's lines reach a pipe as they come.
func fflushStandardOutput() {
    fflush(nil)
}
