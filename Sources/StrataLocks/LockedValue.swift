#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value guarded by a pthread mutex: the one lock Strata's modules use for state that
/// is read and written in short critical sections. (A lock that threads wait on is a
/// ``ConditionLock``.)
///
/// These two are the project's whole lock vocabulary: no `NSLock`, `NSCondition`,
/// `DispatchSemaphore`, `Synchronization.Mutex` or raw pthread mutex elsewhere. Lock-free
/// single words (a generation counter read on every ID lookup, an ID counter) use
/// `Synchronization.Atomic`, which is not a lock: its operations are compiler atomics,
/// which ThreadSanitizer sees.
///
/// Why not `Synchronization.Mutex`: on Swift 6.3.1 / Linux, ThreadSanitizer does not see
/// `Mutex`'s lock and unlock (measured: four threads incrementing one `Mutex<Int>` report
/// a race), so every access inside `withLock` looks racy and real races would hide among
/// the false ones. TSan intercepts pthread mutexes, so every lock of the project is one.
// @unchecked Sendable because `value` is only read and written with `mutex` held, and
// the mutex pointer is set once in init and freed once in deinit.
package final class LockedValue<Value>: @unchecked Sendable {
    // Because a pthread mutex must not move once initialised, it lives on the heap,
    // allocated here and freed in deinit.
    /// Guards `value`.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// The guarded value. Guarded by `mutex`.
    private var value: Value

    /// `value`, guarded.
    package init(_ value: Value) {
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
    @inline(__always)
    package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
