import BoardKit
import Foundation

/// The benchmark's board: answers the command `echo` with the payload it was sent.
struct Echo: BoardCommand {
    static let commandName = "echo"
    typealias Reply = Echo
    var data: String
}

var board = Board(id: "bench.echo")
board.onCommand(Echo.self) { echo, _ in echo }
try await board.run()
