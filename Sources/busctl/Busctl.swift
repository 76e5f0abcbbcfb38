import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

/// `busctl`: inspect and drive a BoardBus fleet, in the manner of systemd's busctl.
@main
struct Busctl: AsyncParsableCommand {
    /// The name it was run by: `busctl`, or the one it is installed under beside systemd's
    /// (`boardbusctl`), which its usage, completion scripts and manual then show.
    static let invokedName: String = {
        let name = URL(fileURLWithPath: CommandLine.arguments.first ?? "busctl").lastPathComponent
        return name.isEmpty ? "busctl" : name
    }()

    static let configuration = CommandConfiguration(
        commandName: invokedName,
        abstract: "Inspect and drive a BoardBus fleet.",
        subcommands: [
            List.self, Status.self, Restart.self, Introspect.self, Tree.self, Flows.self, Call.self, Activate.self, Emit.self, Action.self,
            Dispatch.self,
            State.self, Query.self, Stores.self, DeadLetters.self, Wait.self, Monitor.self, Metrics.self, Keys.self, Policy.self,
        ])
}
