import Foundation

extension Process {
    /// Starts the process with no signal blocked in the child.
    ///
    /// `posix_spawn` gives the child the signal mask of the calling thread, and the threads of
    /// Swift's concurrency pool block most signals. A child started from one of them could
    /// never receive SIGTERM, so `stop` would always end in SIGKILL. The mask is emptied on this
    /// thread for the duration of the spawn, then restored.
    public func runWithDefaultSignalMask() throws {
        var empty = sigset_t()
        sigemptyset(&empty)
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, &empty, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try run()
    }
}
