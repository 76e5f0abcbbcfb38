import BoardKit
import BoardBusDemoDashboardIO
import BoardBusDemoGreeterIO
import BoardBusDemoLoginIO

/// What the dashboard shows.
actor DashboardModel {
    private(set) var user: String?
    private(set) var activations = 0
    func show(_ user: String) {
        self.user = user
        activations += 1
    }
}

let model = DashboardModel()
var board = Board(id: DashboardIO.id)
board.onActivate(LoginIO.LoginSucceeded.self) { login, context in
    await model.show(login.username)
    // Boardy's nextToBoard: the dashboard hands the user on to the greeter.
    try await context.nextToBoard(GreeterIO.destination, with: GreeterIO.Welcome(name: login.username))
}
board.onCommand(DashboardIO.Show.self) { _, _ in
    DashboardIO.View(user: await model.user, activations: await model.activations)
}
board.onCommand(DashboardIO.GreetUser.self) { _, context in
    guard let user = await model.user else { throw BusError(.badArgument, "nobody has logged in yet") }
    let greeting = try await context.interact(with: GreeterIO.id, GreeterIO.Greet(name: user))
    return DashboardIO.GreetedUser(message: greeting.message)
}
board.runAsProcess()
