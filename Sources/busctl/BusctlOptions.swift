import ArgumentParser
import BoardKit
import BusZeroMQ
import Foundation

/// Options every busctl verb takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The motherboard endpoint (default: $BOARDBUS_ADDRESS, else ipc://<runtime dir>/motherboard.sock).")
    var bus: String?

    @Option(name: .long, help: "For a tcp:// --bus: the motherboard's public key, or a file holding it (default $BOARDBUS_SERVER_KEY).")
    var serverKey: String?

    @Option(name: .long, help: "For a tcp:// --bus: this client's key pair file (default $BOARDBUS_CLIENT_KEY; 'busctl keys new' makes one).")
    var clientKey: String?

    @Flag(name: .long, help: "For a tcp:// --bus of a motherboard started with --insecure: plaintext, no keys.")
    var insecure = false

    @Flag(name: .long, help: "Print JSON instead of text.")
    var json = false

    /// Read as text and checked by ``deadline``: ArgumentParser would take `-5` for an option,
    /// and `inf` or `1e20` for numbers no deadline can hold.
    @Option(
        name: .long, parsing: .unconditional, help: "Seconds to wait for an answer (more than 0, at most \(Int(maximumTimeoutSeconds)); default 25).")
    var timeout: String = "25"

    @Option(
        name: .customLong("scope"), help: "The motherboard scope the board ids are in (default: the root scope).",
        completion: LiveCompletion.scopes)
    var scopeOption: String?

    /// `--scope`, the root scope when not given.
    var scope: Scope { scopeOption.map { Scope($0) } ?? .root }

    /// The longest `--timeout`: one day.
    static let maximumTimeoutSeconds: Double = 86_400

    /// `--timeout` as a duration; checked before anything is sent (``withClient(_:)``).
    var deadline: Duration {
        (try? seconds(timeout, option: "--timeout", maximum: Self.maximumTimeoutSeconds)) ?? .seconds(25)
    }

    /// Connects, runs `body`, and turns every failure into one line on stderr and a non-zero exit.
    /// With `waitingForBroker`, a broker that is not running yet is waited for until then (the
    /// first time said on stderr), instead of `brokerNotRunning` at once.
    func withClient(waitingForBroker deadline: ContinuousClock.Instant? = nil, _ body: (BusClient) async throws -> Void) async throws {
        var environment = ProcessInfo.processInfo.environment
        if let serverKey { environment["BOARDBUS_SERVER_KEY"] = serverKey }
        if let clientKey { environment["BOARDBUS_CLIENT_KEY"] = clientKey }
        var address = BusAddress.resolve(explicitEndpoint: bus, environment: environment, userID: getuid())
        address.insecureTCP = insecure
        _ = try validated { try seconds(timeout, option: "--timeout", maximum: Self.maximumTimeoutSeconds) }
        if address.isTCP { address.curve = try validated { try address.tcpCredentials(environment: environment) } }
        do {
            var said = false
            let client: BusClient
            while true {
                do {
                    client = try BusClient(address: address)
                    break
                } catch let error as BusError where error.code == .brokerNotRunning && deadline.map({ ContinuousClock.now < $0 }) == true {
                    if !said {
                        FileHandle.standardError.write(Data("busctl: waiting for the motherboard at \(address.endpoint)\n".utf8))
                        said = true
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            defer { client.close() }
            try await body(client)
        } catch let error as BusError {
            throw report(error)
        }
    }

    /// Checks arguments before anything is sent: a refusal is one line on stderr and exit 2.
    func validated<T>(_ check: () throws -> T) throws -> T {
        do {
            return try check()
        } catch let error as BusError {
            throw report(error)
        }
    }

    /// Prints an error as one line on stderr; the exit code to leave with (2 for a bad argument).
    private func report(_ error: BusError) -> ExitCode {
        // One line, whatever the names in it hold.
        let message = error.message.escapedForDisplay(limit: 2_000)
        FileHandle.standardError.write(Data("busctl: \(error.code.name.escapedForDisplay()): \(message)\n".utf8))
        return ExitCode(error.code == .badArgument ? 2 : 1)
    }

    /// Prints a value as pretty JSON.
    func printJSON<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}

/// `--trace`: the verb's message starts a new W3C trace, whose id is printed on stderr
/// (`trace <32 hex digits>`) before it is sent; `--trace-id ID` starts it with a given id (one
/// taken from another system, or a script's); `busctl monitor --trace ID` shows that trace.
struct TraceOption: ParsableArguments {
    @Flag(name: .long, help: "Start a trace with this message and print its id on stderr.")
    var trace = false

    @Option(name: .customLong("trace-id"), help: "Start a trace with this id (32 lowercase hex digits, not all zero).")
    var traceID: String?

    @Option(name: .customLong("trace-state"), help: "With --trace or --trace-id: the W3C tracestate to carry (printable ASCII, at most 512 bytes).")
    var traceState: String?

    func validate() throws {
        if let traceID, !TraceContext.isTraceID(traceID) {
            FileHandle.standardError.write(
                Data("busctl: badArgument: '\(traceID.escapedForDisplay())' is not a trace id (32 lowercase hex digits, not all zero)\n".utf8))
            throw ExitCode(2)
        }
        if let traceState, !TraceContext.isValidState(traceState.utf8) {
            FileHandle.standardError.write(
                Data("busctl: badArgument: --trace-state takes 1 to \(TraceContext.maximumStateBytes) bytes of printable ASCII\n".utf8))
            throw ExitCode(2)
        }
    }

    /// Runs `body` under a new trace when `--trace` or `--trace-id` is given.
    func run(_ body: () async throws -> Void) async throws {
        guard trace || traceID != nil else { return try await body() }
        var context = TraceContext.newTrace()
        if let traceID, let given = TraceContext(traceparent: "00-\(traceID)-\(context.spanIDText)-01") { context = given }

        FileHandle.standardError.write(Data("trace \(context.traceID)\n".utf8))
        try await BusTrace.$current.withValue(context) { try await BusTrace.$currentState.withValue(traceState) { try await body() } }
    }
}

/// Parses a number of seconds given on the command line: a finite decimal number above zero and
/// at most `maximum`, with at least a millisecond in it; anything else (`inf`, `nan`, `-0`, `1e20`,
/// `-5`, `abc`) is a `badArgument` naming the option.
func seconds(_ text: String, option: String, maximum: Double) throws -> Duration {
    let trimmed = text.trimmingCharacters(in: .whitespaces)
    guard let value = Double(trimmed), trimmed.allSatisfy({ $0.isNumber || $0 == "." || $0 == "e" || $0 == "E" || $0 == "+" || $0 == "-" }) else {
        throw BusError(.badArgument, "\(option) takes a number of seconds, not '\(text)'")
    }
    guard value.isFinite, value >= 0.001, value <= maximum else {
        throw BusError(.badArgument, "\(option) must be at least 0.001 and at most \(Int(maximum)) seconds, not '\(text)'")
    }
    return .milliseconds(Int64((value * 1000).rounded()))
}

/// Parses a count given on the command line: a whole number from 1 to `maximum`.
func count(_ text: String, option: String, maximum: Int = 1_000_000_000) throws -> Int {
    guard let value = Int(text.trimmingCharacters(in: .whitespaces)), (1...maximum).contains(value) else {
        throw BusError(.badArgument, "\(option) takes a whole number from 1 to \(maximum), not '\(text)'")
    }
    return value
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
        let pretty = try? JSONSerialization.data(
            withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes])
    else { return String(decoding: data, as: UTF8.self) }
    return String(decoding: pretty, as: UTF8.self)
}

/// Flushes stdout, so that a watcher's lines reach a pipe as they come.
func fflushStandardOutput() {
    fflush(nil)
}
