import BusCodec
import BusCore
import BusNATS
import Foundation
import MotherboardCore
import MotherboardGateways
import MotherboardTesting

/// What each harness promises for any input: a property that holds, or a precondition failure
/// (libFuzzer keeps the input that broke it).
enum Harnesses {
    static let all: [String: @Sendable (Data) -> Void] = [
        "header": header, "cbor": cbor, "json": json, "mdp": mdp, "route": RoutingHarness.route, "policy": policy,
        "allowlist": allowList, "manifest": manifest, "keyfile": keyFile, "monitor": monitor, "nats": nats,
        "journal": journal,
    ]

    /// The delivery journal, which a broker reads from disk at every start: any text is read
    /// without a trap, into activations and letters within the ranges a ledger makes (the rest
    /// set aside, every line counted once); written again compact, it reads back the same with
    /// nothing set aside; a broker restored from it and ticked past its grace does not trap.
    static func journal(_ input: Data) {
        let contents = DeliveryJournalText.read(input)
        for entry in contents.pending.values {
            precondition(JournaledDelivery.isLedgerID(entry.id), "kept activation id \(entry.id)")
            precondition(BoardID.isValid(entry.board.name), "kept an activation for an invalid board")
            precondition(entry.deliveries >= 1, "kept an activation with \(entry.deliveries) deliveries")
        }
        for (letter, envelope) in contents.letters {
            precondition(JournaledDelivery.isLetterID(letter.id), "kept letter id \(letter.id)")
            precondition(letter.payloadBytes == envelope.payload.count, "a letter's size is not its payload's")
        }
        precondition(Set(contents.letters.map(\.letter.id)).count == contents.letters.count, "a letter kept twice")
        let lines = input.split(separator: UInt8(ascii: "\n")).count
        precondition(contents.setAside.count <= lines, "more lines set aside than there are")
        guard let (text, _) = try? DeliveryJournalText.compact(pending: contents.pending, letters: contents.letters) else {
            preconditionFailure("what was read does not write")
        }
        let again = DeliveryJournalText.read(text)
        precondition(again.setAside.isEmpty, "a compact journal has lines set aside: \(again.setAside.map(\.problem))")
        precondition(again.pending.keys.sorted() == contents.pending.keys.sorted(), "a compact journal reads other activations")
        precondition(again.pending.values.allSatisfy { contents.pending[$0.id]?.envelope == $0.envelope }, "an activation changed")
        precondition(again.letters.map(\.letter) == contents.letters.map(\.letter), "a compact journal reads other letters")
        let motherboard = try! Motherboard(manifest: FleetManifest(), transport: RecordingTransport(), logger: RoutingHarness.quietLogger)
        let now = RoutingHarness.now
        motherboard.restoreDeliveries(Array(contents.pending.values), deadLetters: contents.letters.map { ($0.letter, $0.envelope) }, now: now)
        motherboard.tick(now: now + .seconds(6))
    }

    /// The fleet's NATS subjects, which anyone who may publish on the cluster writes: a subject
    /// (any bytes) is read as a request, an action or a membership subject, or not at all, and what is read has one
    /// spelling, the one the motherboards write; a token is read back only as the token its name
    /// makes.
    static func nats(_ input: Data) {
        let subjects = try! NATSSubjects(fleet: "f")
        guard let subject = String(data: input, encoding: .utf8) else { return }
        if let request = subjects.request(subject) {
            let written =
                request.isStore
                ? subjects.store(request.name, scope: request.scope, kind: request.kind, typeName: request.typeName)
                : subjects.board(request.name, scope: request.scope, kind: request.kind, typeName: request.typeName)
            precondition(written == subject, "read as \(request), written back as '\(written)'")
        }
        if let action = subjects.action(subject) {
            precondition(
                subjects.action(action.name, scope: action.scope, host: action.host) == subject, "an action subject read and written back differs")
        }
        if let host = subjects.host(ofMembership: subject) {
            precondition(
                subjects.announce(host: host) == subject || subjects.withdraw(host: host) == subject,
                "a membership subject read and written back differs")
        }
        for token in subject.split(separator: ".", omittingEmptySubsequences: false) {
            guard let name = NATSSubjects.untoken(token) else { continue }
            precondition(NATSSubjects.token(name) == token, "token '\(token)' read as '\(name)', which is written '\(NATSSubjects.token(name))'")
        }
        let token = NATSSubjects.token(subject)
        precondition(NATSSubjects.untoken(Substring(token)) == subject, "a name's token does not read back")
        precondition(!token.contains(".") && !token.contains("*") && !token.contains(">"), "a token with a separator or a wildcard")
    }

