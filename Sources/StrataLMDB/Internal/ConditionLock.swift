#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex with a condition variable on the monotonic clock.
///
/// `Synchronization.Mutex` has no condition variable, and the environment must wait for
/// read transactions to drain before it remaps (see ``Environment``), so this small
/// wrapper exists. It lives on the heap so the pthread objects never move.
// @unchecked Sendable because the pthread mutex is the synchronisation itself: the
// pointers are set once in init and freed once in deinit.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    @inline(__always)
    func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits for a broadcast; the lock must be held.
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits for a broadcast until `deadline` (monotonic nanoseconds); the lock must be held.
    /// Returns false when the deadline passed.
    func wait(untilNanoseconds deadline: UInt64) -> Bool {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &time) != ETIMEDOUT
    }

    func broadcast() { pthread_cond_broadcast(condition) }

    /// The monotonic clock in nanoseconds, the clock ``wait(untilNanoseconds:)`` uses.
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

/// A plain pthread mutex, locked and unlocked on the same thread.
// @unchecked Sendable because the pthread mutex is itself the synchronisation.
final class ThreadMutex: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
}

/// The read transactions the current thread holds, per environment.
///
/// A map resize must wait until no read transaction of this process is open; a thread
/// that holds one and then asks to grow the map would wait for itself. This per-thread
/// list lets the environment refuse that case at once instead of timing out.
enum ThreadReads {
    private final class Box {
        var environments: [ObjectIdentifier] = []
    }

    // Swift initialises a static exactly once, atomically, so the key is created once.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<AnyObject>.fromOpaque(pointer).release()
        }
        return key
    }()

    private static var box: Box {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Box>.fromOpaque(pointer).takeUnretainedValue()
        }
        let box = Box()
        pthread_setspecific(key, Unmanaged.passRetained(box).toOpaque())
        return box
    }

    static func enter(_ environment: ObjectIdentifier) {
        box.environments.append(environment)
    }

    static func leave(_ environment: ObjectIdentifier) {
        let box = box
        if let index = box.environments.lastIndex(of: environment) {
            box.environments.remove(at: index)
        }
    }

    static func holds(_ environment: ObjectIdentifier) -> Bool {
        box.environments.contains(environment)
    }
}
