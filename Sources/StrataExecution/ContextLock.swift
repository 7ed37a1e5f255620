import Dispatch
internal import StrataLocks
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A release of a ``ContextLock`` by a thread that does not hold it: the calling thread
/// never locked it, already released it as often as it locked it, or another thread
/// holds it. The context reports it as `ContextLockError.notHeldByCurrentThread`.
package struct LockNotHeld: Error, Sendable, Hashable {
    /// The label of the executor's queue.
    package let queue: String
}

/// The legacy `lock()`, `unlock()` and `tryLock()` of a context (Core Data's reference of
/// 2009), given a meaning in the actor world: the thread that holds the lock has
/// exclusive use of the context's executor, as if it were running one of its jobs.
///
/// While a thread holds the lock, no job of the executor runs anywhere else, and on that
/// thread `performAndWait` runs inline. For a private-queue context `assumeIsolated`
/// works on that thread too, so code can reach the context without a closure:
///
/// ```swift
/// context.lock()
/// defer { try? context.unlock() }
/// context.assumeIsolated { context in … }   // or context.performAndWait { … }
/// ```
///
/// Rules:
/// - **Recursive**, counted like `NSRecursiveLock`: each `lock()` or successful
///   `tryLock()` needs one `unlock()` on the same thread.
/// - **`lock()` blocks** until the executor is free, then keeps it. A private queue is
///   held back by a gate every job passes (``ExecutorAdmission``); the main queue by a
///   job parked on it (``MainQueueRelay``). Jobs queued before the lock was granted run
///   first; jobs scheduled while it is held wait for `unlock()`. Called where the thread
///   already holds the executor (inside a block, a job, a `performAndWait`), it succeeds
///   at once.
/// - **`tryLock()` never blocks.** On a private queue it succeeds when nothing is queued
///   or running (or the thread already holds the executor). For a main-queue context it
///   succeeds on the main queue and where the thread already holds the lock, and fails
///   elsewhere: whether the main queue is idle cannot be known without waiting.
/// - **`unlock()` from a thread that does not hold the lock throws** (``LockNotHeld``,
///   which the context reports as `ContextLockError`) and changes nothing: misuse is
///   reported, never trapped.
/// - Code that runs for the lock's owner while it waits (a block it sent to the main
///   queue through `performAndWait`) may lock and unlock too; it counts as the owner, and
///   cannot release the owner's own hold.
/// - **Main queue**: a lock taken on the main queue belongs to the main queue, not to a
///   thread (main-queue jobs run on different threads under `dispatchMain()`). It cannot
///   keep the main queue beyond the current job: release it before the job returns. A
///   lock taken off the main queue parks a job there; on the locking thread
///   `performAndWait` runs blocks through that job, but `MainActor.assumeIsolated` traps
///   (the main actor's isolation check is libdispatch's, which only a thread draining the
///   main queue passes).
/// - Not for `async` code: the calls block the thread, and a task may resume on another
///   thread than the one that locked.
///
/// As the reference says, the locking thread must keep the context alive until it
/// unlocks; a lock that is never released blocks the context for good.
package final class ContextLock: Sendable {
    /// Who holds the lock.
    private enum Owner: Sendable, Equatable {
        /// A thread, off the executor's queue (or on it, for a private queue).
        case thread(pthread_t)
        /// Main-queue code (taken on the main queue).
        case mainQueue

        /// Whether the current thread `me` is this owner; `holdingExecutor` tells
        /// whether it holds the executor (for the main queue, whether it runs there).
        func includes(_ me: pthread_t, holdingExecutor: Bool) -> Bool {
            switch self {
            case .thread(let owner): pthread_equal(owner, me) != 0
            case .mainQueue: holdingExecutor
            }
        }
    }

    /// What a lock attempt that does not wait found.
    private enum Attempt {
        /// A further level of a lock already held (by this thread or for it).
        case nested
        /// The lock, newly taken.
        case taken
        /// Held elsewhere, or the executor is busy.
        case busy
    }

    /// The lock's state, guarded by `state`'s mutex.
    private struct State: Sendable {
        var owner: Owner?
        var depth = 0
        /// The job parked on the main queue for a thread that holds a main-queue lock.
        var relay: MainQueueRelay?
        /// The owner thread's ownership-stack entry, removed on release.
        var token: HoldingToken?
    }

    /// The executor the lock gives exclusive use of.
    package let executor: ContextExecutor
    /// Who holds the lock, how often, and the main-queue relay.
    private let state = LockedValue(State())

    /// A lock for the context running on `executor`.
    package init(executor: ContextExecutor) {
        self.executor = executor
    }

    /// Whether the current thread holds the lock (or runs for the thread that does).
    package var isHeldByCurrentThread: Bool {
        let me = pthread_self()
        let holds = executor.isHeldByCurrentThread
        return state.withLock { state in
            switch state.owner {
            case .thread(let owner): pthread_equal(owner, me) != 0 || holds
            case .mainQueue: holds
            case nil: false
            }
        }
    }

    /// Blocks until the current thread has exclusive use of the context's executor, and
    /// keeps it until the matching ``unlock()``.
    @available(*, noasync, message: "lock() blocks the thread; use perform in async code")
    package func lock() {
        switch executor {
        case .privateQueue(let queue): _ = lockPrivateQueue(queue, waiting: true)
        case .mainQueue: _ = lockMainQueue(waiting: true)
        }
    }

    /// Takes the lock if that needs no waiting; returns whether it did.
    @available(*, noasync, message: "tryLock() is for threads; use perform in async code")
    package func tryLock() -> Bool {
        switch executor {
        case .privateQueue(let queue): lockPrivateQueue(queue, waiting: false)
        case .mainQueue: lockMainQueue(waiting: false)
        }
    }

    /// Releases one level of the lock held by the current thread; the executor is free
    /// again once every `lock()` was matched.
    ///
    /// Named `release()`, not `unlock()`, so that the context's `unlock()`, which throws
    /// its public error instead, can be declared beside it.
    ///
    /// - Throws: ``LockNotHeld`` when the current thread does not hold the lock. Nothing
    ///   changes then.
    @available(*, noasync, message: "unlock() is for threads; use perform in async code")
    package func release() throws(LockNotHeld) {
        let me = pthread_self()
        let holds = executor.isHeldByCurrentThread
        let isMainQueue = executor.identity === ExecutorIdentity.mainQueue
        let released: State? = try state.withLock { (state) throws(LockNotHeld) -> State? in
            switch state.owner {
            case let owner? where owner.includes(me, holdingExecutor: holds):
                state.depth -= 1
                guard state.depth == 0 else { return nil }
                defer { state = State() }
                return state
            case .thread where holds && state.depth > 1:
                // Runs for the owner, which waits for this thread: it may release what
                // it took, not the owner's own hold.
                state.depth -= 1
                return nil
            default:
                throw LockNotHeld(queue: executor.identity.label)
            }
        }
        guard let released, case .thread = released.owner else { return }
        if let token = released.token { ExecutorOwnership.remove(token) }
        if isMainQueue {
            released.relay?.finish()
        } else if case .privateQueue(let queue) = executor {
            queue.admission.release()
        }
    }

    // MARK: Private queue

    /// `lock()` (`waiting`) or `tryLock()` for a private queue: through the executor's
    /// ``ExecutorAdmission`` gate. Returns whether the lock was taken.
    private func lockPrivateQueue(_ queue: PrivateQueueExecutor, waiting: Bool) -> Bool {
        let me = pthread_self()
        let holds = queue.isHeldByCurrentThread
        let attempt = state.withLock { state -> Attempt in
            switch state.owner {
            case .thread(let owner) where pthread_equal(owner, me) != 0 || holds:
                // Recursion, or a thread running for the owner while the owner waits.
                state.depth += 1
                return .nested
            case nil:
                // The thread already holds the executor (a job, a block, a lent hold):
                // keep it. Otherwise take it only if nothing is queued or running.
                guard queue.admission.claim(ifIdle: !holds) else { return .busy }
                // Pushed under the state's lock: only this thread touches its stack,
                // and `unlock()` finds the token with the state.
                let token = ExecutorOwnership.push(ExecutorHolding(queue.identity))
                state = State(owner: .thread(me), depth: 1, token: token)
                return .taken
            default:
                return .busy
            }
        }
        switch attempt {
        case .nested, .taken:
            return true
        case .busy:
            break
        }
        guard waiting else { return false }
        // Wait for the executor: a job takes the gate for this thread when it reaches the
        // head of the queue, after every job queued before it and after any other owner.
        let grant = Grant()
        queue.submit {
            queue.admission.claimWaiting(for: me)
            grant.give()
        }
        grant.wait()
        let token = ExecutorOwnership.push(ExecutorHolding(queue.identity))
        state.withLock { $0 = State(owner: .thread(me), depth: 1, token: token) }
        return true
    }

    // MARK: Main queue

    /// `lock()` (`waiting`) or `tryLock()` for the main queue: counted on the main queue,
    /// through a ``MainQueueRelay`` elsewhere. Returns whether the lock was taken.
    private func lockMainQueue(waiting: Bool) -> Bool {
        let me = pthread_self()
        let holds = executor.isHeldByCurrentThread
        let taken = state.withLock { state -> Bool in
            switch state.owner {
            case .thread(let owner) where pthread_equal(owner, me) != 0 || holds:
                state.depth += 1
                return true
            case .mainQueue where holds:
                state.depth += 1
                return true
            case nil where holds:
                state = State(owner: .mainQueue, depth: 1)
                return true
            default:
                return false
            }
        }
        if taken { return true }
        guard waiting else { return false }
        // Park a job on the main queue; once it runs, nothing else does until unlock().
        // A lock left by main-queue code whose job has ended is void: the main queue is
        // now parked for this thread.
        let relay = MainQueueRelay.park()
        let token = ExecutorOwnership.push(ExecutorHolding(ExecutorIdentity.mainQueue, relay: relay))
        state.withLock { $0 = State(owner: .thread(me), depth: 1, relay: relay, token: token) }
        return true
    }
}

/// The moment a job at the head of a private queue claimed the gate for a thread
/// waiting in `lock()`: given once, waited for once.
// @unchecked Sendable because `given` is read and written with `lock` held only.
private final class Grant: @unchecked Sendable {
    /// Guards `given`; the waiting thread sleeps on its condition.
    private let lock = ConditionLock()
    /// Whether the gate was claimed. Guarded by `lock`.
    private var given = false

    /// The gate was claimed: wakes the waiting thread.
    func give() {
        lock.withLock {
            given = true
            lock.signal()
        }
    }

    /// Blocks until ``give()``.
    func wait() {
        lock.withLock { while !given { lock.wait() } }
    }
}
