import Foundation
import Synchronization
import Testing

@testable import BusZeroMQ

@Suite("Named threads")
struct ThreadNameTests {
    /// The kernel keeps 15 bytes of a thread's name: a longer one is cut at a character, never
    /// inside one (a cut UTF-8 sequence would be refused or shown as garbage), and a name that fits
    /// is kept whole.
    @Test(arguments: [
        ("bus-client", "bus-client"), ("fifteen-bytes-x", "fifteen-bytes-x"), ("sixteen-bytes-xy", "sixteen-bytes-x"),
        ("ééééééééé", "ééééééé"), ("ab🚀🚀🚀🚀", "ab🚀🚀🚀"),
    ])
    func aThreadIsNamedAsTheKernelCanKeepIt(name: String, kept: String) throws {
        let seen = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        startThread(named: name) {
            let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
            seen.withLock { $0 = comm.trimmingCharacters(in: .newlines) }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(seen.withLock { $0 } == kept)
    }
}
