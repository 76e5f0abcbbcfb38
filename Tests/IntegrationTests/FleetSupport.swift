import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import Testing

/// The example fleet, as the integration tests start it.
let exampleManifest = """
    {
      "boards": [
        { "id": "auth.login", "executable": "BoardBusDemoLogin", "start": "always" },
        { "id": "app.dashboard", "executable": "BoardBusDemoDashboard", "start": "always" },
        { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" },
        { "id": "demo.spare", "executable": "BoardBusDemoGreeter", "start": "on-demand" }
      ],
      "flows": [ "auth.login ->> app.dashboard" ]
    }
    """

/// Decodes busctl's JSON output.
func decode<T: Decodable>(_ type: T.Type, from result: ChildProcess.Result) throws -> T {
    try result.decodedOutput(as: T.self)
}
