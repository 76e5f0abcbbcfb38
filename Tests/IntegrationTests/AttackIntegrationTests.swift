import BoardKit
import BusCore
import BoardKitTesting
import BusZeroMQ
import Foundation
import BoardBusDemoGreeterIO
import Testing

let greeterManifest = """
    {
      "boards": [ { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" } ]
    }
    """

/// Each promise, tried as an attacker would: the attack, then what must still hold.
@Suite("Promises under attack", .serialized, .timeLimit(.minutes(3)))
struct AttackIntegrationTests {
    /// A bad argument is exit 2 and says so even when no broker runs (it said `brokerNotRunning`,
    /// exit 1, for a bad board id, JSON or dispatch id: arguments were read after connecting).
    @Test func busctlRefusesBadArgumentsBeforeLookingForABroker() async throws {
        let binaries = try TestFleet.locateBinaries()
        try await withTemporaryDirectory("args") { directory in
            var environment = ProcessInfo.processInfo.environment
            environment["BOARDBUS_RUNTIME_DIR"] = "\(directory)/run"
            environment["BOARDBUS_ADDRESS"] = nil
            for arguments in [
                ["call", "bad!id", "greet"], ["call", "demo.greeter", "greet", "{nope"], ["status", "bad!id"], ["introspect", "bad..id"],
                ["activate", "demo.greeter", "[1,"], ["emit", "bad!id", "T"], ["action", "a", "{"], ["wait", "bad!id"],
                ["dispatch", "comments", "reply", "{}", "--id", ""],
                // Monitor filters that could match nothing, and numbers out of range.
                ["monitor", "--kind", "comand"], ["monitor", "--trace", "4BF92F3577B34DA6A3CE929D0E0E4736"], ["monitor", "--board", "bad!id"],
                ["monitor", "--payload", "--cut", "0"], ["monitor", "--payload", "--cut", "inf"], ["monitor", "--window", "0"],
                ["monitor", "--window", "1e20"], ["monitor", "--count", "-1"], ["monitor", "--for", "nan"],
                ["monitor", "--input", "\(directory)/no-such-file"],
            ] {
                let result = try await ChildProcess(
                    executable: "\(binaries)/busctl", arguments: arguments, environment: environment, directory: directory, name: "busctl"
                ).wait(timeout: .seconds(30))
                #expect(result.exitCode == 2, "\(arguments): \(result.standardError)")
                #expect(result.standardError.hasPrefix("busctl: badArgument: "), "\(arguments): \(result.standardError)")
            }
            // A good one still needs the broker: the same verbs without one are exit 1.
            let noBroker = try await ChildProcess(
                executable: "\(binaries)/busctl", arguments: ["call", "demo.greeter", "greet"], environment: environment, directory: directory,
                name: "busctl-ok"
            ).wait(timeout: .seconds(30))
            #expect(noBroker.exitCode == 1 && noBroker.standardError.hasPrefix("busctl: brokerNotRunning: "), "\(noBroker.standardError)")
        }
    }

