/// When a block given to `perform(schedule:_:)` runs: Core Data's `ScheduledTaskType`.
///
/// The context's public `ScheduledTaskType` maps onto this one case for case.
package enum BlockSchedule: Sendable, Hashable {
    /// As soon as the context is free; inline when the caller is already isolated to it.
    case immediate
    /// After every job already scheduled on the context's executor, also when the caller
    /// is isolated to the context.
    case enqueued
}

/// A block that just ran, as told to ``BlockPerformingActor/blockDidFinish(_:)``.
package struct PerformedBlock: Sendable, Hashable {
    /// The API that ran a block.
    package enum Kind: Sendable, Hashable {
        /// `perform(schedule:_:)`, awaited.
        case perform
        /// `perform(_:)`, the fire-and-forget one.
        case performLater
        /// `performAndWait(_:)`.
        case performAndWait
    }

    /// The API that ran the block.
    package let kind: Kind
    /// Whether it ran inline inside other code that was already isolated to the context
    /// on this thread (an enclosing block, an isolated method, a held lock), which goes
    /// on after it.
    package let isNested: Bool

    /// A block run by `kind`, nested or not.
    package init(kind: Kind, isNested: Bool) {
        self.kind = kind
        self.isNested = isNested
    }
}

/// An actor that runs on a ``ContextExecutor`` and offers Core Data's block API:
/// `perform(schedule:_:)`, the fire-and-forget `perform(_:)` and `performAndWait(_:)`.
///
/// A context actor conforms, supplies its executor, and forwards its public methods to
/// this extension, which does the scheduling:
///
/// ```swift
/// actor Context: BlockPerformingActor {
///     nonisolated let contextExecutor: ContextExecutor
///     // `unownedExecutor` comes from the extension.
///
///     nonisolated(nonsending)
///     func perform<T: Sendable>(
///         schedule: ScheduledTaskType = .immediate, _ body: (isolated Context) throws -> T
///     ) async rethrows -> T {
///         try await performBlock(schedule: schedule.blockSchedule, body)
///     }
///
///     nonisolated func perform(_ body: @escaping @Sendable (isolated Context) -> Void) {
///         enqueueBlock(body)
///     }
///
///     nonisolated func performAndWait<T: Sendable>(_ body: (isolated Context) throws -> T) rethrows -> T {
///         try performBlockAndWait(body)
///     }
///
///     func blockDidFinish(_ block: PerformedBlock) { processPendingChanges() }
/// }
/// ```
///
/// ### Why these signatures (Swift 6.3.1)
/// - `perform` is `nonisolated(nonsending)`: it starts on the caller's executor, so a
///   caller already isolated to the context runs `.immediate` blocks inline, and
///   anyone else hops once. An actor-isolated `perform` cannot be called with a closure
///   literal on this compiler.
/// - The block is `(isolated Self) throws -> T`, neither `@Sendable` nor `sending`. A
///   closure whose parameter is `isolated` is isolated to that actor: at the call site
///   the compiler rejects capturing a non-Sendable value the caller goes on using, which
///   is the check that matters. (`sending` on that parameter makes every closure literal
///   fail to compile.) Inside, the block still belongs to the caller's region for the
///   compiler, so it travels to the executor in an ``IsolatedBody``.
/// - The result is `Sendable`: a block's result leaves the context, and managed
///   objects must not. (`assumeIsolated` requires it too.)
/// - A `rethrows` async function that calls a typed-throws async function gets a wrong
///   "no 'async' operations occur within 'await' expression" warning on 6.3.1. So the
///   asynchronous part returns a `Result`, and a synchronous typed-throws call whose
///   error type comes from the block (``rethrowing(_:for:)``) throws its error: that
///   keeps the public functions `rethrows`.
///
/// ### The end-of-block hook
/// Every block, whichever API ran it, ends with ``blockDidFinish(_:)`` on the context,
/// in the same isolated stretch (nothing else runs between the block and the hook), also
/// when the block throws. The context calls `processPendingChanges()` there.
package protocol BlockPerformingActor: Actor {
    /// The executor the actor runs on.
    nonisolated var contextExecutor: ContextExecutor { get }

    /// Called on the actor at the end of every block (also when it threw), right after
    /// it. The default does nothing.
    func blockDidFinish(_ block: PerformedBlock)
}

extension BlockPerformingActor {
    /// The actor's executor: ``contextExecutor``'s.
    package nonisolated var unownedExecutor: UnownedSerialExecutor {
        contextExecutor.unownedExecutor
    }

    /// Does nothing.
    package func blockDidFinish(_ block: PerformedBlock) {}

    // MARK: perform(schedule:_:)

    /// Runs `body` on the actor and returns its result: `perform(schedule:_:)`.
    ///
    /// - `.immediate`: inline when the caller is already isolated to the actor (or
    ///   runs on its queue, like `@MainActor` code for a main-queue context); otherwise
    ///   as soon as the executor is free, after the jobs already queued on it.
    /// - `.enqueued`: after every job already scheduled on the executor, also from
    ///   inside the actor: the caller suspends until those ran.
    ///
    /// Never blocks a thread. The block always runs exactly once: a cancelled caller
    /// still waits for it (the block can check `Task.isCancelled`), so a caller never
    /// learns of cancellation without knowing whether its block ran.
    nonisolated(nonsending)
    package func performBlock<T: Sendable>(
        schedule: BlockSchedule = .immediate, _ body: (isolated Self) throws -> T
    ) async rethrows -> T {
        let outcome = await outcome(of: body, schedule: schedule)
        return try rethrowing(outcome, for: body)
    }

