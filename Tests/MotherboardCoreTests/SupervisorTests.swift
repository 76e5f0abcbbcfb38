import BusCore
import Foundation
import Logging
import Testing

@testable import MotherboardCore

/// The supervisor's decisions on their own, with a clock the test moves.
@Suite("Supervisor")
struct SupervisorTests {
    let svc = ScopedName(scope: "", name: "svc")
    let start = ContinuousClock.now

    func entry(_ restart: FleetManifest.RestartPolicy, limit: FleetManifest.RestartLimit = .init(count: 3, windowSeconds: 60)) -> FleetManifest.Board
    {
        .init(id: "svc", executable: "Svc", start: .always, restart: restart, restartLimit: limit)
    }

    @Test func backOffDoublesFrom100MillisecondsUpTo30Seconds() {
        #expect(
            (0...12).map { Supervisor.backoff(afterRestarts: $0) } == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600),
                .milliseconds(3200), .milliseconds(6400), .milliseconds(12800), .milliseconds(25600),
                .seconds(30), .seconds(30), .seconds(30), .seconds(30),
            ])
        #expect(Supervisor.backoff(afterRestarts: 10_000) == .seconds(30))
    }

    @Test func aCrashIsRestartedAfterItsBackOffWithItsWaitingWorkKept() {
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 10, secret: "s"), as: svc, now: start)
        #expect(supervisor.offlineState(of: svc) == .starting)
        let input = HeldInput(envelope: Envelope(header: EnvelopeHeader(kind: .activate, target: "svc")), client: nil, since: start)
        #expect(supervisor.enqueue(input, for: svc, limit: 1) == .queued)
        #expect(supervisor.enqueue(input, for: svc, limit: 1) == .full)
        let exit = supervisor.processExited(pid: 10, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
        #expect(exit == .restarts(svc, after: .milliseconds(100)))
        #expect(supervisor.offlineState(of: svc) == .restarting)
        #expect(supervisor.dueRestarts(now: start + .milliseconds(99)).isEmpty)
        #expect(supervisor.dueRestarts(now: start + .milliseconds(100)) == [svc])
        supervisor.started(LaunchedProcess(pid: 11, secret: "t"), as: svc, now: start + .milliseconds(100))
        let registered = supervisor.endStart(svc)
        #expect(registered?.pid == 11 && registered?.secret == "t" && registered?.queue.count == 1)
        #expect(supervisor.records[svc] == .init(restartTimes: [start], restarts: 1, lastExit: "signal 9"))
        // The old pid is forgotten: a second report of its end changes nothing.
        #expect(supervisor.processExited(pid: 10, status: "exit 0", clean: true, entry: entry(.always), canRestart: true, now: start) == .unknown)
    }

    /// The broker dropped the board before it heard its process end, and started a new one on
    /// demand (an at-least-once activation to deliver again): the old process's end, reported
    /// after, restarts nothing and leaves the new start as it is (it reset it to a pending
    /// restart, so the new process's registration was refused and a third was started).
    @Test func theEndOfAProcessANewerOneReplacedRestartsNothing() {
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 10, secret: "s"), as: svc, now: start)
        _ = supervisor.endStart(svc)
        supervisor.started(LaunchedProcess(pid: 11, secret: "t"), as: svc, now: start + .milliseconds(5))
        let exit = supervisor.processExited(pid: 10, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
        #expect(exit == .stays(svc, wasStarting: false))
        #expect(supervisor.starting[svc]?.pid == 11)
        #expect(supervisor.records[svc]?.restarts ?? 0 == 0 && supervisor.records[svc]?.lastExit == "signal 9")
        // Its own end is a crash like any other.
        #expect(
            supervisor.processExited(pid: 11, status: "signal 9", clean: false, entry: entry(.onFailure), canRestart: true, now: start)
                == .restarts(svc, after: .milliseconds(100)))
    }

    @Test func theRestartLimitCountsOnlyRestartsInsideItsWindow() {
        var supervisor = Supervisor()
        let limited = entry(.always, limit: .init(count: 2, windowSeconds: 10))
        var now = start
        var pid: Int32 = 100
        func crash() -> Supervisor.Exit {
            supervisor.started(LaunchedProcess(pid: pid, secret: nil), as: svc, now: now)
            defer { pid += 1 }
            return supervisor.processExited(pid: pid, status: "exit 1", clean: false, entry: limited, canRestart: true, now: now)
        }
        #expect(crash() == .restarts(svc, after: .milliseconds(100)))
        now = now + .seconds(1)
        #expect(crash() == .restarts(svc, after: .milliseconds(200)))
        // Both restarts are older than the window now: the count starts again.
        now = now + .seconds(11)
        #expect(crash() == .restarts(svc, after: .milliseconds(100)))
        #expect(crash() == .restarts(svc, after: .milliseconds(200)))
        #expect(crash() == .limitReached(svc))
        // The broker fails the work that waited for it; the board then shows as failed.
        #expect(supervisor.endStart(svc) != nil)
        #expect(supervisor.hasFailed(svc) && supervisor.offlineState(of: svc) == .failed)
        #expect(supervisor.records[svc]?.restarts == 4)
    }

    @Test func policiesCompletionAndAProducerlessBrokerDecideWhatStaysDown() {
        for (policy, clean, restarts) in [
            (FleetManifest.RestartPolicy.no, false, false), (.no, true, false), (.onFailure, true, false),
            (.onFailure, false, true), (.always, true, true), (.always, false, true),
        ] {
            #expect(Supervisor.policyRestarts(policy, clean: clean) == restarts, "\(policy) clean: \(clean)")
        }
        var supervisor = Supervisor()
        supervisor.started(LaunchedProcess(pid: 1, secret: nil), as: svc, now: start)
        // Ended before it registered, and not restarted: its waiting work must be failed.
        #expect(
            supervisor.processExited(pid: 1, status: "exit 0", clean: true, entry: entry(.onFailure), canRestart: true, now: start)
                == .stays(svc, wasStarting: true))
        supervisor.started(LaunchedProcess(pid: 2, secret: nil), as: svc, now: start)
        _ = supervisor.endStart(svc)
        supervisor.completed(svc)
        #expect(
            supervisor.processExited(pid: 2, status: "exit 0", clean: true, entry: entry(.always), canRestart: true, now: start)
                == .stays(svc, wasStarting: false))
        supervisor.started(LaunchedProcess(pid: 3, secret: nil), as: svc, now: start)
        _ = supervisor.endStart(svc)
        #expect(
            supervisor.processExited(pid: 3, status: "signal 9", clean: false, entry: entry(.always), canRestart: false, now: start)
                == .stays(svc, wasStarting: false))
        #expect(supervisor.offlineState(of: svc) == .stopped)
    }

    @Test func startsThatNeverRegisterAndAdoptedProcessesThatEndAreFound() {
        var supervisor = Supervisor()
        let other = ScopedName(scope: "edge", name: "svc")
        supervisor.started(LaunchedProcess(pid: 5, secret: nil), as: svc, now: start)
        supervisor.adopted(LaunchedProcess(pid: 6, secret: "kept"), as: other, now: start + .seconds(3))
        #expect(supervisor.overdueStarts(now: start + .seconds(4), timeout: .seconds(2)) == [svc])
        #expect(supervisor.overdueStarts(now: start + .seconds(6), timeout: .seconds(2)) == [svc, other])
        #expect(supervisor.endedAdoptedProcesses(isRunning: { $0 != 6 }) == [6])
        #expect(
            supervisor.processExited(pid: 6, status: "gone", clean: false, entry: nil, canRestart: true, now: start)
                == .stays(other, wasStarting: true))
        #expect(supervisor.endedAdoptedProcesses(isRunning: { _ in false }).isEmpty)
    }
}