    /// The header codec: every input is refused with a `BusError`, or decodes to a header that
    /// encodes to as many bytes and decodes back to itself. Read as a version-4 message's one
    /// frame, it is refused (with a `BusError`) or its header and payload go back into a frame
    /// that reads the same, and the frame's header size is what `headerEnd` found.
    static func header(_ input: Data) {
        message(input)
        let header: EnvelopeHeader
        do {
            header = try HeaderCodec.decode(input)
        } catch is BusError {
            return
        } catch {
            preconditionFailure("HeaderCodec.decode threw \(error), not a BusError")
        }
        guard let again = try? HeaderCodec.encode(header) else { preconditionFailure("a decoded header does not encode") }
        precondition(again.count == input.count, "re-encoded in \(again.count) bytes, not \(input.count)")
        precondition((try? HeaderCodec.decode(Data(again))) == header, "decode(encode(header)) differs")
    }

    private static func message(_ input: Data) {
        guard case .success(let envelope) = Envelope.parse(frames: [input]) else { return }
        guard let again = try? envelope.frames() else { preconditionFailure("a message read does not encode") }
        precondition(again.count == 1, "a message encodes in \(again.count) frames")
        precondition((try? Envelope(frames: again)) == envelope, "read(encode(message)) differs")
        let end = again[0].withUnsafeBytes { WireFraming.headerEnd(inFrame: $0) }
        precondition(end == (try? HeaderCodec.validatedSize(envelope.header)), "the header ends at \(end), not where it was written")
        // Only a version-4 frame is read alone: it encodes back to as many bytes.
        precondition(again[0].count == input.count, "re-encoded in \(again[0].count) bytes, not \(input.count)")
    }

    /// Representative payloads: nesting, optionals, arrays, dictionaries, enums, numbers. Equal
    /// when every field is, a NaN to a NaN (the round trip may change its payload bits).
    struct Sample: Codable, Equatable {
        static func == (a: Sample, b: Sample) -> Bool {
            a.name == b.name && a.count == b.count && sameNumber(a.ratio, b.ratio) && a.tags == b.tags && a.nested == b.nested
                && a.mode == b.mode && a.flag == b.flag
        }

        enum Mode: String, Codable { case a, b }
        var name: String
        var count: Int?
        var ratio: Double
        var tags: [String]
        var nested: [String: [Int]]
        var mode: Mode?
        var flag: Bool
    }

    /// CBOR: any input decodes or is refused with a `DecodingError`; what decodes encodes and
    /// decodes again to the same value.
    static func cbor(_ input: Data) {
        let attempts: [() throws -> Void] = [
            { try roundTrip(Sample.self, input, equal: ==) }, { try roundTrip([String: [Int]].self, input, equal: ==) },
            { try roundTrip([Double].self, input) { $0.count == $1.count && zip($0, $1).allSatisfy(sameNumber) } },
        ]
        for attempt in attempts {
            do {
                try attempt()
            } catch is DecodingError {
            } catch {
                preconditionFailure("CBOR threw \(error), not a DecodingError")
            }
        }
    }

    private static func roundTrip<T: Codable>(_ type: T.Type, _ input: Data, equal: (T, T) -> Bool) throws {
        let value = try CBORDecoder().decode(type, from: input)
        let again = try CBORDecoder().decode(type, from: try CBOREncoder().encode(value))
        precondition(equal(again, value), "CBOR round trip differs for \(type)")
    }

    /// Equal numbers, or both NaN.
    static func sameNumber(_ a: Double, _ b: Double) -> Bool { a == b || (a.isNaN && b.isNaN) }

    /// JSON: BoardBus's fast path against Foundation on the same text: the same value or
    /// Foundation refuses (the fast path never answers where Foundation would not), and encoding
    /// what was decoded gives Foundation's bytes.
    static func json(_ input: Data) {
        differential(Sample.self, input)
        differential([String: [Int]].self, input)
        differential([Double].self, input)
    }

    private static func differential<T: Codable & Equatable>(_ type: T.Type, _ input: Data) {
        let foundation = try? JSONDecoder().decode(type, from: input)
        guard let fast = JSONPayload.decode(type, from: input) else { return }
        guard let foundation else { preconditionFailure("the fast path read \(type) where Foundation refuses") }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        precondition(fast == foundation, "the fast path read another \(type) than Foundation")
        if let written = JSONPayload.encode(fast) {
            precondition(written == (try? encoder.encode(fast)), "the fast path wrote other bytes than Foundation for \(type)")
        }
    }