    /// busctl refuses numbers no deadline can hold with one line and exit 2 (it died with SIGILL
    /// on `inf` and `1e20`, took `nan` for 1 ms and `-5` for an option).
    @Test func busctlRefusesTimeoutsAndCountsThatAreNotNumbersItCanUse() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            for value in ["inf", "-inf", "nan", "1e20", "-5", "-0", "0", "0.0001", "86401", "abc", "", "0x10"] {
                let result = try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":1}"#, "--timeout", value)
                #expect(result.exitCode == 2, "--timeout \(value): \(result.standardError)")
                #expect(result.standardError.hasPrefix("busctl: badArgument: --timeout"), "--timeout \(value): \(result.standardError)")
                #expect(result.standardError.split(separator: "\n").count == 1, "--timeout \(value): \(result.standardError)")
            }
            for value in ["0", "-1", "1e3", "x", "99999999999999999999"] {
                let result = try await fleet.busctl("state", "comments", "--watch", "--count", value)
                #expect(result.exitCode == 2, "--count \(value): \(result.standardError)")
                #expect(result.standardError.hasPrefix("busctl: badArgument: --count"), "--count \(value): \(result.standardError)")
            }
            let good = try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":1}"#, "--timeout", "2.5")
            #expect(good.exitCode == 0, "\(good.standardError)")
        }
    }

    /// Dispatch ids are never cut: ids over the limit, cut inside a character or empty are
    /// refused before sending (exit 2), and two long ids that share all but their last byte are
    /// two dispatches (ids sharing a 1 018-byte prefix collided, the second reported "already
    /// applied" and lost; 300 emoji were cut mid-character and the caller waited 25 s).
    @Test func dispatchIDsAreRefusedOverTheirLimitAndNeverCollide() async throws {
        try await TestFleet.with(manifest: #"{ "boards": [ { "id": "demo.annotations", "executable": "BoardBusDemoAnnotationFilter" } ] }"#) {
            fleet in
            let action = #"{"filter":"photos"}"#
            let tooLong = String(repeating: "i", count: HeaderCodec.maximumDispatchIDBytes + 1)
            for id in [tooLong, String(repeating: "😀", count: 300), String(repeating: "i", count: 253) + "é" + "😀", ""] {
                let started = ContinuousClock.now
                let refused = try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", id)
                #expect(refused.exitCode == 2, "\(id.utf8.count) bytes: \(refused.standardError)")
                #expect(refused.standardError.hasPrefix("busctl: badArgument: "), "\(refused.standardError)")
                #expect(started.duration(to: .now) < .seconds(20), "refused at once, not after the 25 s deadline")
            }
            let prefix = String(repeating: "p", count: HeaderCodec.maximumDispatchIDBytes - 1)
            for last in ["a", "b"] {
                let result = try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", prefix + last)
                #expect(result.standardOutput.contains("toggle applied"), "\(result.standardOutput) \(result.standardError)")
            }
            let retry = try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", prefix + "b")
            #expect(retry.standardOutput.contains("already applied"))
            // A multi-byte id at the limit goes through whole.
            let emojiID = String(repeating: "😀", count: HeaderCodec.maximumDispatchIDBytes / 4)
            #expect(
                try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", emojiID).standardOutput.contains("toggle applied"))
            #expect(
                try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", emojiID).standardOutput.contains("already applied"))
        }
    }

    /// A header the broker cannot accept (another version, bad UTF-8, trailing bytes, a broken
    /// optional field, an unknown kind) whose sender waits is answered `malformed` with the
    /// sender's correlation id, instead of being dropped while the sender waits out its deadline:
    /// in one frame (version 4) and in version 3's two frames alike.
    @Test(arguments: [EnvelopeHeader.currentVersion, EnvelopeHeader.previousVersion])
    func aBadHeaderWhoseSenderWaitsIsAnsweredMalformed(version: UInt8) async throws {
        // The frames of a message with these header bytes, in the version's framing.
        @Sendable func message(_ header: [UInt8], payload: Data) -> [Data] {
            version == EnvelopeHeader.previousVersion ? [Data(header), payload] : [Data(header) + Data([0]) + payload]
        }
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let answers = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                let good = try HeaderCodec.encode(
                    EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: 100, target: GreeterIO.id.rawValue, typeName: "ping"),
                    version: version)
                var badVersion = good
                badVersion[2] = 2
                var badUTF8 = good
                badUTF8[badUTF8.count - 1] = 0xFF
                var unknownKind = good
                unknownKind[3] = 99
                var answers: [UInt64: BusError] = [:]
                // Version 4's fourth case: a tag with no length before the header's end (in
                // version 3, one trailing byte).
                let trailing = version == EnvelopeHeader.previousVersion ? good + [0] : good + [1]
                for (index, frame) in [badVersion, badUTF8, trailing, good + [1, 0, 9, 0x61], unknownKind].enumerated() {
                    var header = frame
                    header.withUnsafeMutableBytes { HeaderLayout.setCorrelationID(UInt64(200 + index), in: $0) }
                    _ = try socket.send(message(header, payload: Data("{}".utf8)))
                    guard socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() else { continue }
                    let answer = try Envelope(frames: frames)
                    answers[answer.header.correlationID] = answer.carriedError
                }
                // Without reply-expected nobody waits: nothing comes back, the broker goes on.
                var silent = badVersion
                silent.withUnsafeMutableBytes { $0.storeBytes(of: UInt16(0).bigEndian, toByteOffset: 4, as: UInt16.self) }
                _ = try socket.send(message(silent, payload: Data()))
                let answeredSilent = socket.waitReadable(timeoutMilliseconds: 500)
                return (answers, answeredSilent)
            }
            #expect(answers.0.count == 5)
            // Another version is its own code: a peer of version 2 (before the trace field) is told so.
            #expect(answers.0[200]?.code == .unsupportedVersion)
            for index in 1..<5 {
                #expect(answers.0[UInt64(200 + index)]?.code == .malformed, "case \(index)")
            }
            #expect(answers.0[200]?.message.contains("version 2") == true, "\(String(describing: answers.0[200]))")
            #expect(!answers.1)
            #expect(try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":1}"#).exitCode == 0)
        }
    }

    /// A raw peer that registers `demo.greeter` with the real greeter's pid is refused `idInUse`
    /// (it was accepted, and answered the greeter's calls); the real greeter still answers.
    @Test func anImpostorClaimingTheLiveBoardsPIDIsRefused() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let realPID = try #require(fleet.pid(of: GreeterIO.id))
            let answer = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                let registration = Registration(id: GreeterIO.id, pid: realPID, commands: ["ping", "greet"])
                let header = EnvelopeHeader(
                    kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 5000, source: GreeterIO.id.rawValue)
                _ = try socket.send(try Envelope(header: header, payload: try PayloadCodec.encode(registration)).frames())
                guard socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() else { return nil as Envelope? }
                return try Envelope(frames: frames)
            }
            #expect(answer?.carriedError?.code == .idInUse)
            let status = try decode(BoardInfo.self, from: try await fleet.busctl("status", "demo.greeter", "--json"))
            #expect(status.pid == realPID)
            let call = try await fleet.busctl("call", "demo.greeter", "ping", #"{"sequence":7}"#, "--json")
            #expect(call.exitCode == 0, "\(call.standardError)")
            #expect(fleet.brokerLog.contains("registration refused"))
        }
    }
}

