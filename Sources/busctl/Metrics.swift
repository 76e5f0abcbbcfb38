import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Metrics: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "metrics",
            abstract: "Print the motherboard's metrics in the Prometheus text format (what `--metrics-listen` serves at /metrics).")
        @OptionGroup var options: GlobalOptions

        func run() async throws {
            try await options.withClient { client in
                let metrics = try await client.metrics(timeout: options.deadline)
                if options.json { return try options.printJSON(metrics) }
                print(metrics.text, terminator: "")
            }
        }
    }
}
