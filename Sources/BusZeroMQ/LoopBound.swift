/// A value only the thread of one socket loop may touch, as swift-nio's `NIOLoopBound`: every
/// access checks the thread in debug builds (a failed check stops the process there, naming the
/// loop), none in release builds. What is shared with other threads goes through the loop's
/// `execute`, never through this.
package final class LoopBound<Value>: @unchecked Sendable {
    private let loop: SocketLoop
    private var storage: Value

    package init(_ value: Value, loop: SocketLoop) {
        self.loop = loop
        self.storage = value
    }

    package var value: Value {
        get {
            check()
            return storage
        }
        _modify {
            check()
            yield &storage
        }
    }

    /// Whether the caller may touch the value (it runs on the loop's thread).
    package var isAccessibleHere: Bool { loop.isOnLoopThread }

    @inline(__always) private func check() {
        assert(loop.isOnLoopThread, "a value bound to the socket loop '\(loop.name)' was touched on another thread")
    }
}