extension AttackIntegrationTests {
    /// Names from the command line cannot break busctl's one error line, an id over 255 bytes is
    /// said to be too long, and a scope that does not exist is named as such (it was
    /// `noSuchBoard: no board 'nosuch/demo.greeter'`).
    @Test func badNamesAreSaidOnOneLineAndAnUnknownScopeIsNamed() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let newline = try await fleet.busctl("call", "demo\ngreeter\u{1B}[31m", "ping")
            #expect(newline.exitCode == 2)
            #expect(newline.standardError.split(separator: "\n").count == 1, "\(newline.standardError)")
            #expect(newline.standardError.contains("demo\\ngreeter\\u{1B}[31m"), "\(newline.standardError)")
            #expect(!newline.standardError.contains("\u{1B}"))

            let long = try await fleet.busctl("call", String(repeating: "a", count: 300), "ping")
            #expect(long.exitCode == 2)
            #expect(long.standardError.contains("at most 255 bytes of UTF-8, this one has 300"), "\(long.standardError)")
            #expect(long.standardError.count < 400)

            let scope = try await fleet.busctl("call", "demo.greeter", "ping", "--scope", "nosuch")
            #expect(scope.exitCode == 2)
            #expect(scope.standardError.hasPrefix("busctl: badArgument: no scope 'nosuch' in this fleet"), "\(scope.standardError)")
            let store = try await fleet.busctl("dispatch", "comments", "reply", "--scope", "nosuch")
            #expect(store.standardError.contains("no scope 'nosuch'"), "\(store.standardError)")
            // A monitor of a scope the fleet does not have is refused too, not left showing nothing.
            let monitor = try await fleet.busctl("monitor", "--scope", "nosuch", "--for", "5")
            #expect(monitor.exitCode == 2)
            #expect(monitor.standardError.hasPrefix("busctl: badArgument: no scope 'nosuch' in this fleet"), "\(monitor.standardError)")
            #expect(try await fleet.busctl("monitor", "--scope", "/", "--for", "0.2").exitCode == 0)
        }
    }

    /// The real broker refuses a manifest with a mistake at start, with one line that says where,
    /// and exits 1 without binding or starting anything.
    @Test func theBrokerRefusesAManifestWithAMistake() async throws {
        let binaries = try TestFleet.locateBinaries()
        let cases: [(manifest: String, says: String)] = [
            (#"{"boards": [{"id": "demo.greeter", "executable": "BoardBusDemoGreeter", "restrat": "always"}]}"#, "unknown key 'boards[0].restrat'"),
            (#"{"boards": [{"id": "demo.late", "executable": "NoSuchBoard", "start": "on-demand"}]}"#, "no executable for board 'demo.late'"),
            ("{\n\"boards\": [\n}", "line 3, column 1"),
            (
                #"{"boards": [{"id": "demo.greeter", "executable": "BoardBusDemoGreeter", "restartLimit": {"count": 1, "windowSeconds": 1e20}}]}"#,
                "windowSeconds"
            ),
        ]
        for (index, (manifest, says)) in cases.enumerated() {
            try await withTemporaryDirectory("manifest") { directory in
                try manifest.write(toFile: "\(directory)/fleet.json", atomically: true, encoding: .utf8)
                let broker = try await ChildProcess(
                    executable: "\(binaries)/motherboard",
                    arguments: ["--manifest", "\(directory)/fleet.json", "--runtime-dir", "\(directory)/run", "--exit-with-parent"],
                    environment: ProcessInfo.processInfo.environment, directory: directory, name: "motherboard-\(index)")
                let result = try await broker.wait(timeout: .seconds(30))
                #expect(result.exitCode == 1, "case \(index): \(result.standardError)")
                #expect(result.standardError.contains(says), "case \(index): \(result.standardError)")
                #expect(!FileManager.default.fileExists(atPath: "\(directory)/run/motherboard.sock"))
            }
        }
    }
}

/// Resident memory of a process, in MiB.
func residentMiB(of pid: Int32) -> Double {
    let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Double(line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) / 1024
    }
    return 0
}

