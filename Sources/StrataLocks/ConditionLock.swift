#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A pthread mutex with condition variables on the monotonic clock: the lock Strata's
/// modules use where a thread waits for a change (a gate to open, a turn to come, read
/// transactions to drain).
///
/// The state it guards lives beside it, each field commented with the lock that guards
/// it. The lock has one condition of its own (``wait()``, ``signal()``,
/// ``broadcast()``); a lock whose waiters wait for different things can make more
/// (``makeCondition()``), so that a change wakes only the thread it concerns.
///
/// ```swift
/// let lock = ConditionLock()
/// var ready = false          // guarded by `lock`
/// lock.withLock { while !ready { lock.wait() } }
/// ```
///
/// A pthread mutex, not `Synchronization.Mutex`, for the reason ``LockedValue`` gives,
/// and because `Mutex` has no condition variable.
// @unchecked Sendable because the pthread objects are the synchronisation: the pointers
// are set once in init and freed once in deinit.
package final class ConditionLock: @unchecked Sendable {
    /// A condition variable waited on with this lock held: ``ConditionLock/makeCondition()``.
    // @unchecked Sendable because the pthread condition is the synchronisation: the
    // pointer is set once in init and freed once in deinit.
    package final class Condition: @unchecked Sendable {
        // Because a pthread condition must not move once initialised, it lives on the
        // heap, allocated here and freed in deinit.
        fileprivate let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

        /// A condition on the monotonic clock.
        fileprivate init() {
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
        }

        /// Destroys the condition: nobody waits on it any more.
        deinit {
            pthread_cond_destroy(condition)
            condition.deallocate()
        }
    }

    // Because pthread objects must not move once initialised, they live on the heap,
    // allocated here and freed in deinit.
    /// The mutex.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// The lock's own condition.
    private let condition = Condition()

    /// A lock; `recursive` lets the thread that holds it lock it again (each `lock()`
    /// then needs its `unlock()`).
    package init(recursive: Bool = false) {
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        if recursive { pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE)) }
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    /// Destroys the mutex.
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Locks; blocks while another thread holds the lock.
    @inline(__always)
    package func lock() { pthread_mutex_lock(mutex) }

    /// Unlocks; the calling thread must hold the lock.
    @inline(__always)
    package func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` with the lock held.
    @inline(__always)
    package func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Runs `body` with the lock released; the calling thread holds it before and after.
    @inline(__always)
    package func withoutLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_unlock(mutex)
        defer { pthread_mutex_lock(mutex) }
        return try body()
    }

    // MARK: The lock's own condition

    /// Waits for a ``signal()`` or ``broadcast()``; the lock must be held. Wakes
    /// spuriously at times: check what you wait for in a loop.
    package func wait() { pthread_cond_wait(condition.condition, mutex) }

    /// Waits for a signal until `deadline` (monotonic nanoseconds, ``now()``); the lock
    /// must be held. Returns false when the deadline passed.
    package func wait(untilNanoseconds deadline: UInt64) -> Bool {
        wait(on: condition, untilNanoseconds: deadline)
    }

    /// Wakes one thread waiting in ``wait()``.
    package func signal() { pthread_cond_signal(condition.condition) }

    /// Wakes every thread waiting in ``wait()``.
    package func broadcast() { pthread_cond_broadcast(condition.condition) }

    // MARK: More conditions

    /// A further condition of this lock, for a waiter that should be woken alone.
    package func makeCondition() -> Condition { Condition() }

    /// Waits on `other` (made by this lock) for a signal; the lock must be held.
    package func wait(on other: Condition) { pthread_cond_wait(other.condition, mutex) }

    /// Waits on `other` until `deadline` (monotonic nanoseconds); the lock must be held.
    /// Returns false when the deadline passed.
    package func wait(on other: Condition, untilNanoseconds deadline: UInt64) -> Bool {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(other.condition, mutex, &time) != ETIMEDOUT
    }

    /// Wakes the thread waiting on `other`.
    package func signal(_ other: Condition) { pthread_cond_signal(other.condition) }

    /// The monotonic clock in nanoseconds, the clock the timed waits use.
    package static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
