import BoardKit
import BusCore
import Foundation

/// The client role of `scripts/bench --counts`: waits for the echo board (under valgrind, the
/// broker and the board start slowly), then makes `requests` echo calls one at a time from the
/// client's own socket thread, as an application's call would, and exits. The script runs it
/// twice with different counts, under callgrind and DHAT, and takes the difference per call.
enum CountLoop {
    static func run(endpoint: String, requests: Int, call: EchoCall, payload: Data) async throws {
        let address = BusAddress.resolve(explicitEndpoint: endpoint, environment: ProcessInfo.processInfo.environment, userID: getuid())
        let client = try BusClient(address: address)
        defer { client.close() }
        _ = try await client.waitForBoard(BoardBusBench.board, timeout: .seconds(300))
        let request = call.payload(payload)
        try await withTaskExecutorPreference(client.executor) {
            for _ in 0..<requests {
                _ = try await client.call(
                    BoardBusBench.board, command: call.command, payload: request, contentType: call.contentType, timeout: .seconds(60))
            }
        }
        print("DONE \(requests)")
    }
}
