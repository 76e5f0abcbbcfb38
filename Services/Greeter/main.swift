import BoardKit
import BoardBusDemoGreeterIO
import BoardBusDemoLoginIO
import FoundationEssentials
import Logging

// A process may own swift-log before its board runs (its own backend; swift-otel's bootstrap
// does the same): `run()`'s default leaves the logging system alone, so this is safe.
// `BOARDBUS_DEMO_LOG_BACKEND=own` makes the greeter such a process.
if ProcessInfo.processInfo.environment["BOARDBUS_DEMO_LOG_BACKEND"] == "own" {
    LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: "own.\(label)") }
    Logger(label: "greeter").notice("the greeter's own logging system")
}

/// What the greeter has seen.
actor GreeterMemory {
    private(set) var seen = GreeterIO.Seen()
    func welcome(_ name: String) { seen.welcomed.append(name) }
    func announce(_ text: String) { seen.announcements.append(text) }
    func loginSeen(_ user: String) { seen.loginsSeen.append(user) }
    func greeted() { seen.greetings += 1 }
}

let memory = GreeterMemory()
var board = Board(id: GreeterIO.id)
board.onActivate(GreeterIO.Welcome.self) { welcome, _ in
    await memory.welcome(welcome.name)
}
board.onCommand(GreeterIO.Greet.self) { greet, _ in
    await memory.greeted()
    return GreeterIO.Greeting(message: "Hello, \(greet.name)!")
}
board.onCommand(GreeterIO.Stats.self) { _, _ in await memory.seen }
board.onCommand(GreeterIO.Ping.self) { ping, _ in GreeterIO.Pong(sequence: ping.sequence) }
board.onAction(GreeterIO.Announcement.self) { announcement, _ in
    await memory.announce(announcement.text)
}
board.onAction(LoginIO.UserLoggedIn.self) { login, _ in
    await memory.loginSeen(login.username)
}
board.runAsProcess()
