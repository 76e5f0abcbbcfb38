import ArgumentParser
import BoardKit
import BusCore
import FluxBus
import Foundation

extension Busctl {
    struct Dispatch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dispatch", abstract: "Dispatch a Flux action to a store; prints its sequence number once applied.")
        @OptionGroup var options: GlobalOptions
        @OptionGroup var tracing: TraceOption
        @Argument(help: "The store name.", completion: LiveCompletion.stores) var store: String
        @Argument(help: "The action name.") var action: String
        @Argument(help: "The action as JSON (default {}).") var payload: String?
        @Option(help: "An idempotency key: a retry with the same id is not applied twice (default: a new one, printed when the outcome is unknown).")
        var id: String?
        @Flag(
            help:
                "Send it again with the same id, until --timeout, while its outcome is unknown or its store is not reachable (outcomeUnknown, timeout, boardNotRunning, noSuchStore, unreachable, storageFailed, busy): applied at most once."
        )
        var retries = false

        /// What a retry with the same id may follow: the action was not applied, or may have been
        /// and the id makes sure it is applied at most once.
        static let retryable: Set<BusError.Code> = [.outcomeUnknown, .timeout, .boardNotRunning, .noSuchStore, .unreachable, .storageFailed, .busy]

        /// Arguments are checked before connecting: a bad one is exit 2 whether or not a broker runs.
        func validate() throws {
            try options.validated {
                _ = try jsonPayload(payload)
                if let id { try HeaderCodec.checkDispatchID(id) }
            }
        }

        func run() async throws {
            try await options.withClient { client in
                try await tracing.run {
                    // Always an id: when the outcome is unknown, a retry with it is applied at most once.
                    let dispatchID = id ?? UUID().uuidString
                    let ack: DispatchAck
                    let deadline = ContinuousClock.now.advanced(by: options.deadline)
                    do {
                        var attempt = 0
                        while true {
                            attempt += 1
                            // With retries, no attempt takes the whole deadline (5 s at most), so that one is left for the next.
                            let left = ContinuousClock.now.duration(to: deadline)
                            do {
                                ack = try await client.dispatch(
                                    store: store, action: action, payload: try jsonPayload(payload), dispatchID: dispatchID, scope: options.scope,
                                    timeout: retries ? max(.milliseconds(100), min(left, .seconds(5))) : options.deadline)
                                break
                            } catch let error as BusError where retries && Self.retryable.contains(error.code) {
                                guard ContinuousClock.now.duration(to: deadline) > .milliseconds(300) else { throw error }
                                FileHandle.standardError.write(
                                    Data("busctl: \(error.code.name) (attempt \(attempt)); sending it again with id \(dispatchID)\n".utf8))
                                try await Task.sleep(for: .milliseconds(200))
                            }
                        }
                    } catch let error as BusError where [.outcomeUnknown, .timeout].contains(error.code) {
                        throw BusError(
                            error.code, "\(error.message); retry with the same dispatch id (--id \(dispatchID)): it is applied at most once")
                    }
                    if options.json { return try options.printJSON(ack) }
                    print("\(action) \(ack.applied ? "applied" : "already applied") to \(store) as change \(ack.sequence)")
                }
            }
        }
    }
}
