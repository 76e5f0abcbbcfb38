import CBoardBusLinux
import CBoardBusZeroMQ
import Glibc

/// Starts a detached thread, named `name` (the kernel keeps 15 bytes; `ps -L`, `top -H` and
/// `perf` show it), that runs `body` and ends with it. What Foundation's `Thread` did here, with
/// the C library alone, so that a board process need not load Foundation.
package func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
    final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(
        &thread, &attributes,
        { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            // Cut at a character, never inside one.
            var name = Substring(start.name)
            while name.utf8.count > 15 { name.removeLast() }
            _ = boardbus_set_thread_name(String(name))
            start.body()
            return nil
        }, start)
    // Threads are made at start-up and per socket, never per message: running out of them is a
    // machine out of resources, which a hang would hide.
    precondition(result == 0, "pthread_create failed: \(result)")
}
