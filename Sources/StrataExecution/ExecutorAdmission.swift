internal import StrataLocks
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
/// Besides the lock, the gate is what a synchronous wait (`performAndWait`, an internal
/// request) takes to run its block on its own thread: at once when the executor is idle,
/// or through a gate job at the head of the queue (see ``SynchronousWaits``). Ownership
/// is counted: a thread that already holds the executor (the owner, or a thread the owner
/// lent it to while it waits) nests its claim, and each claim has one ``release()``.
///
// @unchecked Sendable because every mutable property is read and written with `lock`
// held.
package final class ExecutorAdmission: @unchecked Sendable {
    /// Guards `pending`, `owner` and `depth`; its condition is broadcast when the owner
    /// lets the gate go.
    private let lock = ConditionLock()
    /// Jobs submitted and not finished (queued, waiting at the gate, or running).
    /// Guarded by `lock`.
    private var pending = 0
    /// The thread that owns the executor (through its lock, or for a synchronous wait),
    /// if any. Guarded by `lock`.
    private var owner: pthread_t?
    /// How many claims the owner holds: each ``release()`` gives one back, and the gate
    /// opens at zero. Guarded by `lock`.
    private var depth = 0

    /// An open gate with no job.
    package init() {}

    /// Runs `body` with the lock held.
    private func withLock<T>(_ body: () -> T) -> T {
        lock.withLock(body)
    }

    /// Whether the lock is owned by another thread than the current one. Lock held.
    private var ownedElsewhere: Bool {
        guard let owner else { return false }
        return pthread_equal(owner, pthread_self()) == 0
    }

    // MARK: Jobs

    /// A job was submitted (before it is handed to the queue).
    package func jobSubmitted() {
        withLock { pending += 1 }
    }

    /// A job reached the head of the queue: waits while another thread owns the lock.
    package func jobWillRun() {
        withLock {
            while ownedElsewhere { lock.wait() }
        }
    }

    /// A job finished.
    package func jobDidFinish() {
        withLock { pending -= 1 }
    }

    // MARK: The lock

    /// Claims the gate for the current thread without waiting; returns whether it did.
    ///
    /// - `ifIdle`: only when nobody owns it and no job is queued or running (`tryLock()`,
    ///   and the fast path of a synchronous wait).
    /// - Otherwise the caller already holds the executor (it runs one of its jobs, or
    ///   the owner lent it the executor while it waits for it): the claim nests in the
    ///   current owner's, or makes the caller the owner when there is none. It always
    ///   succeeds: waiting here would wait for the caller itself.
    package func claim(ifIdle: Bool) -> Bool {
        withLock {
            if ifIdle {
                guard owner == nil, pending == 0 else { return false }
            } else if owner != nil {
                depth += 1
                return true
            }
            owner = pthread_self()
            depth = 1
            return true
        }
    }

    /// Makes `thread` the owner once nobody else owns the gate; called by a job at the
    /// head of the queue, for a thread that waits in `lock()` or in a synchronous wait.
    package func claimWaiting(for thread: pthread_t) {
        withLock {
            while owner != nil { lock.wait() }
            owner = thread
            depth = 1
        }
    }

    /// Gives one claim back; the last one lets the jobs waiting at the gate run.
    package func release() {
        withLock {
            depth -= 1
            guard depth <= 0 else { return }
            depth = 0
            owner = nil
            lock.broadcast()
        }
    }
}
