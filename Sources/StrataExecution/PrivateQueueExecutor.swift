import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The serial executor of a `.privateQueue` context: jobs run one at a time, in the order
/// they were enqueued, on the executor's own serial `DispatchQueue`.
///
/// Linux has no `DispatchSerialQueue` to use as an actor executor, hence this class. An
/// actor runs on it by returning ``asUnownedSerialExecutor()`` from its
/// `unownedExecutor`:
///
/// ```swift
/// actor Worker {
///     nonisolated let executor = PrivateQueueExecutor(label: "worker")
///     nonisolated var unownedExecutor: UnownedSerialExecutor {
///         executor.asUnownedSerialExecutor()
///     }
/// }
/// ```
///
/// Besides the actor's own jobs, the queue runs blocks submitted with ``submit(_:)``
/// (the fire-and-forget `perform`, and the gate jobs of synchronous waits). All of them
/// pass the ``ExecutorAdmission`` gate, so a ``ContextLock`` or a synchronous wait that
/// owns it holds every one of them back, and all of them push the executor on the
/// thread's ``ExecutorOwnership`` stack, so `assumeIsolated` works inside them and
/// inside anything they call synchronously.
///
/// `performAndWait` from another thread does not run on the queue: the caller's own
/// thread runs the block once the gate admits it (see ``SynchronousWaits``), which is
/// what lets a cycle of such waits between threads be resolved.
package final class PrivateQueueExecutor: SerialExecutor, CustomStringConvertible {
    /// The executor's identity (the value of ``ExecutorOwnership/queueKey`` on `queue`).
    package let identity: ExecutorIdentity
    /// The serial queue every job runs on.
    package let queue: DispatchQueue
    /// The gate of the executor's lock, and the count of queued jobs.
    package let admission = ExecutorAdmission()

    /// An executor over a new serial queue labelled `label`.
    package init(label: String) {
        identity = ExecutorIdentity(label: label)
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: ExecutorOwnership.queueKey, value: identity)
    }

    /// The queue label for a context called `name`: `strata.context` or
    /// `strata.context.<name>`, as shown in debuggers and crash reports.
    package static func label(forContextNamed name: String?) -> String {
        guard let name, !name.isEmpty else { return "strata.context" }
        return "strata.context.\(name)"
    }

    /// The queue's label.
    package var description: String { identity.label }

    // MARK: SerialExecutor

    /// Runs `job` on the queue after every job enqueued before it.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        submit { [self] in job.runSynchronously(on: asUnownedSerialExecutor()) }
    }

    /// This executor, for an actor's `unownedExecutor`.
    package func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// True when the current thread holds this executor (see
    /// ``isHeldByCurrentThread``); nil otherwise, so that the runtime falls back to
    /// ``checkIsolated()`` and its message when a check fails.
    ///
    /// The runtime asks this before `checkIsolated()` (SE-0471) and never calls
    /// `checkIsolated()` when it gets true or false. Returning nil for "no" keeps Strata's
    /// message in the crash report of a failed `assumeIsolated` (measured on 6.3.1: with
    /// false the runtime reports only "Incorrect actor executor assumption").
    package func isIsolatingCurrentContext() -> Bool? {
        isHeldByCurrentThread ? true : nil
    }

    /// Passes when the current thread holds this executor: inside its jobs, inside
    /// `queue.sync` blocks, and inside anything the thread's ``ExecutorOwnership`` stack
    /// says holds it (nested `performAndWait` across contexts, a held ``ContextLock``).
    /// Traps otherwise: the caller assumed an isolation it does not have.
    package func checkIsolated() {
        guard isHeldByCurrentThread else {
            fatalError("""
                Strata: this code assumed it was isolated to the context on queue '\(identity.label)', \
                but the current thread does not hold that context. Reach a context's state \
                through perform, performAndWait, or while holding its lock().
                """)
        }
    }

    // MARK: Running blocks

    /// Whether the current thread holds this executor: it is draining its queue or its
    /// ownership stack lists it.
    package var isHeldByCurrentThread: Bool {
        ExecutorOwnership.holds(identity)
    }

    /// Runs `block` on the queue after every job and block submitted before it, without
    /// waiting for it.
    package func submit(_ block: @escaping @Sendable () -> Void) {
        admission.jobSubmitted()
        queue.async { [self] in
            admission.jobWillRun()
            ExecutorOwnership.withHolding(ExecutorHolding(identity), block)
            admission.jobDidFinish()
        }
    }

    /// Runs `body` on the queue, after every job submitted before it, and waits for it:
    /// a plain `queue.sync` through the gate.
    ///
    /// Blocks the calling thread. The caller must not hold the executor already (that
    /// would wait for itself: libdispatch traps). Not what `performAndWait` uses: a
    /// `queue.sync` is invisible to ``SynchronousWaits``, so a cycle of such waits
    /// between threads hangs; ``ContextExecutor/runAndWait(_:)`` waits through the
    /// registry instead.
    package func runSynchronously<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        admission.jobSubmitted()
        let outcome: Result<T, E> = queue.sync {
            admission.jobWillRun()
            defer { admission.jobDidFinish() }
            return ExecutorOwnership.withHolding(ExecutorHolding(identity)) {
                Result { () throws(E) -> T in try body() }
            }
        }
        return try outcome.get()
    }
}