extension AttackIntegrationTests {
    /// A client that asks for large answers and never reads them (a DEALER with RCVHWM 1 sending
    /// 600 `greet`s of 512 KiB names) grew the broker from 33 MB to 365 MB, and 354 MB stayed after
    /// it left. Now the broker holds about its backlog budget for it, answers it `busy` (every
    /// request still ends with an answer), serves everyone else meanwhile, and gives the memory
    /// back once the client is gone.
    @Test func aClientThatNeverReadsCannotMakeTheBrokerHoldUnboundedMemory() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let broker = fleet.brokerPID
            let before = residentMiB(of: broker)
            let name = String(repeating: "n", count: 512 * 1024)
            let payload = try PayloadCodec.encode(GreeterIO.Greet(name: name))
            let requests = 600
            let endpoint = fleet.address.endpoint
            let outcome = try await withRawDealer(connectedTo: endpoint, configure: { try $0.set(.receiveHighWaterMark(1)) }) {
                socket -> (peak: Double, answers: Int, busy: Int, servedMeanwhile: Bool) in
                var peak = 0.0
                for index in 1...requests {
                    let header = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(index), timeoutMilliseconds: 120_000,
                        target: GreeterIO.id.rawValue, typeName: "greet")
                    var sent = false
                    for _ in 0..<20_000 where !sent {
                        sent = try socket.send(try Envelope(header: header, payload: payload).frames()) == .sent
                        if !sent { usleep(500) }
                    }
                    if index % 50 == 0 { peak = max(peak, residentMiB(of: broker)) }
                }
                // Meanwhile the broker serves others (another connection asks the greeter how many
                // greetings it made). Wait, boundedly, until the greeter has made more greetings
                // than the budget holds and then none for a second: every request has been
                // answered or refused, and none of the answers was read.
                let context = try ZMQContext()
                defer { context.terminate() }
                let other = try ZMQSocket(context: context, kind: .dealer)
                defer { other.close() }
                try other.connect(endpoint)
                func greetings(_ sequence: UInt64) throws -> Int? {
                    let stats = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: sequence, timeoutMilliseconds: 10_000,
                        target: GreeterIO.id.rawValue, typeName: "stats")
                    _ = try other.send(try Envelope(header: stats, payload: Data("{}".utf8)).frames())
                    guard other.waitReadable(timeoutMilliseconds: 10_000), let frames = try other.receive() else { return nil }
                    return try? PayloadCodec.decode(GreeterIO.Seen.self, from: Envelope(frames: frames).payload).greetings
                }
                var served = false
                var (last, unchanged) = (-1, 0)
                for sequence in 1...600 where unchanged < 4 {
                    usleep(250_000)
                    peak = max(peak, residentMiB(of: broker))
                    guard let count = try greetings(UInt64(sequence)) else { continue }
                    served = true
                    unchanged = count == last && count > 0 ? unchanged + 1 : 0
                    last = count
                }
                // Now read: every request has an answer, a greeting or `busy`.
                var answers = 0
                var busy = 0
                while answers < requests, socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() {
                    answers += 1
                    if (try? Envelope(frames: frames))?.carriedError?.code == .busy { busy += 1 }
                }
                // Having read everything, it is served again (once the broker sees its socket drained).
                var recovered = false
                for attempt in 0..<50 where !recovered {
                    let header = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(10_000 + attempt), timeoutMilliseconds: 10_000,
                        target: GreeterIO.id.rawValue, typeName: "greet")
                    _ = try socket.send(try Envelope(header: header, payload: Data(#"{"name":"back"}"#.utf8)).frames())
                    guard socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() else { break }
                    recovered = (try? Envelope(frames: frames))?.carriedError == nil
                    if !recovered { usleep(100_000) }
                }
                print(
                    "never-reading client: the greeter made \(last) greetings before the client read; broker at \(residentMiB(of: broker)) MiB then")
                return (peak, answers, busy, served && recovered)
            }
            // The answers it holds for the client stay within their budget (32 MiB), and its requests
            // waiting for answers within theirs (16 MiB: the rest are answered `busy` at once, so
            // the greeter works on 32 of them at a time, not 600 that nobody reads, and answers others
            // meanwhile); what is not bounded in bytes is the requests the routing loop has not read
            // yet (PROTOCOL 7.2), which grow while the suite keeps both cores busy. Without the
            // budgets it grew by 330 MiB; with the answers' alone, by 185–204 MiB, and the greeter
            // answered nobody else for 12 s.
            let growth = outcome.peak - before
            #expect(growth < 128, "the broker grew by \(growth) MiB for one client that does not read")
            #expect(outcome.busy > requests / 2, "\(outcome.busy) busy")
            #expect(outcome.answers == requests, "\(outcome.answers) answers, \(outcome.busy) busy")
            #expect(outcome.servedMeanwhile)
            // Gone: the broker gives the memory back.
            let returned = await eventually(timeout: .seconds(15)) { residentMiB(of: broker) - before < 40 }
            #expect(returned, "broker at \(residentMiB(of: broker)) MiB after the client left (\(before) MiB before)")
            print(
                "never-reading client: broker \(before) MiB before, peak \(outcome.peak) MiB, \(residentMiB(of: broker)) MiB after; \(outcome.busy) of \(outcome.answers) answers busy"
            )
        }
    }
}

