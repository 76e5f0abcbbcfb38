import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import Testing

/// The example fleet, as the integration tests start it.
let exampleManifest = """
    {
      "boards": [
        { "id": "auth.login", "executable": "Login", "start": "always" },
        { "id": "app.dashboard", "executable": "Dashboard", "start": "always" },
        { "id": "demo.greeter", "executable": "Greeter", "start": "always" },
        { "id": "demo.spare", "executable": "Greeter", "start": "on-demand" }
      ],
      "flows": [ "auth.login ->> app.dashboard" ]
    }
    """

/// Runs `body` with an `ipc://` endpoint named `name` in a temporary directory of its own,
/// removed afterwards: for tests that bind raw sockets without a fleet.
func withTemporaryEndpoint<T>(_ name: String, _ body: (String) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-\(name)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    return try await body("ipc://\(directory)/\(name).sock")
}

/// Decodes busctl's JSON output.
func decode<T: Decodable>(_ type: T.Type, from result: ChildProcess.Result) throws -> T {
    try JSONDecoder().decode(T.self, from: Data(result.standardOutput.utf8))
}
