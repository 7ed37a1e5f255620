import Dispatch

/// Where a context runs: its own ``PrivateQueueExecutor``, or the main queue (the main
/// actor's executor).
///
/// This is what a context actor holds and forwards to: its `unownedExecutor`, whether
/// the current code already runs on it, how to run a block there and wait
/// (`performAndWait`), how to submit one without waiting (the fire-and-forget
/// `perform`), and how to wait behind everything already scheduled (`.enqueued`).
///
/// ## The main queue and the main actor on this toolchain
///
/// Measured on Swift 6.3.1 / Linux (corelibs libdispatch), under Swift Testing, in an
/// executable with an async `@main`, and in one with synchronous top-level code that
/// then calls `dispatchMain()` or `RunLoop.main.run()`:
///
/// - **Main-actor jobs run on the dispatch main queue**, but usually not on the main
///   thread: once `dispatchMain()` has parked the main thread (an async `@main` after its
///   first suspension, and every Swift Testing test), worker threads drain the main
///   queue and `Thread.isMainThread` is false in `@MainActor` code. A queue-specific
///   value set on `DispatchQueue.main` is seen there, in `@MainActor` tasks, in
///   `MainActor.run` blocks, and in `DispatchQueue.main.async`/`sync` blocks; and on the
///   main thread in synchronous top-level code (libdispatch binds the main queue to the
///   main thread until `dispatchMain()`). So "on the main queue" is
///   `DispatchQueue.getSpecific(key:)` returning ``ExecutorIdentity/mainQueue`` (or the
///   ownership stack listing it), never `Thread.isMainThread`.
/// - **`DispatchQueue.main.sync` from another thread, then `MainActor.assumeIsolated`,
///   works**, under Swift Testing and in plain executables alike: the main executor's
///   isolation check is libdispatch's "does this thread drain the main queue", which a
///   `sync` block passes. It passes even inside a private queue's `sync` block nested in
///   the main queue's (libdispatch checks the queues the thread has locked, not only the
///   innermost), and a private context's `assumeIsolated` passes inside
///   `DispatchQueue.main.sync` called from one of its jobs (the runtime still records
///   that job's executor). It fails on a thread that merely parked the main queue (see
///   ``MainQueueRelay``).
/// - **FIFO on the main actor**: `DispatchQueue.main.async` blocks and
///   `Task { @MainActor in }` jobs submitted from one thread, mixed, with task priorities
///   from `.background` to `.high`, ran in submission order (400 of each pattern, every
///   run). Both end up on the main queue, which is serial and ignores priorities. Strata
///   submits main-queue blocks with `DispatchQueue.main.async` (ordered by libdispatch's
///   contract, not by an observation) and runs them with `MainActor.assumeIsolated`.
///
/// A synchronous hop to the main queue needs someone to drain it: under Swift Testing and
/// after `dispatchMain()` libdispatch does; in a synchronous program whose main thread is
/// blocked, `performAndWait` on a main-queue context from another thread waits forever,
/// exactly as `DispatchQueue.main.sync` (and Core Data) would.
package enum ContextExecutor: Sendable {
    /// A context's own serial queue.
    case privateQueue(PrivateQueueExecutor)
    /// The main queue: the context shares `MainActor`'s executor.
    case mainQueue

    /// A new private queue for a context called `name` (its label shows the name).
    package static func privateQueue(named name: String?) -> ContextExecutor {
        .privateQueue(PrivateQueueExecutor(label: PrivateQueueExecutor.label(forContextNamed: name)))
    }

    /// The executor a context actor returns from `unownedExecutor`.
    package var unownedExecutor: UnownedSerialExecutor {
        switch self {
        case .privateQueue(let executor): executor.asUnownedSerialExecutor()
        case .mainQueue: MainActor.sharedUnownedExecutor
        }
    }

    /// The identity on the ownership stack and as the queue-specific value.
    package var identity: ExecutorIdentity {
        switch self {
        case .privateQueue(let executor): executor.identity
        case .mainQueue: ExecutorIdentity.mainQueue
        }
    }

    /// Whether the current thread holds this executor: it drains its queue, or its
    /// ownership stack lists it (an enclosing `performAndWait`, a held lock). What
    /// synchronous code asks before running a block inline.
    package var isHeldByCurrentThread: Bool {
        ExecutorOwnership.holds(identity)
    }

    /// Whether the current thread is draining this executor's queue right now. What
    /// asynchronous code asks: a task runs on a context's queue only while it is
    /// isolated to an actor on that executor, whereas the ownership stack of a pooled
    /// thread can describe a synchronous caller that is not this task.
    package var isCurrentQueue: Bool {
        ExecutorOwnership.currentQueue === identity
    }

    // MARK: Running blocks

    /// Runs `body` with exclusive use of this executor and waits for it: inline when the
    /// current thread already holds it (reentrancy, A→B→A chains, a held lock); through
    /// the relay of a main-queue lock held by this thread; otherwise as a `.user` wait of
    /// ``SynchronousWaits``: on this thread once a private queue's gate admits it (at
    /// once when the queue is idle), or on the main queue, which the main queue's gate
    /// runs lending the caller's holdings.
    ///
    /// A wait that is part of a cycle between threads (each holds what the other waits
    /// for) takes its turn right away on an executor held by a `performAndWait` that
    /// waits for it, or is run by a main-queue thread that waits for it (see
    /// ``SynchronousWaits``), so such cycles do not hang. It never fails: when nothing
    /// can be done (a cycle made only of internal requests), it keeps waiting.
    ///
    /// Blocks the calling thread until the executor is free. Callable from any thread,
    /// including `async` code (it then blocks that pooled thread: use `perform` there).
    package func runAndWait<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let identity = self.identity
        if ExecutorOwnership.currentQueue === identity { return try body() }
        if let holding = ExecutorOwnership.stackHolding(identity) {
            guard let relay = holding.relay else { return try body() }
            return try relay.run(lending: ExecutorOwnership.holdings, body)
        }
        let outcome = waitForTurn(as: .user, failingWith: nil as ((String) -> Never)?, body)
        return try outcome.get()
    }

    /// Runs `body` with exclusive use of this executor for an internal request made
    /// from code already holding other contexts (a child's read or save in its parent).
    /// Inline when held; never borrowable while it waits; throws `failure(description)`
    /// when the wait could never end.
    ///
    /// Waits as ``runAndWait(_:)`` does, as an `.internal` wait of ``SynchronousWaits``:
    /// it may take its turn on an executor a waiting `performAndWait` holds, but what
    /// this thread holds is never lent to another thread meanwhile, since the code that
    /// waits is paused in the middle of an operation. When every thread involved is
    /// blocked and none can lend what another needs, it gives up.
    ///
    /// The error is the caller's to choose (the context's `StrataError.wouldDeadlock`):
    /// this module knows nothing of the framework above it.
    ///
    /// - Throws: `failure` of a description naming the queues involved, without running
    ///   `body`; or what `body` throws.
    package func runRequest<T>(failingWith failure: (String) -> any Error, _ body: () throws -> T) throws -> T {
        let identity = self.identity
        if ExecutorOwnership.currentQueue === identity { return try body() }
        if let holding = ExecutorOwnership.stackHolding(identity) {
            guard let relay = holding.relay else { return try body() }
            return try relay.run(lending: ExecutorOwnership.holdings, body)
        }
        return try withoutActuallyEscaping(failure) { failure in
            try waitForTurn(as: .internal, failingWith: failure, body).get()
        }
    }

    /// Runs `block` on this executor after every job and block scheduled before it,
    /// without waiting (the fire-and-forget `perform`). FIFO: blocks submitted from one
    /// thread run in the order submitted, interleaved in order with the actor's jobs.
    package func submit(_ block: @escaping @Sendable () -> Void) {
        switch self {
        case .privateQueue(let executor): executor.submit(block)
        case .mainQueue: DispatchQueue.main.async(execute: block)
        }
    }

    /// Returns once every job and block scheduled on this executor before the call has
    /// run (`.enqueued`). Suspends; never blocks a thread.
    ///
    /// A marker block goes to the back of the queue and resumes the caller when it runs.
    /// A caller isolated to an actor on this executor then goes back onto it, behind
    /// whatever was scheduled meanwhile.
    package nonisolated(nonsending) func waitForScheduledJobs() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            submit { continuation.resume() }
        }
    }
}

