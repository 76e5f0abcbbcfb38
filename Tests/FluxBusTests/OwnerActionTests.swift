import BoardKit
import BoardKitTesting
import BusCore
import Flux
import FluxBus
import Foundation
import Testing

/// A store's owner-only actions (its owner's bookkeeping): applied when the owning board
/// dispatches them, through the journal and dispatch ids as any dispatch, and refused
/// `forbidden` to every other sender: a client, another board, a client that writes the owner's
/// id as its source.
@Suite("Owner-only store actions", .timeLimit(.minutes(1)))
struct OwnerActionTests {
    struct Submit: Flux.Action, Codable { var job: String }
    struct Done: Flux.Action, Codable { var job: String }

    final class Jobs: StatefulStore<[String: String]>, @unchecked Sendable {
        override func onDispatch(_ action: any Flux.Action) {
            if let submit = action as? Submit { state[submit.job] = "running" }
            if let done = action as? Done { state[done.job] = state[done.job] == nil ? nil : "done" }
        }
    }

    /// The owner's command: mark a job done, under a dispatch id of its own.
    struct Finish: BoardCommand {
        typealias Reply = DispatchAck
        var job: String
    }

    /// Another board's command: try to mark a job done; answers the error it got, if any.
    struct TryDone: BoardCommand {
        struct Reply: BusPayload { var error: String? }
        var job: String
    }

    func forbidden(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch let error as BusError {
            return error.code == .forbidden ? error.message : "\(error.code): \(error.message)"
        } catch {
            return "\(error)"
        }
    }

    @Test func onlyTheOwnerAppliesItsOwnActionsAndOnceByItsDispatchID() async throws {
        try await InProcessFleet.with { fleet in
            let jobs = Jobs(initialState: [:], dispatcher: Dispatcher())
            let host = try StoreHost(name: "jobs", store: jobs)
            host.action(Submit.self, named: "submit")
            host.action(Done.self, named: "done", ownerOnly: true)
            #expect(host.schema?.ownerActions == ["done"])
            var api = Board(id: "jobs.api", environment: [:])
            api.host(host)
            api.onCommand(Finish.self) { finish, context in
                try await context.dispatch(Done(job: finish.job), named: "done", to: "jobs", dispatchID: "done-\(finish.job)")
            }
            try await fleet.start(api)
            var worker = Board(id: "jobs.worker", environment: [:])
            worker.onCommand(TryDone.self) { attempt, context in
                TryDone.Reply(error: await forbidden { try await context.dispatch(Done(job: attempt.job), named: "done", to: "jobs") })
            }
            try await fleet.start(worker)

            let client = fleet.client
            _ = try await client.dispatch(store: "jobs", action: "submit", payload: PayloadCodec.encode(Submit(job: "j1")))
            let byClient = await forbidden {
                _ = try await client.dispatch(store: "jobs", action: "done", payload: PayloadCodec.encode(Done(job: "j1")), dispatchID: "done-j1")
            }
            #expect(byClient == "store 'jobs' takes 'done' from its owner only: a client that is not a board may not dispatch it")
            let byBoard = try await client.interact(with: "jobs.worker", TryDone(job: "j1")).error
            #expect(byBoard == "store 'jobs' takes 'done' from its owner only: board 'jobs.worker' may not dispatch it")
            // A client that writes the owner's id (and scope) as its source is still a client.
            let lying = await forbidden {
                let header = EnvelopeHeader(kind: .dispatch, source: "jobs.api", target: "jobs", typeName: "done", dispatchID: "done-j1")
                _ = try await client.request(Envelope(header: header, payload: PayloadCodec.encode(Done(job: "j1"))), timeout: .seconds(5))
            }
            #expect(lying == byClient)
            #expect(jobs.state == ["j1": "running"])

            // The owner applies it, once by its id: the refusals above spent neither the id nor a sequence number.
            let first = try await client.interact(with: "jobs.api", Finish(job: "j1"))
            #expect(first.applied && first.sequence == 2)
            let again = try await client.interact(with: "jobs.api", Finish(job: "j1"))
            #expect(!again.applied && again.sequence == 2)
            let snapshot = try PayloadCodec.decode(StoreSnapshot<[String: String]>.self, from: try await client.storeState("jobs"))
            #expect(snapshot.state == ["j1": "done"] && snapshot.sequence == 2)
        }
    }
}
