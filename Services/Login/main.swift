import BoardKit
import Foundation
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
            let username = request.username.trimmingCharacters(in: .whitespaces)
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
