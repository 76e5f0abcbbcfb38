import BusCore
import Foundation
import Logging
import MotherboardTesting
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

        // `busctl restart` brings it back, with its limit started over.
        let restarted = try harness.control(ControlOperation.restart, StatusRequest(id: "svc"), from: harness.client, as: BoardInfo.self)
        #expect(restarted.state == .starting && producer.started.count == 5)
        harness.register("svc", scope: "", peer: PeerID(Data([0x3])), pid: producer.nextPID)
        let running = try harness.control(ControlOperation.status, StatusRequest(id: "svc"), from: harness.client, as: BoardInfo.self)
        #expect(running.state == .running)
        // A running board, and one the manifest does not name, are refused.
        #expect(throws: BusError.self) {
            try harness.control(ControlOperation.restart, StatusRequest(id: "svc"), from: harness.client, as: BoardInfo.self)
        }
        #expect(throws: BusError.self) {
            try harness.control(ControlOperation.restart, StatusRequest(id: "nosuch"), from: harness.client, as: BoardInfo.self)
        }
        #expect(producer.started.count == 5)
        // The limit started over: a crash is restarted again.
        harness.motherboard.processExited(pid: producer.nextPID, status: "exit 3", clean: false, now: harness.now)
        harness.now = harness.now.advanced(by: .milliseconds(101))
        harness.motherboard.tick(now: harness.now)
        #expect(producer.started.count == 6)
    }

    /// Registers `svc` over a connection whose other end the kernel names `process` (an ipc
    /// peer), whatever pid the registration claims.
    func registerLocal(_ harness: Harness, process: Int32?, claiming pid: Int32) {
        let registration = Registration(id: "svc", pid: pid, commands: ["greet"])
        var header = EnvelopeHeader(kind: .register, source: "svc")
        header.flags.insert(.replyExpected)
        header.correlationID = 1
        let envelope = Envelope(header: header, payload: try! PayloadCodec.encode(registration))
        harness.motherboard.receive(.success(envelope), from: board, now: harness.now, process: process)
        _ = harness.transport.take(for: board)
    }

    func state(_ harness: Harness) throws -> BoardState? {
        try harness.list().boards.first { $0.id == "svc" }?.state
    }

    /// A board stuck past its manifest's `watchdogSeconds` (busy: silent, its process running)
    /// is ended: SIGABRT once, SIGKILL once 5 s later if it still runs; without a watchdog, or
    /// speaking again in time, nothing is sent. Its end is then any process's end.
    @Test func aBoardStuckPastItsWatchdogIsAbortedThenKilled() throws {
        let producer = RecordingProducer()
        let guarded = FleetManifest(boards: [
            .init(id: "svc", executable: "Svc", start: .always, restart: .onFailure, watchdogSeconds: 8)
        ])
        let harness = try Harness(manifest: guarded, producer: producer)
        producer.running = [4242]
        registerLocal(harness, process: 4242, claiming: 4242)
        func pass(_ duration: Duration) {
            for _ in 0..<Int(duration / .milliseconds(100)) {
                harness.now = harness.now.advanced(by: .milliseconds(100))
                harness.motherboard.tick(now: harness.now)
            }
        }
        pass(.seconds(6))
        #expect(try state(harness) == .busy && producer.ended.isEmpty)
        // Speaking again in time resets the watch.
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "svc")), from: board)
        pass(.seconds(7.5))
        #expect(producer.ended.isEmpty)
        pass(.seconds(1))
        #expect(producer.ended.map(\.pid) == [4242] && producer.ended.map(\.how) == [.abort])
        #expect(harness.motherboard.counters.watchdogEnds == 1)
        // It outlived SIGABRT and speaks again: watched afresh, aborted again, not killed at once.
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "svc")), from: board)
        pass(.seconds(8.5))
        #expect(producer.ended.map(\.how) == [.abort, .abort])
        // It fired at the first tick past 8 s of silence (8.1 s); SIGKILL past 5 s after that.
        pass(.seconds(4.5))
        #expect(producer.ended.count == 2, "SIGKILL only after the grace")
        pass(.seconds(0.5))
        #expect(producer.ended.map(\.how) == [.abort, .abort, .kill])
        pass(.seconds(10))
        #expect(producer.ended.count == 3, "each signal once")
        // No watchdog: busy for as long as it lasts.
        let unguarded = try Harness(manifest: manifest(.no), producer: producer)
        producer.running = [4343]
        producer.ended = []
        let registration = Registration(id: "svc", pid: 4343, commands: ["greet"])
        var header = EnvelopeHeader(kind: .register, source: "svc")
        header.flags.insert(.replyExpected)
        header.correlationID = 1
        unguarded.motherboard.receive(
            .success(Envelope(header: header, payload: try PayloadCodec.encode(registration))), from: board, now: unguarded.now, process: 4343)
        for _ in 0..<600 {
            unguarded.now = unguarded.now.advanced(by: .milliseconds(100))
            unguarded.motherboard.tick(now: unguarded.now)
        }
        #expect(producer.ended.isEmpty)
        #expect(try unguarded.list().boards.first?.state == .busy)
    }

    /// A handler that holds the board's thread (a lock, a long computation) stops its heartbeats;
    /// while its process runs and its connection stays, it is busy, not gone, and its callers
    /// wait out their own deadlines. Once its connection closes, it is gone at the next tick, and
    /// what it was sent and did not answer is `outcomeUnknown`.
    @Test func aSilentBoardWhoseProcessRunsIsBusyUntilItsConnectionCloses() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: manifest(.no), producer: producer)
        producer.running = [4242]
        registerLocal(harness, process: 4242, claiming: 4242)
        harness.request(EnvelopeHeader(kind: .command, target: "svc", typeName: "greet"), from: harness.client, correlation: 5)
        #expect(harness.transport.take(for: board).contains { $0.header.kind == .command })
        for _ in 0..<100 {
            harness.now = harness.now.advanced(by: .milliseconds(100))
            harness.motherboard.tick(now: harness.now)
        }
        #expect(try state(harness) == .busy)
        #expect(harness.transport.take(for: harness.client).isEmpty)
        // Still heartbeated: that is how a closed connection is found.
        #expect(harness.transport.take(for: board).filter { $0.header.kind == .heartbeat }.count >= 15)
        // It speaks again: running.
        harness.deliver(Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "svc")), from: board)
        harness.motherboard.tick(now: harness.now)
        #expect(try state(harness) == .running)

        // Silent and busy again, then its connection closes: the next heartbeat finds it gone.
        harness.now = harness.now.advanced(by: .seconds(5))
        harness.motherboard.tick(now: harness.now)
        #expect(try state(harness) == .busy)
        harness.transport.unreachable.insert(board)
        harness.now = harness.now.advanced(by: .seconds(1))
        harness.motherboard.tick(now: harness.now)
        let failure = try #require(harness.transport.take(for: harness.client).first { $0.header.correlationID == 5 })
        #expect(failure.carriedError?.code == .outcomeUnknown)
        #expect(try state(harness) == nil)
    }

    /// Only the kernel's word counts: a board whose process has ended, or whose connection has no
    /// process the kernel named (tcp, in-process), is gone at the liveness timeout, whatever pid
    /// it claimed.
    @Test func aSilentBoardIsGoneWhenItsProcessEndedOrWasNeverKnown() throws {
        for (process, claimed) in [(Int32(4242), Int32(4242)), (nil, 4242)] {
            let producer = RecordingProducer()
            let harness = try Harness(manifest: manifest(.no), producer: producer)
            producer.running = [4242]
            registerLocal(harness, process: process, claiming: claimed)
            if process != nil { producer.running = [] }
            harness.now = harness.now.advanced(by: .seconds(3))
            harness.motherboard.tick(now: harness.now)
            #expect(try state(harness) == nil, "process \(String(describing: process))")
        }
    }

    /// A process stopped by a signal or a debugger is frozen, not busy: silent past the liveness
    /// timeout, its board is gone, though the process exists and its connection stays open. One
    /// that was busy is gone at the next tick once it is stopped.
    @Test func aSilentBoardWhoseProcessIsStoppedIsGone() throws {
        let producer = RecordingProducer()
        let harness = try Harness(manifest: manifest(.no), producer: producer)
        producer.running = [4242]
        producer.stopped = [4242]
        registerLocal(harness, process: 4242, claiming: 4242)
        harness.request(EnvelopeHeader(kind: .command, target: "svc", typeName: "greet"), from: harness.client, correlation: 5)
        #expect(harness.transport.take(for: board).contains { $0.header.kind == .command })
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        let failure = try #require(harness.transport.take(for: harness.client).first { $0.header.correlationID == 5 })
        #expect(failure.carriedError?.code == .outcomeUnknown)
        #expect(try state(harness) == nil)

        producer.stopped = []
        registerLocal(harness, process: 4242, claiming: 4242)
        harness.now = harness.now.advanced(by: .seconds(3))
        harness.motherboard.tick(now: harness.now)
        #expect(try state(harness) == .busy)
        producer.stopped = [4242]
        harness.now = harness.now.advanced(by: .milliseconds(100))
        harness.motherboard.tick(now: harness.now)
        #expect(try state(harness) == nil)
    }

    /// A request whose sending fails (the connection closed under it) was not delivered: the
    /// board is dropped and the caller told `boardNotRunning`, which it may retry.
    @Test func aRequestThatCouldNotBeHandedOverIsNotDelivered() throws {
        let harness = try Harness(manifest: manifest(.no))
        registerLocal(harness, process: nil, claiming: 7)
        harness.transport.unreachable.insert(board)
        harness.request(EnvelopeHeader(kind: .command, target: "svc", typeName: "greet"), from: harness.client, correlation: 6)
        let failure = try #require(harness.transport.take(for: harness.client).first { $0.header.correlationID == 6 })
        #expect(failure.carriedError?.code == .boardNotRunning)
        #expect(try state(harness) == nil)
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
