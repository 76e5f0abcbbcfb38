import BoardInterface
import BoardBusDemoLoginIO

/// The interface of the dashboard board (`app.dashboard`).
public enum DashboardIO {
    public static let id: BoardID = "app.dashboard"
    /// The dashboard is activated with the login board's output.
    public static let destination = BoardDestination<LoginIO.LoginSucceeded>(id)

    /// Command `show`: what the dashboard displays.
    public struct Show: BoardCommand, Hashable {
        public static let commandName = "show"
        public typealias Reply = View
        public init() {}
    }

    /// Reply of ``Show``.
    public struct View: BusPayload, Hashable {
        /// The user of the last activation, nil before the first one.
        public var user: String?
        public var activations: Int
        public init(user: String?, activations: Int) {
            self.user = user
            self.activations = activations
        }
    }

    /// Command `greetUser`: the dashboard asks the greeter board (board-to-board interaction).
    public struct GreetUser: BoardCommand, Hashable {
        public static let commandName = "greetUser"
        public typealias Reply = GreetedUser
        public init() {}
    }

    /// Reply of ``GreetUser``.
    public struct GreetedUser: BusPayload, Hashable {
        public var message: String
        public init(message: String) { self.message = message }
    }
}