extension AttackIntegrationTests {
    /// libzmq keeps the frames of a message until its last frame arrives, and no option bounds a
    /// message's frame count (`ZMQ_MAXMSGSIZE` bounds each frame): two connections sending 25
    /// frames of 4 MiB marked "more" and never a last one make the broker hold them while they
    /// stay open (PROTOCOL §7 gives the figures). What holds: the broker serves everyone else
    /// meanwhile, and gives the memory back when those connections close.
    @Test func unfinishedMessagesAreHeldOnlyWhileTheirConnectionsStayOpen() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let broker = fleet.brokerPID
            let before = residentMiB(of: broker)
            let endpoint = fleet.address.endpoint
            let path = try #require(fleet.address.ipcPath)
            let (peak, served) = try await onOwnThread { () -> (Double, Bool) in
                // libzmq's own sockets keep an unfinished message on the sending side: write ZMTP
                // by hand, as an attacker would.
                let connections = try (0..<2).map { _ in try RawZMTPConnection(path: path) }
                defer { connections.forEach { $0.close() } }
                let frame = [UInt8](repeating: 0x61, count: 4 << 20)
                for connection in connections {
                    for _ in 0..<25 { try connection.writeFrame(frame, more: true) }
                }
                var peak = 0.0
                var stable = 0
                var last = 0.0
                for _ in 0..<400 where stable < 10 {
                    usleep(50_000)
                    let now = residentMiB(of: broker)
                    peak = max(peak, now)
                    stable = abs(now - last) < 1 ? stable + 1 : 0
                    last = now
                }
                let context = try ZMQContext()
                defer { context.terminate() }
                let other = try ZMQSocket(context: context, kind: .dealer)
                defer { other.close() }
                try other.connect(endpoint)
                let ping = EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 10_000, target: GreeterIO.id.rawValue,
                    typeName: "ping")
                _ = try other.send(try Envelope(header: ping, payload: Data(#"{"sequence":1}"#.utf8)).frames())
                return (peak, try other.waitReadable(timeoutMilliseconds: 10_000) && other.receive() != nil)
            }
            #expect(served)
            // The attack happened: the broker held the frames while the connections stayed open
            // (200 MiB were sent; PROTOCOL 7.2 says they are held), then gave them back.
            #expect(peak - before > 100, "the broker grew by only \(peak - before) MiB: the frames were not held")
            let returned = await eventually(timeout: .seconds(15)) { residentMiB(of: broker) - before < 40 }
            #expect(returned, "broker at \(residentMiB(of: broker)) MiB after the connections closed (\(before) MiB before)")
            print(
                "unfinished messages: broker \(before) MiB before, peak \(peak) MiB with 2 × 25 × 4 MiB frames pending, \(residentMiB(of: broker)) MiB after they closed"
            )
        }
    }
}

