import BoardKit
import FoundationEssentials
import BoardBusDemoLoginIO

/// The users who logged in, in order.
actor LoginLedger {
    private(set) var users: [String] = []
    func record(_ user: String) { users.append(user) }
}

/// The login module: a ModulePlugin the launcher installs into the board.
struct LoginModule: ModulePlugin {
    let identifier = "auth.login.module"
    let ledger = LoginLedger()

    func install(into board: inout Board) {
        let ledger = self.ledger
        board.declaresOutput(LoginIO.LoginSucceeded.self)
        board.onActivate(LoginIO.LogIn.self) { request, context in
            // Spaces, tabs and line breaks around a name are not part of it.
            let name = request.username.drop(while: \.isWhitespace)
            let username = String(name[..<(name.lastIndex { !$0.isWhitespace }.map(name.index(after:)) ?? name.startIndex)])
            guard !username.isEmpty else { throw BusError(.badArgument, "username must not be empty") }
            await ledger.record(username)
            try await context.sendAction(LoginIO.UserLoggedIn(username: username))
            try await context.sendToMotherboard(LoginIO.LoginSucceeded(username: username, token: UUID().uuidString))
        }
        board.onCommand(LoginIO.Users.self) { _, _ in
            LoginIO.UserList(users: await ledger.users)
        }
    }
}

var launcher = PluginLauncher(id: LoginIO.id)
try launcher.install(LoginModule())
launcher.launchAsProcess()