    /// What ``performBlock(schedule:_:)`` runs: the block's outcome as a `Result`, so
    /// that only a synchronous call throws (see the type's discussion).
    nonisolated(nonsending)
    private func outcome<T: Sendable, E: Error>(
        of body: (isolated Self) throws(E) -> T, schedule: BlockSchedule
    ) async -> Result<T, E> {
        let executor = contextExecutor
        if executor.isCurrentQueue {
            if schedule == .enqueued { await executor.waitForScheduledJobs() }
            // The caller runs on the executor, so it is isolated to an actor on it and
            // comes back onto it after a suspension; checked again all the same.
            if executor.isCurrentQueue {
                return runInline(body, as: PerformedBlock(kind: .perform, isNested: true))
            }
        }
        /// Hops onto the actor (an isolated call) with the block made escapable.
        nonisolated(nonsending) func hop(_ body: @escaping (isolated Self) throws(E) -> T) async -> Result<T, E> {
            await run(IsolatedBody(body), as: PerformedBlock(kind: .perform, isNested: false))
        }
        return await withoutActuallyEscaping(body, do: hop)
    }

    // MARK: perform(_:)

    /// Schedules `body` on the actor and returns at once: the fire-and-forget
    /// `perform(_:)`. Blocks scheduled this way run in the order they were scheduled, in
    /// order with the executor's other jobs.
    ///
    /// Overloading note (measured on 6.3.1): with both `perform(_:)` and the async
    /// `perform(schedule:_:)` declared, `context.perform { … }` in `async` code resolves
    /// to the async one (the compiler then asks for `await`); only synchronous code
    /// reaches the fire-and-forget one by that spelling. The context may want a second
    /// spelling for async callers.
    package nonisolated func enqueueBlock(_ body: @escaping @Sendable (isolated Self) -> Void) {
        contextExecutor.submit { [self] in
            assumeIsolated { context in
                body(context)
                context.blockDidFinish(PerformedBlock(kind: .performLater, isNested: false))
            }
        }
    }

    // MARK: performAndWait(_:)

    /// Runs `body` on the actor and waits for it: `performAndWait(_:)`. Synchronous and
    /// reentrant.
    ///
    /// Inline when the current thread already holds the executor: inside another block
    /// of this actor (at any depth), in A→B→A chains across contexts, inside an isolated
    /// method of the actor, on the main queue for a main-queue context, or while holding
    /// the actor's ``ContextLock``. Otherwise a wait for the executor
    /// (``ContextExecutor/runAndWait(_:)``), which blocks the calling thread until the
    /// executor is free, after the blocks already scheduled on it, and does not hang in
    /// a cycle of such waits between threads (see ``SynchronousWaits``): from `async`
    /// code, prefer `performBlock`, which suspends instead.
    package nonisolated func performBlockAndWait<T: Sendable>(_ body: (isolated Self) throws -> T) rethrows -> T {
        try rethrowing(outcomeAndWait(of: body), for: body)
    }

    /// What ``performBlockAndWait(_:)`` runs: the block's outcome as a `Result`.
    private nonisolated func outcomeAndWait<T: Sendable, E: Error>(
        of body: (isolated Self) throws(E) -> T
    ) -> Result<T, E> {
        let executor = contextExecutor
        let block = PerformedBlock(kind: .performAndWait, isNested: executor.isHeldByCurrentThread)
        return executor.runAndWait { runInline(body, as: block) }
    }

    // MARK: Running a block

    /// Runs `body` on the current thread, which holds the executor; `assumeIsolated`
    /// checks that it does (``PrivateQueueExecutor/checkIsolated()``, or libdispatch's
    /// main-queue check).
    private nonisolated func runInline<T: Sendable, E: Error>(
        _ body: (isolated Self) throws(E) -> T, as block: PerformedBlock
    ) -> Result<T, E> {
        withoutActuallyEscaping(body) { body in
            let body = IsolatedBody(body)
            return assumeIsolated { context in context.run(body, as: block) }
        }
    }

    /// Runs `body`, then the end-of-block hook.
    private func run<T: Sendable, E: Error>(_ body: IsolatedBody<Self, T, E>, as block: PerformedBlock) -> Result<T, E> {
        defer { blockDidFinish(block) }
        return Result { () throws(E) -> T in try body.call(self) }
    }
}

/// A block for an actor, carried to the actor's executor.
///
/// The closure is isolated to `A` (its parameter is `isolated A`): at the call site the
/// compiler already rejected capturing any non-Sendable value the caller keeps using, so
/// only the callee's region analysis is bypassed here. It is called once, on A's
/// executor, while the caller waits for it, and never escapes the
/// `withoutActuallyEscaping` scope that made it escapable.
// @unchecked Sendable because the block is isolated to `A` and runs there (see above).
package struct IsolatedBody<A: Actor, T, E: Error>: @unchecked Sendable {
    /// The block.
    package let call: (isolated A) throws(E) -> T

    /// Wraps `call`.
    package init(_ call: @escaping (isolated A) throws(E) -> T) {
        self.call = call
    }
}

/// `outcome`'s value, or its error thrown. `body` is the block that produced the
/// outcome: the thrown type is the block's, so a `rethrows` function may call this.
package func rethrowing<A: Actor, T, E: Error>(
    _ outcome: Result<T, E>, for body: (isolated A) throws(E) -> T
) throws(E) -> T {
    try outcome.get()
}
