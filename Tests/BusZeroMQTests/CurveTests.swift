import BoardKitTesting
import BusCore
import Foundation
import Testing

@testable import BusZeroMQ

@Suite("CURVE keys, allow-list, ZAP")
struct CurveTests {
    private func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Found by the keyfile fuzz harness: a name starting with a combining mark joined the quote
    /// before it into one character, so the quotes were not taken off when it was read back.
    @Test func anyNameReadsBackAsItIsWritten() throws {
        let keys = try CurveKeyPair.generate(name: "edge-b")
        for name in ["\u{06DA}dge-b\"", "\u{0301}", " spaced ", "\"quoted\"", "ends with =", "\u{1F680} rocket", "#hash", ""] {
            var named = keys
            named.name = name
            #expect(try CurveKeyPair(certificate: named.certificate(includingSecret: true), source: "test") == named, "\(name.debugDescription)")
        }
    }

    @Test func aKeyFileIsWrittenSecretAndReadBack() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = try CurveKeyPair.generate(name: "edge-b")
        let path = "\(directory)/edge-b.key"
        try keys.writeSecret(to: path)
        var info = stat()
        #expect(stat(path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(try CurveKeyPair.load(path: path) == keys)
        // Even a umask that lets everyone read new files does not make a key readable (in a
        // process of its own: the umask is the whole process's, and suites run in parallel).
        let busctl = "\(try TestFleet.locateBinaries())/busctl"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", #"umask 0 && exec "$0" keys new ops --out "$1""#, busctl, "\(directory)/ops.key"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(stat("\(directory)/ops.key", &info) == 0 && info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
        // loadOrCreate keeps an existing pair.
        let again = try CurveKeyPair.loadOrCreate(path: path)
        #expect(again.keys == keys && !again.created)
    }

    @Test func pyzmqReadsTheKeyFiles() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = try CurveKeyPair.generate(name: "ops")
        try keys.writeSecret(to: "\(directory)/ops.key")
        // ZeroMQ's own certificate reader (pyzmq's zmq.auth), an independent implementation of the format.
        let script = """
            import sys, zmq.auth
            public, secret = zmq.auth.load_certificate(sys.argv[1])
            print(public.decode(), secret.decode())
            """
        let child = try await ChildProcess(
            executable: "/usr/bin/python3", arguments: ["-c", script, "\(directory)/ops.key"], environment: ProcessInfo.processInfo.environment,
            directory: directory, name: "pyzmq")
        let result = try await child.wait(timeout: .seconds(30))
        #expect(result.exitCode == 0, "\(result.standardError)")
        #expect(result.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines) == "\(keys.publicKey) \(keys.secretKey ?? "")")
    }

    @Test func badKeysAreRefusedWithTheirReason() throws {
        #expect(throws: BusError.self) { try CurveKeyPair(publicKey: String(repeating: "a", count: 39), secretKey: nil) }
        #expect(throws: BusError.self) {
            try CurveKeyPair(publicKey: String(repeating: "a", count: 40), secretKey: String(repeating: "~", count: 40))
        }
        // 40 characters, one of them not Z85 (multi-byte, so 40 characters but more bytes).
        #expect(!CurveKeyPair.isKey(String(repeating: "a", count: 39) + "é"))
        #expect(throws: BusError.self) { try CurveKeyPair.load(path: "/nonexistent/key") }
    }

    /// A file that cannot be read says why in words, not as an error code.
    @Test func anUnreadableKeyFileSaysWhy() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let binary = "\(directory)/binary.key"
        try Data([0xFF, 0xFE, 0x00, 0xC3]).write(to: URL(fileURLWithPath: binary))
        let cases = [
            ("\(directory)/missing.key", "no such file"), (binary, "not UTF-8 text"),
        ]
        for (path, reason) in cases {
            let keyError = try #require(throws: BusError.self) { try CurveKeyPair.load(path: path) }
            #expect(keyError.message == "cannot read key file \(path): \(reason)")
        }
        // A missing allow-list is an empty one; one that is not text is refused.
        #expect(try CurveAllowList.load(path: "\(directory)/missing.list").name(of: "x") == nil)
        let listError = try #require(throws: BusError.self) { try CurveAllowList.load(path: binary) }
        #expect(listError.message == "cannot read allow-list \(binary): not UTF-8 text")
    }

    @Test func theAllowListTakesNamesAndKeysAndSaysWhichLineIsWrong() throws {
        let key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yu7"
        let hashKey = "#q:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yu7"
        let list = try CurveAllowList(
            parsing: """
                # operators
                ops \(key)   # Ann's laptop

                edge-b\t\(hashKey)
                """)
        #expect(list.name(of: key) == "ops")
        #expect(list.name(of: hashKey) == "edge-b")
        #expect(list.name(of: "unknown") == nil)
        #expect(throws: BusError.self) { try CurveAllowList(parsing: "ops\n") }
        do {
            _ = try CurveAllowList(parsing: "ops \(key)\nbad name \(key)\n")
            Issue.record("a line with a bad key was accepted")
        } catch let error as BusError {
            #expect(error.message.contains("line 2"))
        }
        #expect(throws: BusError.self) { try CurveAllowList(parsing: "ops \(key.dropLast())") }
        #expect(try CurveAllowList.load(path: "/nonexistent/allowed.keys").names.isEmpty)
    }

    /// At start the broker reads the allow-list line by line: a line that is not a name and a key
    /// (a key cut at a multi-byte character, bytes that are not UTF-8, a name alone, a key one
    /// character short) is set aside with its number and refuses only its own key.
    @Test func aDamagedAllowListSetsAsideItsBadLinesAndKeepsTheGoodOnes() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ann = try CurveKeyPair.generate().publicKey
        let bob = try CurveKeyPair.generate().publicKey
        let dan = try CurveKeyPair.generate().publicKey
        var text = Data("# keys\nann \(ann)\nbob \(bob.prefix(39))é\n".utf8)
        text += Data([0xFF, 0xFE, 0x20, 0x41, 0x0A]) + Data("carol\ndan \(dan)\neve \(dan.dropLast())\n".utf8)
        let path = "\(directory)/allowed.keys"
        try text.write(to: URL(fileURLWithPath: path))
        let (list, setAside) = try CurveAllowList.loadSettingAside(path: path)
        #expect(list.names == [ann: "ann", dan: "dan"])
        #expect(setAside.map(\.number) == [3, 4, 5, 7])
        #expect(setAside.allSatisfy { $0.error.code == .badArgument && $0.error.message.hasPrefix("\(path) line \($0.number):") })
        // The strict reading (a change to the file while the broker runs) refuses it whole.
        #expect(throws: BusError.self) { try CurveAllowList.load(path: path) }
        #expect(try CurveAllowList.loadSettingAside(path: "\(directory)/missing").list.names.isEmpty)
    }

    /// A key file whose public key is not its secret key's (edited, or two files mixed) would
    /// give clients a server key no handshake can pass: it is refused, as a cut one is.
    @Test func aKeyFileWhosePublicKeyIsNotItsSecretKeysIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = try CurveKeyPair.generate(name: "motherboard")
        let other = try CurveKeyPair.generate()
        let mixed = try CurveKeyPair(publicKey: other.publicKey, secretKey: keys.secretKey, name: "motherboard")
        try mixed.writeSecret(to: "\(directory)/mixed.key")
        let error = try #require(throws: BusError.self) { try CurveKeyPair.loadOrCreate(path: "\(directory)/mixed.key") }
        #expect(error.message.contains("its public-key is not its secret-key's"))
        try keys.writeSecret(to: "\(directory)/good.key")
        #expect(try CurveKeyPair.loadOrCreate(path: "\(directory)/good.key").keys == keys)
        let text = try String(contentsOfFile: "\(directory)/good.key", encoding: .utf8)
        try String(text.dropLast(30)).write(toFile: "\(directory)/cut.key", atomically: true, encoding: .utf8)
        #expect(throws: BusError.self) { try CurveKeyPair.loadOrCreate(path: "\(directory)/cut.key") }
    }

    @Test func credentialsComeInPairsFromTheEnvironment() throws {
        #expect(try CurveClientCredentials.resolve(environment: [:]) == nil)
        #expect(throws: BusError.self) { try CurveClientCredentials.resolve(environment: ["BOARDBUS_SERVER_KEY": "x"]) }
        #expect(throws: BusError.self) { try CurveClientCredentials.resolve(environment: ["BOARDBUS_CLIENT_KEY": "/k"]) }
        // A tcp endpoint without keys is refused unless plaintext is asked for.
        let address = BusAddress(runtimeDirectory: "/tmp/x", endpoint: "tcp://127.0.0.1:1")
        #expect(throws: BusError.self) { try address.tcpCredentials(environment: [:]) }
        #expect(try address.tcpCredentials(environment: ["BOARDBUS_INSECURE": "1"]) == nil)
    }

    @Test func theZAPHandlerAnswersAsRFC27Says() throws {
        let key = Data((0..<32).map { UInt8($0) })
        let z85 = try #require(ZMQCurve.z85(key))
        func request(_ mechanism: String, credentials: [Data]) -> [Data] {
            [Data("1.0".utf8), Data("7".utf8), Data("boardbus".utf8), Data("10.0.0.2".utf8), Data(), Data(mechanism.utf8)] + credentials
        }
        let allowed = ZAPHandler.answer(request("CURVE", credentials: [key])) { $0.publicKey == z85 && $0.address == "10.0.0.2" ? "edge-b" : nil }
        #expect(allowed.prefix(5).map { String(decoding: $0, as: UTF8.self) } == ["1.0", "7", "200", "OK", "edge-b"])
        // The metadata: one property, the key (ZMTP's property list, as libzmq reads it).
        #expect(allowed[5] == Data([11] + Array("X-Curve-Key".utf8) + [0, 0, 0, 40] + Array(z85.utf8)))
        // NULL (a plaintext endpoint's peers): no key, no metadata.
        #expect(ZAPHandler.answer(request("NULL", credentials: [])) { _ in "insecure" }[5].isEmpty)
        let refused = ZAPHandler.answer(request("CURVE", credentials: [key])) { _ in nil }
        #expect(String(decoding: refused[2], as: UTF8.self) == "400")
        // A key of the wrong length has no Z85 form: the decision sees none.
        let short = ZAPHandler.answer(request("CURVE", credentials: [Data([1, 2, 3])])) { $0.publicKey == nil ? nil : "x" }
        #expect(String(decoding: short[2], as: UTF8.self) == "400")
        let malformed = ZAPHandler.answer([Data("2.0".utf8), Data("9".utf8)]) { _ in "x" }
        #expect(String(decoding: malformed[2], as: UTF8.self) == "500")
        #expect(String(decoding: malformed[1], as: UTF8.self) == "9")
        #expect(ZAPHandler.answer([]) { _ in "x" }.count == 6)
    }
}
