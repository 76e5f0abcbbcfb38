import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Testing

@testable import MotherboardCore
@testable import MotherboardDaemon

@Suite("State directory")
struct StateDirectoryTests {
    @Test func oneBrokerHoldsAStateDirectoryAtATime() async throws {
        try await withTemporaryDirectory("state") { directory in
            let state = "\(directory)/state"
            let claim = try StateDirectory.claim(state, runtimeDirectory: "/run/a")
            var info = stat()
            #expect(stat(state, &info) == 0 && info.st_mode & 0o777 == 0o700)
            let error = #expect(throws: BusError.self) { try StateDirectory.claim(state, runtimeDirectory: "/run/b") }
            #expect(error?.message.contains("runtime directory /run/a") == true, "\(String(describing: error))")
            claim.release()
            try StateDirectory.claim(state, runtimeDirectory: "/run/b").release()
        }
    }

    /// The key pair an earlier version made in the runtime directory moves to the state
    /// directory (kept secret), so the broker keeps its identity; a key already there is kept.
    @Test func curveFilesOfTheRuntimeDirectoryMoveOnceAndNeverOverwrite() async throws {
        try await withTemporaryDirectory("curve") { directory in
            let old = "\(directory)/run/curve"
            let new = "\(directory)/state/curve"
            try FileManager.default.createDirectory(atPath: old, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: new, withIntermediateDirectories: true)
            let keys = try CurveKeyPair.generate(name: "motherboard")
            try keys.writeSecret(to: "\(old)/server.key")
            try "edge-b ABC\n".write(toFile: "\(old)/allowed.keys", atomically: true, encoding: .utf8)
            #expect(try StateDirectory.adoptCurveFiles(from: old, to: new) == ["\(new)/server.key", "\(new)/allowed.keys"])
            #expect(try CurveKeyPair.load(path: "\(new)/server.key").publicKey == keys.publicKey)
            var info = stat()
            #expect(stat("\(new)/server.key", &info) == 0 && info.st_mode & 0o777 == 0o600)
            #expect(!FileManager.default.fileExists(atPath: "\(old)/server.key"))
            #expect(try StateDirectory.adoptCurveFiles(from: old, to: new).isEmpty)

            let other = try CurveKeyPair.generate(name: "motherboard")
            try other.writeSecret(to: "\(old)/server.key")
            #expect(try StateDirectory.adoptCurveFiles(from: old, to: new).isEmpty)
            #expect(try CurveKeyPair.load(path: "\(new)/server.key").publicKey == keys.publicKey)
        }
    }
}