/// A DEALER spoken by hand over a Unix socket (ZMTP 3.0, NULL mechanism): to send what libzmq's
/// own sockets never would, e.g. frames of a message that never ends.
final class RawZMTPConnection {
    private let descriptor: Int32

    init(path: String) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: path.utf8)
            buffer[path.utf8.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { throw BusError(.transport, "connect: errno \(errno)") }
        // Greeting: signature, version 3.0, mechanism NULL, as-server 0, filler.
        var greeting: [UInt8] = [0xFF] + [UInt8](repeating: 0, count: 8) + [0x7F, 3, 0]
        greeting += Array("NULL".utf8) + [UInt8](repeating: 0, count: 16) + [0] + [UInt8](repeating: 0, count: 31)
        try write(greeting)
        // READY with Socket-Type DEALER.
        let ready: [UInt8] = [5] + Array("READY".utf8) + [11] + Array("Socket-Type".utf8) + [0, 0, 0, 6] + Array("DEALER".utf8)
        try write([0x04, UInt8(ready.count)] + ready)
    }

    /// One message frame (long form), marked "more" or not.
    func writeFrame(_ body: [UInt8], more: Bool) throws {
        var header: [UInt8] = [more ? 0x03 : 0x02]
        header += withUnsafeBytes(of: UInt64(body.count).bigEndian, Array.init)
        try write(header)
        try write(body)
    }

    private func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            guard written > 0 else { throw BusError(.transport, "write: errno \(errno)") }
            offset += written
        }
    }

    func close() {
        Glibc.close(descriptor)
    }
}

