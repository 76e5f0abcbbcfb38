import BusCore
import Foundation

/// The manifest is strict: a mistake is refused with the place it is at, never taken for a
/// default (a misspelled `"restrat"` gave no restart policy; a window of `1e20` seconds crashed the
/// broker when the board first failed).
extension FleetManifest {
    /// The keys each kind of object of the manifest may have.
    static let knownKeys: [String: Set<String>] = [
        "manifest": ["scopes", "boards", "flows", "metricsListen", "listen", "attach", "mdp", "policy", "nats"],
        "attach": ["address", "serverKey", "clientKey", "insecure"],
        "nats": ["servers", "fleet", "host", "credentials", "tlsCA", "principal", "maximumInFlight"],
        "board": [
            "id", "executable", "arguments", "scope", "start", "restart", "restartLimit", "delivery", "maxDeliveries", "backoff", "watchdogSeconds",
        ],
        "restartLimit": ["count", "windowSeconds"],
        "scope": ["name", "parent"],
        "flow": ["from", "output", "on", "to", "scope"],
    ]

    /// The largest restart window: a year.
    public static let maximumRestartWindowSeconds: Double = 365 * 86_400
    /// The largest restart count in a window.
    public static let maximumRestartCount = 1_000_000

    /// Parses manifest JSON: invalid JSON is reported with its line and column, an unknown key
    /// with its path (`boards[2].restrat`), then the manifest is decoded and validated.
    public static func parse(_ data: Data, source: String) throws -> FleetManifest {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data)
        } catch {
            throw BusError(.badArgument, "manifest \(source) is not valid JSON\(position(of: error, in: data))")
        }
        if let comma = trailingComma(in: data) {
            throw BusError(
                .badArgument, "manifest \(source) is not valid JSON\(position(ofByte: comma, in: data)): a comma before the closing bracket")
        }
        do {
            try checkKeys(object, kind: "manifest", path: "")
        } catch let error as BusError {
            throw BusError(error.code, "manifest \(source): \(error.message)")
        }
        let manifest: FleetManifest
        do {
            manifest = try JSONDecoder().decode(FleetManifest.self, from: data)
        } catch let error as DecodingError {
            throw BusError(.badArgument, "manifest \(source): \(describe(error))")
        } catch {
            throw BusError(.badArgument, "manifest \(source) is not valid: \(error)")
        }
        do {
            try manifest.validate()
        } catch let error as BusError {
            throw BusError(error.code, "manifest \(source): \(error.message)")
        }
        return manifest
    }

    /// Refuses keys no manifest object of that kind has.
    static func checkKeys(_ value: Any, kind: String, path: String) throws {
        guard let object = value as? [String: Any] else {
            if kind == "manifest" { throw BusError(.badArgument, "the manifest must be a JSON object") }
            return
        }
        let known = knownKeys[kind] ?? []
        for key in object.keys.sorted() where !known.contains(key) {
            let at = path.isEmpty ? key : "\(path).\(key)"
            throw BusError(.badArgument, "unknown key '\(at)' (a \(kind) has: \(known.sorted().joined(separator: ", ")))")
        }
        func each(_ key: String, _ kind: String) throws {
            guard let items = object[key] as? [Any] else { return }
            for (index, item) in items.enumerated() {
                try checkKeys(item, kind: kind, path: "\(path.isEmpty ? "" : "\(path).")\(key)[\(index)]")
            }
        }
        switch kind {
        case "manifest":
            try each("boards", "board")
            try each("scopes", "scope")
            try each("flows", "flow")
            if let attach = object["attach"] { try checkKeys(attach, kind: "attach", path: "attach") }
            if let nats = object["nats"] { try checkKeys(nats, kind: "nats", path: "nats") }
        case "board":
            if let limit = object["restartLimit"] { try checkKeys(limit, kind: "restartLimit", path: "\(path).restartLimit") }
        default:
            break
        }
    }

    /// The offset of a comma that only a closing `]` or `}` follows (outside strings), which strict
    /// JSON refuses and Foundation's parser lets through.
    static func trailingComma(in data: Data) -> Int? {
        var inString = false
        var escaped = false
        var lastComma: Int?
        for (offset, byte) in data.enumerated() {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
                lastComma = nil
            case UInt8(ascii: ","): lastComma = offset
            case UInt8(ascii: "]"), UInt8(ascii: "}"): if let lastComma { return lastComma }
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): break
            default: lastComma = nil
            }
        }
        return nil
    }

    /// " at line L, column C" of a byte offset.
    static func position(ofByte offset: Int, in data: Data) -> String {
        let before = data.prefix(max(0, min(offset, data.count)))
        let line = before.reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
        let column = before.count - (before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0) + 1
        return " at line \(line), column \(column)"
    }

    /// "at line L, column C" for a JSON syntax error, from the byte offset Foundation reports.
    static func position(of error: any Error, in data: Data) -> String {
        let description = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? "\(error)"
        guard let range = description.range(of: #"character (\d+)"#, options: .regularExpression),
            let offset = Int(description[range].dropFirst("character ".count))
        else { return ": \(description)" }
        let what = description.components(separatedBy: " around").first ?? description
        return "\(position(ofByte: offset, in: data)): \(what)"
    }

    /// A decoding error as a path and a reason, e.g. `boards[1].start: "sometimes" is not one of …`.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map { key in key.intValue.map { "[\($0)]" } ?? ".\(key.stringValue)" }.joined()
                .trimmingCharacters(in: CharacterSet(charactersIn: "."))
        }
        switch error {
        case .keyNotFound(let key, let context):
            let at = path(context)
            return "missing key '\(at.isEmpty ? key.stringValue : "\(at).\(key.stringValue)")'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    /// Checks what a manifest says of numbers: restart limits a duration can hold.
    func validateNumbers() throws {
        for board in boards {
            guard (1...100).contains(board.maxDeliveries) else {
                throw BusError(.badArgument, "board '\(board.id)': maxDeliveries must be from 1 to 100, not \(board.maxDeliveries)")
            }
            guard (1...Board.maximumBackoffEntries).contains(board.backoff.count) else {
                throw BusError(
                    .badArgument, "board '\(board.id)': backoff must list 1 to \(Board.maximumBackoffEntries) waits, not \(board.backoff.count)")
            }
            if let watchdog = board.watchdogSeconds, !(watchdog.isFinite && watchdog >= 1 && watchdog <= Board.maximumWatchdogSeconds) {
                throw BusError(
                    .badArgument,
                    "board '\(board.id)': watchdogSeconds must be from 1 to \(Int(Board.maximumWatchdogSeconds)), not \(watchdog)")
            }
            for (index, seconds) in board.backoff.enumerated()
            where !(seconds.isFinite && seconds >= 0 && seconds <= Board.maximumBackoffSeconds) || seconds.sign == .minus {
                throw BusError(
                    .badArgument,
                    "board '\(board.id)': backoff[\(index)] must be from 0 to \(Int(Board.maximumBackoffSeconds)) seconds, not \(seconds)")
            }
            let limit = board.restartLimit
            guard (0...Self.maximumRestartCount).contains(limit.count) else {
                throw BusError(
                    .badArgument, "board '\(board.id)': restartLimit.count must be from 0 to \(Self.maximumRestartCount), not \(limit.count)")
            }
            guard limit.windowSeconds.isFinite, limit.windowSeconds > 0, limit.windowSeconds <= Self.maximumRestartWindowSeconds else {
                throw BusError(
                    .badArgument,
                    "board '\(board.id)': restartLimit.windowSeconds must be above 0 and at most \(Int(Self.maximumRestartWindowSeconds)), not \(limit.windowSeconds)"
                )
            }
        }
    }

    /// Refuses boards whose executable is not there: always-on and on-demand alike, at start,
    /// rather than at the first activation.
    public func checkExecutables(binaryDirectory: String) throws {
        let missing = boards.filter { !FileManager.default.isExecutableFile(atPath: $0.executablePath(binaryDirectory: binaryDirectory)) }
        guard missing.isEmpty else {
            let list = missing.map {
                "'\($0.id)'\($0.scope.isRoot ? "" : " in scope '\($0.scope.name)'") (\($0.executablePath(binaryDirectory: binaryDirectory)))"
            }
            throw BusError(.badArgument, "no executable for board \(list.joined(separator: ", "))")
        }
    }

    /// What is allowed but probably a mistake: flows naming boards the manifest does not declare
    /// (a board started by hand may still register such an id and make the flow run).
    public func warnings() -> [String] {
        guard let specs = try? flowSpecs() else { return [] }
        var warned = Set<String>()
        var warnings: [String] = []
        for (scope, spec) in specs {
            for id in spec.sources + (spec.target.map { [$0] } ?? []) where board(id, scope: scope) == nil {
                let name = ScopedName(scope: scope, name: id.rawValue).description
                guard warned.insert(name).inserted else { continue }
                warnings.append("a flow names board '\(name)', which the manifest does not declare; it runs only if such a board registers")
            }
        }
        return warnings
    }
}

extension FleetManifest.Board {
    /// The executable's path: as written when absolute, else in the broker's binary directory.
    public func executablePath(binaryDirectory: String) -> String {
        executable.hasPrefix("/") ? executable : "\(binaryDirectory)/\(executable)"
    }
}
