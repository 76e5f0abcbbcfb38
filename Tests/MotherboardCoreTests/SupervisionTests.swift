import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore

@Suite("Supervision")
struct SupervisionTests {
    let board = PeerID(Data([0x1]))

    func manifest(_ restart: FleetManifest.RestartPolicy, limit: FleetManifest.RestartLimit = .init(count: 3, windowSeconds: 60)) -> FleetManifest {
        FleetManifest(boards: [.init(id: "svc", executable: "Svc", start: .always, restart: restart, restartLimit: limit)])
    }

    @Test func aCrashedBoardIsRestartedWithGrowingBackoffUntilTheLimit() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: manifest(.onFailure), producer: producer)
        try harness.motherboard.startFleet(now: harness.now)
        #expect(producer.started.count == 1)
        harness.register("svc", scope: "", peer: board, pid: producer.nextPID)

        harness.motherboard.processExited(pid: producer.nextPID, status: "signal 9", clean: false, now: harness.now)
        #expect(try harness.list().boards.isEmpty)
        // Work that arrives meanwhile waits for the new process.
        harness.request(EnvelopeHeader(kind: .activate, target: "svc"), payload: Data("{}".utf8), from: harness.client, correlation: 4)
        harness.now = harness.now.advanced(by: .milliseconds(99))
        harness.motherboard.tick(now: harness.now)
        #expect(producer.started.count == 1)
        harness.now = harness.now.advanced(by: .milliseconds(2))
        harness.motherboard.tick(now: harness.now)
        #expect(producer.started.count == 2)
        let delivered = harness.register("svc", scope: "", peer: PeerID(Data([0x2])), pid: producer.nextPID)
        #expect(delivered.contains { $0.header.kind == .activate })
        let status = try harness.control(ControlOperation.status, StatusRequest(id: "svc"), from: harness.client, as: BoardInfo.self)
        #expect(status.restarts == 1 && status.lastExit == "signal 9" && status.state == .running)

        // Second crash: 200 ms back-off; third: 400 ms; then the limit (3 in the window) holds.
        for expected in [200, 400] {
            harness.motherboard.processExited(pid: producer.nextPID, status: "exit 3", clean: false, now: harness.now)
            harness.now = harness.now.advanced(by: .milliseconds(expected - 1))
            harness.motherboard.tick(now: harness.now)
            let before = producer.started.count
            harness.now = harness.now.advanced(by: .milliseconds(2))
            harness.motherboard.tick(now: harness.now)
            #expect(producer.started.count == before + 1)
        }
        harness.motherboard.processExited(pid: producer.nextPID, status: "exit 3", clean: false, now: harness.now)
        harness.now = harness.now.advanced(by: .seconds(40))
        harness.motherboard.tick(now: harness.now)
        #expect(producer.started.count == 4)
        let failed = try harness.control(ControlOperation.status, StatusRequest(id: "svc"), from: harness.client, as: BoardInfo.self)
        #expect(failed.state == .failed && failed.restarts == 3)
        harness.request(EnvelopeHeader(kind: .activate, target: "svc"), from: harness.client, correlation: 9)
        #expect(harness.transport.take(for: harness.client).last?.carriedError?.code == .boardNotRunning)
    }

    @Test func policiesDecideWhichEndsAreRestarted() throws {
        for (policy, clean, restarted) in [
            (FleetManifest.RestartPolicy.no, false, false), (.onFailure, true, false), (.onFailure, false, true), (.always, true, true),
        ] {
            let producer = RecordingProducer()
            let harness = try Harness(manifest: manifest(policy), producer: producer)
            try harness.motherboard.startFleet(now: harness.now)
            harness.motherboard.processExited(pid: producer.nextPID, status: clean ? "exit 0" : "signal 9", clean: clean, now: harness.now)
            harness.now = harness.now.advanced(by: .seconds(1))
            harness.motherboard.tick(now: harness.now)
            #expect(producer.started.count == (restarted ? 2 : 1), "\(policy) clean: \(clean)")
        }
    }

    @Test func aCompletedBoardIsNotRestarted() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: manifest(.always), producer: producer)
        try harness.motherboard.startFleet(now: harness.now)
        harness.register("svc", scope: "", peer: board, pid: producer.nextPID)
        harness.request(EnvelopeHeader(kind: .complete), payload: try PayloadCodec.encode(Completion(isDone: true)), from: board)
        harness.motherboard.processExited(pid: producer.nextPID, status: "exit 0", clean: true, now: harness.now)
        harness.now = harness.now.advanced(by: .seconds(1))
        harness.motherboard.tick(now: harness.now)
        #expect(producer.started.count == 1)
    }

    /// While the broker starts a manifest board's process, its id can be registered only with the
    /// secret that process was handed: a board started by hand cannot race it for the id.
    @Test func aBoardStartedByHandCannotTakeAnIDTheBrokerIsStarting() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: manifest(.always), producer: producer)
        try harness.motherboard.startFleet(now: harness.now)
        let byHand = harness.register("svc", scope: "", peer: PeerID(Data([0x7])), pid: producer.nextPID, secret: "made up")
        #expect(byHand.first?.carriedError?.code == .idInUse)
        #expect(byHand.first?.carriedError?.message.contains("started process \(producer.nextPID)") == true)
        let real = harness.register("svc", scope: "", peer: board, pid: producer.nextPID)
        #expect(real.map(\.header.kind) == [.reply])
        #expect(harness.motherboard.counters.refusedRegistrations == 1)
    }
}
