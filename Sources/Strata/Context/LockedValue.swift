#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value guarded by a pthread mutex: the state of a ``ContextLock``.
///
/// Why not `Synchronization.Mutex`: on Swift 6.3.1 / Linux, ThreadSanitizer does not see
/// `Mutex`'s lock and unlock (measured: four threads incrementing one `Mutex<Int>` report
/// a race), so every access inside `withLock` looks racy and real races would hide among
/// the false ones. TSan does intercept pthread mutexes, so the executor layer, which is
/// all about threads, keeps its shared state behind one.
// @unchecked Sendable because `value` is only read and written with `mutex` held, and
// the mutex pointer is set once in init and freed once in deinit.
final class LockedValue<Value: Sendable>: @unchecked Sendable {
    // Because a pthread mutex must not move once initialised, it lives on the heap,
    // allocated here and freed in deinit.
    /// Guards `value`.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// The guarded value.
    private var value: Value

    /// `value`, guarded.
    init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    /// Destroys the mutex.
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` on the value with the mutex held. Never blocks for long: `body` must
    /// not wait for anything.
    func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