    /// Majordomo frames: the input split at 0xFE bytes into messages and at 0xFF into frames,
    /// read as the endpoint's ROUTER would; what a worker command reads as is written back to
    /// the same frames. Then the messages go through the endpoint's session (the motherboard
    /// accepting every registration and answering every request), half a second apart: every
    /// message it sends a peer is MDP, every envelope to the motherboard encodes, it never
    /// serves more services than it may.
    static func mdp(_ input: Data) {
        let messages = input.split(separator: 0xFE, omittingEmptySubsequences: false).map {
            $0.split(separator: 0xFF, omittingEmptySubsequences: false).map { Data($0) }
        }
        for frames in messages {
            guard let message = Majordomo.Incoming(frames: frames) else { continue }
            if case .worker(let command?) = message.sender {
                let written = Majordomo.toWorker(message.peer, dialect: message.dialect, command: command, body: message.body)
                precondition(written == frames, "a worker message is written back otherwise")
            }
        }
        let links = RecordingMajordomoLinks()
        links.encodesRequests = true
        let session = MajordomoSession(settings: .init(endpoint: "ipc:///fuzz"), links: links, logger: RoutingHarness.quietLogger)
        var now = ContinuousClock.now
        for frames in messages {
            session.fromPeer(frames, principal: nil, now: now)
            now = now.advanced(by: .milliseconds(500))
            session.tick(now: now)
            for envelope in links.takeAsServices() {
                precondition((try? envelope.frames()) != nil, "the session sent the motherboard an envelope that does not encode")
                if envelope.header.kind == .register || envelope.header.kind == .command {
                    session.toServices(envelope.reply(payload: Data("{}".utf8)), now: now)
                }
            }
            for request in links.requests {
                session.fromMotherboard(request.reply(payload: Data("{}".utf8)))
            }
            links.requests.removeAll()
            precondition(session.serviceNames.count <= MajordomoBridge.Settings.maximumServices)
        }
        for sent in links.toPeers {
            precondition(Majordomo.Incoming(frames: sent) != nil, "the session sent a peer frames that are not MDP")
        }
        session.close()
    }

    /// The access policy file: every input is refused with a `badArgument` naming the file, or
    /// reads to a policy whose every decision agrees with a plain reading of its rules (a
    /// matching deny wins, else the first matching allow, else the default), for the names and
    /// targets the file itself mentions.
    static func policy(_ input: Data) {
        guard let policy = parsed(orRefusedAs: "policy fuzz", { try AccessPolicy.parse(input, source: "fuzz") }) else { return }
        let principals = Set(policy.rules.flatMap(\.principals) + policy.groups.values.flatMap { $0 } + ["stranger"]).filter { !$0.hasPrefix("@") }
        let targets = Set(policy.rules.flatMap(\.targets) + ["x", "a/b"])
        for principal in principals.sorted().prefix(8) {
            for target in targets.sorted().prefix(8) {
                for operation in AccessPolicy.Operation.allCases {
                    let decision = policy.decide(principal: principal, operation, target: target, command: target)
                    let matching = policy.rules.filter { rule in
                        (rule.operations?.contains(operation) ?? true)
                            && rule.principals.contains {
                                $0 == "*" || $0 == principal
                                    || ($0.hasPrefix("@") && policy.groups[String($0.dropFirst())]?.contains(principal) == true)
                            }
                            && rule.targets.contains { AccessPolicy.glob($0, target) }
                            && (rule.commands.map { $0.contains { AccessPolicy.glob($0, target) } } ?? true)
                    }
                    let expected =
                        matching.first { !$0.allows }.map { AccessPolicy.Decision(allowed: false, rule: "rule '\($0.name)'") }
                        ?? matching.first.map { AccessPolicy.Decision(allowed: true, rule: "rule '\($0.name)'") } ?? .byDefault
                    precondition(decision == expected, "\(principal) \(operation) \(target): \(decision), expected \(expected)")
                }
            }
        }
    }

    /// The allow-list: refused with a `badArgument` naming its line, or read to names and keys
    /// that are valid, and that read back the same when written one `NAME KEY` a line.
    static func allowList(_ input: Data) {
        guard let list = parsed(orRefusedAs: "fuzz line ", { try CurveAllowList(parsing: String(decoding: input, as: UTF8.self), source: "fuzz") })
        else { return }
        for (key, name) in list.names { precondition(CurveKeyPair.isKey(key) && BoardID.isValid(name), "kept '\(name) \(key)'") }
        let written = list.names.map { "\($0.value) \($0.key)" }.joined(separator: "\n")
        precondition((try? CurveAllowList(parsing: written)) == list, "an allow-list does not read back as written")
    }

