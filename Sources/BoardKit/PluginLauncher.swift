import BusCore
import FoundationEssentials
import Glibc

/// A module of a service (Boardy's ModulePlugin): it installs its handlers into the board.
public protocol ModulePlugin: Sendable {
    /// Unique per launcher; installing the same identifier twice is an error.
    var identifier: String { get }
    func install(into board: inout Board)
}

/// Boardy's PluginLauncher: a service's `main` installs its plugins, then launches the board.
///
/// ```swift
/// var launcher = PluginLauncher(id: LoginIO.id)
/// try launcher.install(LoginModule())
/// launcher.launchAsProcess()   // or, among other async work, `try await launcher.launch()`
/// ```
public struct PluginLauncher: Sendable {
    private var board: Board
    private var installed: [String] = []

    public init(id: BoardID, environment: [String: String] = ProcessInfo.processInfo.environment) {
        board = Board(id: id, environment: environment)
    }

    /// Launches a board built elsewhere (e.g. a ``TaskBoard``) with plugins added to it.
    public init(board: Board) {
        self.board = board
    }

    /// The identifiers installed so far, in order.
    public var plugins: [String] { installed }

    /// Installs a plugin; throws `badArgument` when one with the same identifier is installed.
    public mutating func install(_ plugin: some ModulePlugin) throws {
        guard !installed.contains(plugin.identifier) else {
            throw BusError(.badArgument, "plugin '\(plugin.identifier)' is already installed")
        }
        installed.append(plugin.identifier)
        plugin.install(into: &board)
    }

    /// Runs the board with every installed plugin until SIGTERM or completion.
    public func launch(logging: BoardLogging = .standardError, environment: [String: String] = ProcessInfo.processInfo.environment)
        async throws
    {
        try await board.run(logging: logging, environment: environment)
    }

    /// The whole of the process, on four threads: ``Board/runAsProcess(logging:environment:)``.
    public func launchAsProcess(logging: BoardLogging = .standardError, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> Never
    {
        board.runAsProcess(logging: logging, environment: environment)
    }
}
