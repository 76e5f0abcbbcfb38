import BoardBusLogWriter
import Glibc

// boardbus-log-writer --max-bytes N [--keep K] PATH
//
// Started by the motherboard beside each board, the board's output on its standard input: writes
// it to PATH, which never passes N bytes, keeping K old copies (PATH.1 … PATH.K, default 3).

func usage(_ problem: String) -> Never {
    let text = "boardbus-log-writer: \(problem)\nusage: boardbus-log-writer --max-bytes N [--keep K] PATH\n"
    _ = text.withCString { write(STDERR_FILENO, $0, strlen($0)) }
    exit(2)
}

var maximumBytes: Int?
var generations = 3
var path: String?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--max-bytes":
        guard let value = arguments.popFirst().flatMap({ Int($0) }), value >= 4096 else { usage("--max-bytes needs a number of at least 4096") }
        maximumBytes = value
    case "--keep":
        guard let value = arguments.popFirst().flatMap({ Int($0) }), (1...99).contains(value) else { usage("--keep needs a number from 1 to 99") }
        generations = value
    default:
        guard path == nil, !argument.hasPrefix("-") else { usage("unexpected argument '\(argument)'") }
        path = argument
    }
}
guard let maximumBytes, let path else { usage("--max-bytes and PATH are required") }
LogWriter(path: path, maximumBytes: maximumBytes, generations: generations).runAsProcess()
