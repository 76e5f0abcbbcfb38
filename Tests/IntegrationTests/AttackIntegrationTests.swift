import BoardKit
import BusCore
import BoardKitTesting
import BusZeroMQ
import Foundation
import GreeterIO
import Testing

let greeterManifest = """
    {
      "boards": [ { "id": "demo.greeter", "executable": "Greeter", "start": "always" } ]
    }
    """

/// Each promise, tried as an attacker would: the attack, then what must still hold.
@Suite("Promises under attack", .serialized, .timeLimit(.minutes(3)))
struct AttackIntegrationTests {
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
        try await TestFleet.with(manifest: fluxManifest) { fleet in
            let action = #"{"filter":"photos"}"#
            let tooLong = String(repeating: "i", count: HeaderCodec.maximumDispatchIDBytes + 1)
            for id in [tooLong, String(repeating: "😀", count: 300), String(repeating: "i", count: 253) + "é"  + "😀", ""] {
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
            #expect(try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", emojiID).standardOutput.contains("toggle applied"))
            #expect(try await fleet.busctl("dispatch", "annotationFilter", "toggle", action, "--id", emojiID).standardOutput.contains("already applied"))
        }
    }

    /// A header the broker cannot accept (another version, bad UTF-8, trailing bytes, a broken
    /// optional field, an unknown kind) whose sender waits is answered `malformed` with the
    /// sender's correlation id, instead of being dropped while the sender waits out its deadline.
    @Test func aBadHeaderWhoseSenderWaitsIsAnsweredMalformed() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let answers = try await withRawDealer(connectedTo: fleet.address.endpoint) { socket in
                let good = try HeaderCodec.encode(EnvelopeHeader(
                    kind: .command, flags: .replyExpected, correlationID: 100, target: GreeterIO.id.rawValue, typeName: "ping"))
                var badVersion = good
                badVersion[2] = 1
                var badUTF8 = good
                badUTF8[badUTF8.count - 1] = 0xFF
                var unknownKind = good
                unknownKind[3] = 99
                var answers: [UInt64: BusError] = [:]
                for (index, frame) in [badVersion, badUTF8, good + [0], good + [1, 0, 9, 0x61], unknownKind].enumerated() {
                    var header = frame
                    header.withUnsafeMutableBytes { HeaderLayout.setCorrelationID(UInt64(200 + index), in: $0) }
                    _ = try socket.send([Data(header), Data("{}".utf8)])
                    guard socket.waitReadable(timeoutMilliseconds: 10_000), let frames = try socket.receive() else { continue }
                    let answer = try Envelope(frames: frames)
                    answers[answer.header.correlationID] = answer.carriedError
                }
                // Without reply-expected nobody waits: nothing comes back, the broker goes on.
                var silent = badVersion
                silent.withUnsafeMutableBytes { $0.storeBytes(of: UInt16(0).bigEndian, toByteOffset: 4, as: UInt16.self) }
                _ = try socket.send([Data(silent), Data()])
                let answeredSilent = socket.waitReadable(timeoutMilliseconds: 500)
                return (answers, answeredSilent)
            }
            #expect(answers.0.count == 5)
            for index in 0..<5 {
                #expect(answers.0[UInt64(200 + index)]?.code == .malformed, "case \(index)")
            }
            #expect(answers.0[200]?.message.contains("version 1") == true)
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
                let header = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 5000, source: GreeterIO.id.rawValue)
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
        }
    }

    /// The real broker refuses a manifest with a mistake at start, with one line that says where,
    /// and exits 1 without binding or starting anything.
    @Test func theBrokerRefusesAManifestWithAMistake() async throws {
        let binaries = try TestFleet.locateBinaries()
        let cases: [(manifest: String, says: String)] = [
            (#"{"boards": [{"id": "demo.greeter", "executable": "Greeter", "restrat": "always"}]}"#, "unknown key 'boards[0].restrat'"),
            (#"{"boards": [{"id": "demo.late", "executable": "NoSuchBoard", "start": "on-demand"}]}"#, "no executable for board 'demo.late'"),
            ("{\n\"boards\": [\n}", "line 3, column 1"),
            (#"{"boards": [{"id": "demo.greeter", "executable": "Greeter", "restartLimit": {"count": 1, "windowSeconds": 1e20}}]}"#, "windowSeconds"),
        ]
        for (index, (manifest, says)) in cases.enumerated() {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-manifest-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try manifest.write(toFile: "\(directory)/fleet.json", atomically: true, encoding: .utf8)
            let broker = try ChildProcess(
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
