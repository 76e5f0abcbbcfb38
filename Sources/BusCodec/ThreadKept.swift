import Glibc

/// One object per thread, kept between the calls that use it so that each does not allocate its
/// own: a call takes the thread's (nil when there is none, or a call it is nested in has it) and
/// gives it back when done. What something else still holds is not kept: the holder could
/// otherwise reach into the next call's use of it.
struct ThreadKept<Object: AnyObject>: Sendable {
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        // At a thread's end, its kept object is released.
        let created = pthread_key_create(&key) { kept in
            if let kept { Unmanaged<AnyObject>.fromOpaque(kept).release() }
        }
        precondition(created == 0, "pthread_key_create: \(created)")
        self.key = key
    }

    func take() -> Object? {
        guard let kept = pthread_getspecific(key) else { return nil }
        pthread_setspecific(key, nil)
        return Unmanaged<Object>.fromOpaque(kept).takeRetainedValue()
    }

    /// Keeps `object` for the thread's next call, after `reset`, unless something else holds it
    /// or the thread keeps one already.
    func giveBack(_ object: inout Object, reset: (Object) -> Void) {
        guard isKnownUniquelyReferenced(&object), pthread_getspecific(key) == nil else { return }
        reset(object)
        pthread_setspecific(key, Unmanaged.passRetained(object).toOpaque())
    }
}