    /// A CURVE key file: refused with a `badArgument` naming the file, or read to valid keys
    /// whose certificate, with and without the secret, reads back to the same pair.
    static func keyFile(_ input: Data) {
        guard
            let pair = parsed(orRefusedAs: "key file fuzz", { try CurveKeyPair(certificate: String(decoding: input, as: UTF8.self), source: "fuzz") })
        else { return }
        precondition(CurveKeyPair.isKey(pair.publicKey) && pair.secretKey.map(CurveKeyPair.isKey) != false, "kept a key that is not one")
        let again = try? CurveKeyPair(certificate: pair.certificate(includingSecret: true), source: "again")
        precondition(again == pair, "the certificate written does not read back: \(String(describing: again)), not \(pair)")
        var publicOnly = pair
        publicOnly.secretKey = nil
        precondition((try? CurveKeyPair(certificate: pair.certificate(includingSecret: false), source: "again")) == publicOnly)
    }

    /// A `busctl monitor --output` file read by `--input`: the first byte picks the size of the
    /// chunks the rest is read in. Read so or at once, the same lines (or the same refusal, a
    /// `badArgument` naming the line); each event shows as one line without control characters,
    /// is written back to a line that reads as itself, and its payload cut anywhere is a prefix
    /// of it that fits.
    static func monitor(_ input: Data) {
        let size = Int(input.first ?? 1) + 1
        let text = input.dropFirst()
        func read(chunks: [Data]) -> (pushes: [MonitorPush], error: String?) {
            var reader = MonitorCaptureReader(source: "fuzz")
            var pushes: [MonitorPush] = []
            do {
                for chunk in chunks + [nil] {
                    _ = try reader.read(chunk) { push in
                        pushes.append(push)
                        return true
                    }
                }
                return (pushes, nil)
            } catch let error as BusError {
                precondition(error.code == .badArgument && error.message.hasPrefix("fuzz:"), "refused otherwise: \(error)")
                return (pushes, error.message)
            } catch {
                preconditionFailure("not a BusError: \(error)")
            }
        }
        let chunked = read(chunks: stride(from: text.startIndex, to: text.endIndex, by: size).map { Data(text[$0..<min($0 + size, text.endIndex)]) })
        let whole = read(chunks: [Data(text)])
        precondition(chunked.pushes == whole.pushes && chunked.error == whole.error, "read in chunks of \(size), the file reads otherwise")
        for push in whole.pushes {
            var again: MonitorPush?
            var reader = MonitorCaptureReader(source: "again")
            _ = try? reader.read(MonitorCaptureReader.line(push) + Data("\n".utf8)) {
                again = $0
                return true
            }
            precondition(again == push, "a line written for what was read reads otherwise")
            guard let event = push.event else { continue }
            let unshown: Set<Unicode.GeneralCategory> = [.control, .format, .lineSeparator, .paragraphSeparator]
            precondition(!event.line.unicodeScalars.contains { unshown.contains($0.properties.generalCategory) }, "a control character shown")
            guard let payload = event.payload else { continue }
            for limit in [0, 1, 2, 3, size] {
                let excerpt = MonitorEvent.excerpt(Data(payload.utf8), limit: limit)
                precondition(excerpt.cut ? excerpt.text.utf8.count <= limit : excerpt.text == payload, "an excerpt past its limit")
                precondition(payload.utf8.starts(with: excerpt.text.utf8), "an excerpt that is not the payload's start")
            }
        }
    }

    /// The manifest: refused with a `badArgument` naming the file, or read to a manifest a
    /// broker starts with (its scopes, boards and flows consistent).
    static func manifest(_ input: Data) {
        guard let manifest = parsed(orRefusedAs: "manifest fuzz", { try FleetManifest.parse(input, source: "fuzz") }) else { return }
        do {
            _ = try Motherboard(manifest: manifest, transport: RecordingTransport(), logger: RoutingHarness.quietLogger)
        } catch {
            preconditionFailure("a manifest that parsed does not start a broker: \(error)")
        }
    }

    /// What an operator's file reads to, or nil when it is refused as the promise says: a
    /// `badArgument` whose message starts with `prefix` (the file, or its line).
    private static func parsed<T>(orRefusedAs prefix: String, _ parse: () throws -> T) -> T? {
        do {
            return try parse()
        } catch let error as BusError {
            precondition(error.code == .badArgument && error.message.hasPrefix(prefix), "refused otherwise: \(error)")
            return nil
        } catch {
            preconditionFailure("not a BusError: \(error)")
        }
    }
}
