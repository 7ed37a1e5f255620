#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The gate every job of a ``PrivateQueueExecutor`` passes before it runs: it counts
/// the jobs queued or running, and holds them back while a thread other than the one
/// running them owns the executor's ``ContextLock``.
///
/// The count lets `tryLock()` succeed without blocking exactly when the executor is
/// idle (nothing queued, nothing running): from then on every new job waits at the gate
/// until `unlock()`. A job that waits blocks its dispatch thread, which belongs to the
/// executor's own serial queue (an overcommitting dispatch queue), never to Swift's
/// cooperative pool.
///
/// `Synchronization.Mutex` has no condition variable, hence the pthread objects. They
/// live on the heap so they never move.
// @unchecked Sendable because every mutable property is read and written with `mutex`
// held, and the pthread pointers are set once in init and freed once in deinit.
final class ExecutorAdmission: @unchecked Sendable {
    // Because pthread objects must not move once initialised, they live on the heap,
    // allocated here and freed in deinit.
    /// Guards `pending` and `owner`.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Signalled when the owner releases the lock.
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Jobs submitted and not finished (queued, waiting at the gate, or running).
    private var pending = 0
    /// The thread that owns the executor through its lock, if any.
    private var owner: pthread_t?

    /// An open gate with no job.
    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    /// Destroys the pthread objects.
    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` with the mutex held.
    private func withLock<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// Whether the lock is owned by another thread than the current one. Mutex held.
    private var ownedElsewhere: Bool {
        guard let owner else { return false }
        return pthread_equal(owner, pthread_self()) == 0
    }

    // MARK: Jobs

    /// A job was submitted (before it is handed to the queue).
    func jobSubmitted() {
        withLock { pending += 1 }
    }

    /// A job reached the head of the queue: waits while another thread owns the lock.
    func jobWillRun() {
        withLock {
            while ownedElsewhere { pthread_cond_wait(condition, mutex) }
        }
    }

    /// A job finished.
    func jobDidFinish() {
        withLock { pending -= 1 }
    }

    // MARK: The lock

    /// Makes the current thread the owner if nobody owns the lock and, when `ifIdle`,
    /// no job is queued or running. Never waits.
    func claim(ifIdle: Bool) -> Bool {
        withLock {
            guard owner == nil, !ifIdle || pending == 0 else { return false }
            owner = pthread_self()
            return true
        }
    }

    /// Makes `thread` the owner once nobody else owns the lock; called by a job at the
    /// head of the queue, for a thread that waits in `lock()`.
    func claimWaiting(for thread: pthread_t) {
        withLock {
            while owner != nil { pthread_cond_wait(condition, mutex) }
            owner = thread
        }
    }

    /// Gives the lock up and lets the jobs waiting at the gate run.
    func release() {
        withLock {
            owner = nil
            pthread_cond_broadcast(condition)
        }
    }
}
