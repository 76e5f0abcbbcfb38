import BoardInterface

/// The interface of the login board (`auth.login`): import this to talk to it type-safely.
public enum LoginIO {
    /// The board's id.
    public static let id: BoardID = "auth.login"
    /// Activate the login board with a ``LogIn``.
    public static let destination = BoardDestination<LogIn>(id)

    /// Input: log a user in.
    public struct LogIn: BusPayload, Hashable {
        public var username: String
        public init(username: String) { self.username = username }
    }

    /// Output: a user logged in. The manifest flows it to the dashboard (`auth.login ->> app.dashboard`).
    public struct LoginSucceeded: BusPayload, Hashable {
        public var username: String
        public var token: String
        public init(username: String, token: String) {
            self.username = username
            self.token = token
        }
    }

    /// Action sent on every login, for any board that subscribes (e.g. the greeter).
    public struct UserLoggedIn: BoardAction, Hashable {
        public static let actionName = "auth.userLoggedIn"
        public var username: String
        public init(username: String) { self.username = username }
    }

    /// Command `users`: who has logged in.
    public struct Users: BoardCommand, Hashable {
        public static let commandName = "users"
        public typealias Reply = UserList
        public init() {}
    }

    /// Reply of ``Users``.
    public struct UserList: BusPayload, Hashable {
        public var users: [String]
        public init(users: [String]) { self.users = users }
    }
}