extension AttackIntegrationTests {
    /// A board that stops reading: a raw peer registers `slow.board` and reads nothing more while
    /// a client sends it 120 requests of 512 KiB. What the broker holds toward the board stays
    /// within its backlog budget: past it, requests are answered `busy` at once (every request
    /// still ends with an answer), and the board is kept, not dropped: once it reads again, the
    /// next request reaches it and its answer reaches the client.
    @Test func aRequestToABoardThatStoppedReadingIsAnsweredBusyAndTheBoardKept() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let endpoint = fleet.address.endpoint
            let outcome = try await withRawDealer(connectedTo: endpoint, configure: { try $0.set(.receiveHighWaterMark(1)) }) {
                board -> (answers: Int, busy: Int, reachedAgain: Bool, answeredAgain: Bool) in
                let registration = Registration(id: "slow.board", pid: getpid(), commands: ["take"])
                let header = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 5000, source: "slow.board")
                _ = try board.send(try Envelope(header: header, payload: try PayloadCodec.encode(registration)).frames())
                guard board.waitReadable(timeoutMilliseconds: 10_000), let registered = try board.receive(),
                    (try? Envelope(frames: registered))?.carriedError == nil
                else { return (0, 0, false, false) }

                let context = try ZMQContext()
                defer { context.terminate() }
                let client = try ZMQSocket(context: context, kind: .dealer)
                defer { client.close() }
                try client.connect(endpoint)
                let big = Data(count: 512 * 1024)
                let requests = 120
                for index in 1...requests {
                    let request = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(index), timeoutMilliseconds: 3000, target: "slow.board",
                        typeName: "take")
                    _ = try client.send(try Envelope(header: request, payload: big).frames())
                }
                // Every request ends with an answer: `busy` at once past the budget, `timeout` for
                // those the board was sent and never answered.
                var (answers, busy) = (0, 0)
                while answers < requests, client.waitReadable(timeoutMilliseconds: 15_000), let frames = try client.receive() {
                    answers += 1
                    if (try? Envelope(frames: frames))?.carriedError?.code == .busy { busy += 1 }
                }
                // The board reads again: everything it was sent (and the broker's heartbeats),
                // until one of the small requests the client sends meanwhile reaches it.
                let again = EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 9999, timeoutMilliseconds: 10_000, target: "slow.board", typeName: "take")
                let deadline = ContinuousClock.now.advanced(by: .seconds(30))
                var lastSent = ContinuousClock.now.advanced(by: .seconds(-1))
                var reachedAgain = false
                while !reachedAgain, ContinuousClock.now < deadline {
                    if lastSent.duration(to: .now) > .milliseconds(300) {
                        _ = try client.send(try Envelope(header: again, payload: Data("{}".utf8)).frames())
                        lastSent = .now
                    }
                    guard board.waitReadable(timeoutMilliseconds: 100), let frames = try board.receive(),
                        let request = try? Envelope(frames: frames), request.header.typeName == "take", request.payload.count == 2
                    else { continue }
                    reachedAgain = true
                    _ = try board.send(try request.reply(payload: Data(#"{"taken":true}"#.utf8)).frames())
                }
                var answeredAgain = false
                while !answeredAgain, client.waitReadable(timeoutMilliseconds: 10_000), let frames = try client.receive() {
                    let answer = try? Envelope(frames: frames)
                    answeredAgain = answer?.header.kind == .reply && answer?.payload == Data(#"{"taken":true}"#.utf8)
                }
                return (answers, busy, reachedAgain, answeredAgain)
            }
            #expect(outcome.answers == 120, "\(outcome.answers) answers")
            #expect(outcome.busy > 0, "no request was refused busy: the broker held all \(outcome.answers) for a board that does not read")
            #expect(outcome.reachedAgain, "the board was dropped, or never sent a request again")
            #expect(outcome.answeredAgain)
            print("board that stopped reading: \(outcome.busy) of \(outcome.answers) requests of 512 KiB answered busy")
        }
    }
}
