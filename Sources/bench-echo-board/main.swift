import BoardKit
import BusCore
import Foundation

/// The benchmark's board: answers the command `echo` with the payload it was sent.
struct Echo: BoardCommand {
    static let commandName = "echo"
    typealias Reply = Echo
    var data: String
}

var board = Board(id: "bench.echo")
board.onCommand(Echo.self) { echo, _ in echo }
// The same without decoding: separates the bus's cost from JSON's in the benchmark.
board.onCommand(named: "echo.raw") { message, _ in message.payload }
// Accepts any activation, so the benchmark can time an on-demand start.
board.onAnyActivation { _, _ in }
// A synchronous main, as a board process's should be: four threads, and valgrind can run it for
// `scripts/bench --counts` (an async main ends in libdispatch's `dispatch_main`; see runBlocking).
board.runAsProcess()
