import BusCore
import Foundation
import Testing

@testable import MotherboardCore

/// The manifest refuses mistakes with where they are, instead of taking them for defaults.
@Suite("Manifest checks")
struct ManifestCheckTests {
    func refusal(_ text: String) -> BusError? {
        do {
            _ = try FleetManifest.parse(Data(text.utf8), source: "fleet.json")
            return nil
        } catch let error as BusError {
            return error
        } catch {
            return BusError(.transport, "not a BusError: \(error)")
        }
    }

    @Test func anUnknownKeyIsRefusedWithItsPath() {
        let misspelled = refusal(#"{"boards": [{"id": "a.b", "executable": "A"}, {"id": "c.d", "executable": "C", "restrat": "always"}]}"#)
        #expect(misspelled?.code == .badArgument)
        #expect(misspelled?.message.contains("unknown key 'boards[1].restrat'") == true, "\(misspelled?.message ?? "")")
        #expect(refusal(#"{"bords": []}"#)?.message.contains("unknown key 'bords'") == true)
        #expect(refusal(#"{"scopes": [{"name": "s", "parnet": ""}]}"#)?.message.contains("scopes[0].parnet") == true)
        #expect(refusal(#"{"flows": [{"from": "a.b", "to": "c.d", "output_type": "X"}]}"#)?.message.contains("flows[0].output_type") == true)
        let limit = refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restartLimit": {"count": 1, "window": 5}}]}"#)
        #expect(limit?.message.contains("boards[0].restartLimit.window") == true)
        #expect(refusal(#"[1, 2]"#)?.message.contains("must be a JSON object") == true)
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restart": "always"}]}"#) == nil)
    }

    @Test func listenAndAttachAreCheckedToo() {
        #expect(refusal(#"{"attach": {"address": "tcp://10.0.0.1:7400", "serverkey": "k"}}"#)?.message.contains("attach.serverkey") == true)
        #expect(refusal(#"{"attach": {"address": "ipc:///tmp/x.sock"}}"#)?.message.contains("tcp://") == true)
        #expect(refusal(#"{"listen": ["ipc:///tmp/x.sock"]}"#)?.message.contains("tcp://") == true)
        #expect(refusal(#"{"listen": "tcp://10.0.0.1:7400"}"#)?.code == .badArgument)
        let fine = #"{"listen": ["tcp://10.0.0.1:7400"], "attach": {"address": "tcp://10.0.0.9:7400", "serverKey": "a.pub", "clientKey": "b.key"}}"#
        #expect(refusal(fine) == nil)
    }

    @Test func invalidJSONIsReportedWithLineAndColumn() {
        let error = refusal("{\n  \"boards\": [\n    {\"id\": \"a.b\", \"executable\": A}\n  ]\n}")
        #expect(error?.code == .badArgument)
        #expect(error?.message.contains("line 3, column 33") == true, "\(error?.message ?? "")")
    }

    /// Issue: strict JSON, but `[1, 2,]` was accepted (Foundation's parser allows it).
    @Test func aTrailingCommaIsRefusedWithItsLineAndColumn() {
        let array = refusal("{\n  \"listen\": [\"tcp://10.0.0.1:7400\",\n  ]\n}")
        #expect(array?.code == .badArgument)
        #expect(
            array?.message == "manifest fleet.json is not valid JSON at line 2, column 35: a comma before the closing bracket",
            "\(array?.message ?? "")")
        #expect(refusal(#"{"boards": [], }"#)?.message.contains("line 1, column 14") == true)
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A",}]}"#)?.message.contains("a comma before the closing bracket") == true)
        // Commas and brackets inside strings, escaped quotes, and commas between values are fine.
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "x,]\",}", "arguments": ["a", "b"]}]}"#) == nil)
    }

    @Test func badValuesAreReportedWithTheirPath() {
        let policy = refusal(#"{"boards": [{"id": "a.b", "executable": "A", "start": "sometimes"}]}"#)
        #expect(policy?.message.contains("boards[0].start") == true, "\(policy?.message ?? "")")
        let missing = refusal(#"{"boards": [{"id": "a.b"}]}"#)
        #expect(missing?.message.contains("missing key 'boards[0].executable'") == true, "\(missing?.message ?? "")")
    }

    /// Restart limits are durations: `1e20` seconds crashed the broker at the board's first failure.
    @Test func restartLimitsMustBeNumbersADurationHolds() {
        for window in ["1e20", "0", "-1", "-0", "31536001"] {
            let error = refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restartLimit": {"count": 3, "windowSeconds": \#(window)}}]}"#)
            #expect(error?.message.contains("windowSeconds") == true, "\(window): \(error?.message ?? "none")")
        }
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restartLimit": {"count": -1, "windowSeconds": 5}}]}"#) != nil)
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restartLimit": {"count": 1e30, "windowSeconds": 5}}]}"#) != nil)
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A", "restartLimit": {"count": 3, "windowSeconds": 0.5}}]}"#) == nil)
    }

    /// A backoff is 1 to 16 waits of 0 to 3 600 seconds: `-0`, `1e20`, a wait past an hour, none
    /// and 17 are refused naming the entry; JSON has no `inf` nor `nan` to give.
    @Test func aBackoffIsAFewWaitsOfAtMostAnHour() {
        func backoff(_ list: String) -> BusError? {
            refusal(#"{"boards": [{"id": "a.b", "executable": "A", "delivery": "at-least-once", "backoff": \#(list)}]}"#)
        }
        for (list, said) in [
            ("[1, -0]", "backoff[1]"), ("[1e20]", "backoff[0]"), ("[3600.5]", "backoff[0]"), ("[-1]", "backoff[0]"), ("[]", "1 to 16"),
        ] {
            #expect(backoff(list)?.message.contains(said) == true, "\(list): \(backoff(list)?.message ?? "none")")
        }
        #expect(backoff("[" + Array(repeating: "1", count: 17).joined(separator: ",") + "]")?.message.contains("not 17") == true)
        #expect(backoff(#"["5"]"#) != nil)
        #expect(backoff("[0, 0.5, 3600]") == nil)
        let manifest = try? FleetManifest.parse(Data(#"{"boards": [{"id": "a.b", "executable": "A"}]}"#.utf8), source: "fleet.json")
        #expect(manifest?.boards.first?.backoff == [1, 5, 30])
    }

    @Test func aWatchdogIsASecondToADay() {
        for value in ["0.5", "-0", "1e20", "86401", "0"] {
            let error = refusal(#"{"boards": [{"id": "a.b", "executable": "A", "watchdogSeconds": \#(value)}]}"#)
            #expect(error?.message.contains("watchdogSeconds must be from 1 to 86400") == true, "\(value): \(error?.message ?? "none")")
        }
        #expect(refusal(#"{"boards": [{"id": "a.b", "executable": "A", "watchdogSeconds": 30}]}"#) == nil)
    }

    @Test func everyBoardNeedsItsExecutableOnDemandOnesToo() throws {
        let manifest = FleetManifest(boards: [
            .init(id: "a.b", executable: "/bin/sh"), .init(id: "c.d", executable: "NoSuchProgram", start: .onDemand),
        ])
        let error = try #require(throws: BusError.self) { try manifest.checkExecutables(binaryDirectory: "/usr/bin") }
        #expect(error.message.contains("'c.d'") && error.message.contains("/usr/bin/NoSuchProgram"))
        #expect(!error.message.contains("'a.b'"))
    }

    @Test func aFlowToAnUndeclaredBoardIsNamedInAWarning() throws {
        let manifest = FleetManifest(boards: [.init(id: "a.b", executable: "A")], flows: ["a.b ->> x.y", "a.b ->> x.y"])
        #expect(manifest.warnings() == ["a flow names board 'x.y', which the manifest does not declare; it runs only if such a board registers"])
        #expect(
            FleetManifest(boards: [.init(id: "a.b", executable: "A"), .init(id: "x.y", executable: "X")], flows: ["a.b ->> x.y"]).warnings().isEmpty)
    }

    @Test func theExampleFleetsManifestPassesItsOwnChecks() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../fleet/fleet.json").standardized.path
        let manifest = try FleetManifest.load(path: path)
        #expect(!manifest.boards.isEmpty)
        #expect(manifest.warnings().isEmpty)
    }
}
