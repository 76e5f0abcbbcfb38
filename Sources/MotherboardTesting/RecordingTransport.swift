import BusCore
import Foundation
import MotherboardCore

/// What the broker's logic sends, kept in memory: the one transport of unit tests, fuzz
/// harnesses and the broker-logic bench.
package final class RecordingTransport: MotherboardTransport {
    package var sent: [(peer: PeerID, envelope: Envelope)] = []
    /// Peers that are gone: a send to one fails and it is not connected.
    package var unreachable: Set<PeerID> = []
    /// When set, each header is encoded into it as the socket transport encodes it, and a send
    /// whose header does not encode is refused as that transport refuses it.
    private let encodingBuffer: UnsafeMutableRawBufferPointer?

    package init(encodesHeaders: Bool = false) {
        encodingBuffer = encodesHeaders ? .allocate(byteCount: 8192, alignment: 8) : nil
    }

    deinit { encodingBuffer?.deallocate() }

    package func send(_ envelope: Envelope, to peer: PeerID) -> Bool {
        guard !unreachable.contains(peer) else { return false }
        if let encodingBuffer, (try? HeaderCodec.encode(envelope.header, into: encodingBuffer)) == nil { return false }
        sent.append((peer, envelope))
        return true
    }

    package func isConnected(_ peer: PeerID) -> Bool {
        !unreachable.contains(peer)
    }

    package func isBacklogged(_ peer: PeerID) -> Bool { false }

    /// What was sent to `peer`, in order, and forgets it.
    package func take(for peer: PeerID) -> [Envelope] {
        let mine = sent.filter { $0.peer == peer }.map(\.envelope)
        sent.removeAll { $0.peer == peer }
        return mine
    }
}

/// Starts nothing: records which boards the broker asked to start, and answers for the processes
/// it is told run or are stopped.
package final class RecordingProducer: BoardProducer {
    package var started: [FleetManifest.Board] = []
    package var failure: BusError?
    package var nextPID: Int32 = 500
    package var running: Set<Int32> = []
    package var stopped: Set<Int32> = []

    package init() {}

    package func start(_ board: FleetManifest.Board) throws -> LaunchedProcess {
        if let failure { throw failure }
        started.append(board)
        nextPID += 1
        return LaunchedProcess(pid: nextPID, secret: "secret-\(nextPID)")
    }

    package func adoptRunning(_ board: FleetManifest.Board) -> LaunchedProcess? { nil }
    package func isRunning(_ pid: Int32) -> Bool { running.contains(pid) }
    package func isStopped(_ pid: Int32) -> Bool { stopped.contains(pid) }
    package func forgetAdopted(_ pid: Int32) {}
    /// The processes the broker ended, and how, in order.
    package var ended: [(pid: Int32, how: EndSignal)] = []
    package func end(_ pid: Int32, _ how: EndSignal) { ended.append((pid, how)) }
}
