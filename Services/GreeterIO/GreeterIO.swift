import BoardInterface

/// The interface of the greeter board (`demo.greeter`): a board that answers commands.
public enum GreeterIO {
    public static let id: BoardID = "demo.greeter"
    /// Activate the greeter with a ``Welcome`` (the dashboard does, with `nextToBoard`).
    public static let destination = BoardDestination<Welcome>(id)

    /// Input: welcome someone.
    public struct Welcome: BusPayload, Hashable {
        public var name: String
        public init(name: String) { self.name = name }
    }

    /// Command `greet`: answers with a greeting.
    public struct Greet: BoardCommand, Hashable {
        public static let commandName = "greet"
        public typealias Reply = Greeting
        public var name: String
        public init(name: String) { self.name = name }
    }

    /// Reply of ``Greet``.
    public struct Greeting: BusPayload, Hashable {
        public var message: String
        public init(message: String) { self.message = message }
    }

    /// Command `ping`: answered at once on the board's socket thread (a synchronous handler).
    public struct Ping: BoardCommand, Hashable {
        public static let commandName = "ping"
        public typealias Reply = Pong
        public var sequence: Int
        public init(sequence: Int) { self.sequence = sequence }
    }

    /// Reply of ``Ping``: the same sequence number.
    public struct Pong: BusPayload, Hashable {
        public var sequence: Int
        public init(sequence: Int) { self.sequence = sequence }
    }

    /// Command `stats`: what the greeter has seen.
    public struct Stats: BoardCommand, Hashable {
        public static let commandName = "stats"
        public typealias Reply = Seen
        public init() {}
    }

    /// Reply of ``Stats``.
    public struct Seen: BusPayload, Hashable {
        /// Names from activations, in order.
        public var welcomed: [String]
        /// Texts of `app.announce` actions, in order.
        public var announcements: [String]
        /// Users from `auth.userLoggedIn` actions, in order.
        public var loginsSeen: [String]
        public var greetings: Int
        public init(welcomed: [String] = [], announcements: [String] = [], loginsSeen: [String] = [], greetings: Int = 0) {
            self.welcomed = welcomed
            self.announcements = announcements
            self.loginsSeen = loginsSeen
            self.greetings = greetings
        }
    }

    /// Action `app.announce`, to which the greeter subscribes.
    public struct Announcement: BoardAction, Hashable {
        public static let actionName = "app.announce"
        public var text: String
        public init(text: String) { self.text = text }
    }
}
