import BusCore
import Foundation
import Testing

@testable import BusZeroMQ

/// The backlog watcher over a real Unix socket pair: one end written to and not read stands for
/// a peer that does not read what the broker sends it.
@Suite("Connection backlog")
struct ConnectionBacklogTests {
    /// A connected pair; the first end does not block.
    func socketPair() throws -> (writer: Int32, reader: Int32) {
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0 else { throw POSIXError(.EIO) }
        _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
        return (ends[0], ends[1])
    }

    /// Writes until the kernel takes no more.
    func fill(_ descriptor: Int32) {
        let chunk = [UInt8](repeating: 1, count: 65_536)
        while chunk.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) > 0 {}
    }

    func drain(_ descriptor: Int32) {
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while buffer.withUnsafeMutableBytes({ read(descriptor, $0.baseAddress, $0.count) }) > 0 {}
    }

    @Test func aPeerThatDoesNotReadIsStalledPastTheBudgetAndFreedWhenItReads() throws {
        let (writer, reader) = try socketPair()
        defer {
            close(writer)
            close(reader)
        }
        let peer = Data([0, 1, 2, 3, 4])
        let backlog = ConnectionBacklog<Data>(budget: 1 << 20)
        backlog.noteReceived(from: peer, descriptor: writer)
        // Small messages are never counted.
        for _ in 0..<10_000 { #expect(backlog.mayQueue(100, to: peer)) }
        #expect(backlog.queuedBytes(to: peer) == 0)

        fill(writer)
        #expect(!ConnectionBacklog<Data>.isHalfEmpty(writer))
        var accepted = 0
        while backlog.mayQueue(64 << 10, to: peer), accepted < 100 { accepted += 1 }
        #expect(accepted == 17)  // 1 MiB of 64 KiB messages and the one that crosses the budget, then refused
        #expect(backlog.isStalled(peer))
        #expect(backlog.refusedMessages == 1)
        #expect(backlog.mayQueue(100, to: peer))  // small answers (busy) still go

        // The peer reads: at the next tick it is counted from zero and served again.
        drain(reader)
        backlog.tick()
        #expect(!backlog.isStalled(peer))
        #expect(backlog.mayQueue(64 << 10, to: peer))
    }

    @Test func aPeerThatReadsIsNeverStalledHoweverMuchItIsSent() throws {
        let (writer, reader) = try socketPair()
        defer {
            close(writer)
            close(reader)
        }
        let peer = Data([9])
        let backlog = ConnectionBacklog<Data>(budget: 1 << 20)
        backlog.noteReceived(from: peer, descriptor: writer)
        for _ in 0..<1_000 { #expect(backlog.mayQueue(64 << 10, to: peer)) }  // 64 MiB; the socket stays empty
        #expect(!backlog.isStalled(peer))
    }

    @Test func aPeersConnectionIsAskedForOnceNotOnEveryMessage() {
        let backlog = ConnectionBacklog<Data>(budget: 1 << 20)
        var asked = 0
        func descriptor(_ value: Int32) -> Int32 {
            asked += 1
            return value
        }
        // A message without a connection (inproc: -1) notes nothing, so the next one asks again.
        backlog.noteReceived(from: Data([1]), descriptor: descriptor(-1))
        backlog.noteReceived(from: Data([1]), descriptor: descriptor(7))
        for _ in 0..<100 { backlog.noteReceived(from: Data([1]), descriptor: descriptor(7)) }
        #expect(asked == 2)
        backlog.noteReceived(from: Data([2]), descriptor: descriptor(8))
        #expect(asked == 3)
        // A forgotten peer is asked again.
        backlog.forget(Data([1]))
        backlog.noteReceived(from: Data([1]), descriptor: descriptor(7))
        #expect(asked == 4)
    }
}
