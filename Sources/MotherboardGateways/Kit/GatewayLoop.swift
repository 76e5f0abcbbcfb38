import BusCore
import BusZeroMQ

/// What a gateway's loop waits on, a socket or another library's descriptor (libnats's eventfd),
/// and what takes its messages once it is readable.
struct LoopSource {
    enum Handle {
        case socket(ZMQSocket)
        case descriptor(Int32)
    }

    let handle: Handle
    let drain: (ContinuousClock.Instant) -> Void

    /// A socket's envelopes, up to 256 a wake, each handed to `handle` with the time it woke.
    static func envelopes(of socket: ZMQSocket, limits: BusLimits, _ handle: @escaping (Envelope, ContinuousClock.Instant) -> Void) -> LoopSource {
        LoopSource(handle: .socket(socket)) { now in socket.drainEnvelopes(limits: limits) { handle($0, now) } }
    }
}

extension HelperThread {
    /// The loop every gateway runs on its thread until ``stop()``: `tick` with the time (false:
    /// leave now), a wait of at most `waitMilliseconds()` for any of `sources`, then each readable
    /// source drained, in order. The deadlines a gateway keeps are met at the tick after them
    /// (100 ms at most, unless it asks to be woken sooner).
    func runLoop(_ sources: [LoopSource], waitMilliseconds: () -> Int = { 100 }, tick: (ContinuousClock.Instant) -> Bool) {
        let clock = ContinuousClock()
        var sockets: [ZMQSocket] = []
        var descriptors: [Int32] = []
        for source in sources {
            switch source.handle {
            case .socket(let socket): sockets.append(socket)
            case .descriptor(let descriptor): descriptors.append(descriptor)
            }
        }
        // The poll answers sockets first, then descriptors: each source's place in that answer.
        var socketIndex = 0
        var descriptorIndex = sockets.count
        let places = sources.map { source -> Int in
            switch source.handle {
            case .socket:
                defer { socketIndex += 1 }
                return socketIndex
            case .descriptor:
                defer { descriptorIndex += 1 }
                return descriptorIndex
            }
        }
        while isRunning {
            guard tick(clock.now) else { return }
            let ready = ZMQSocket.poll(sockets, descriptors: descriptors, timeoutMilliseconds: waitMilliseconds())
            let now = clock.now
            for (source, place) in zip(sources, places) where ready[place] { source.drain(now) }
        }
    }
}
