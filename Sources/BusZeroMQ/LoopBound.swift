/// A thread that owns state no other thread may touch: a ``SocketLoop``'s, a gateway's.
package protocol OwningThread: AnyObject, Sendable {
    /// Whether the caller runs on it.
    var isOnOwningThread: Bool { get }
    /// For the failed check's message.
    var owningThreadName: String { get }
}

/// A value only one thread may touch (a socket loop's, a gateway's), as swift-nio's
/// `NIOLoopBound`: every access checks the thread in debug builds (a failed check stops the
/// process there, naming the thread), none in release builds. What is shared with other threads
/// goes through the loop's `execute` or a lock, never through this.
package final class LoopBound<Value>: @unchecked Sendable {
    private let owner: any OwningThread
    private var storage: Value

    package init(_ value: Value, loop: any OwningThread) {
        self.owner = loop
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

    /// Whether the caller may touch the value (it runs on the owning thread).
    package var isAccessibleHere: Bool { owner.isOnOwningThread }

    @inline(__always) private func check() {
        assert(owner.isOnOwningThread, "a value bound to the thread '\(owner.owningThreadName)' was touched on another thread")
    }
}

extension SocketLoop: OwningThread {
    package var isOnOwningThread: Bool { isOnLoopThread }
    package var owningThreadName: String { name }
}
