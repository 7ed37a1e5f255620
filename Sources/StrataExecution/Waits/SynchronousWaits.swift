import Dispatch
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The driver of the one ``WaitGraph``: every blocking wait between executors
/// (``ContextExecutor/runAndWait(_:)`` and ``ContextExecutor/runRequest(failingWith:_:)``
/// when the thread does not hold the executor) goes through it.
///
/// ## Why
/// A child context's fetch or save runs synchronously on its parent, from inside a block
/// of the child. Thread 1 runs a block of the parent and calls `child.performAndWait`;
/// thread 2 runs a block of the child that needs the parent: each holds what the other
/// waits for. Plain `queue.sync` and `DispatchQueue.main.sync` hang there for good. The
/// graph knows every such wait: what each waiting thread holds and what it waits for,
/// so a wait can see that the executor it needs is held by a thread that (transitively)
/// waits for it, and use it safely right away. The rules are the graph's (see
/// ``WaitGraph``); this type only does what the graph's transitions say: it wakes
/// threads, sends gates, and runs blocks with its lock released.
///
/// Every waiting thread sleeps on a condition of its own of the driver's lock, so that a
/// wake-up is targeted: a grant or a finished block wakes its waiter only.
///
/// Cost, measured against the `queue.sync` / `DispatchQueue.main.sync` it replaces
/// (debug build, 2 cores, under Swift Testing):
/// - an idle private context: the same (100,000 calls from a plain thread, 0.30–0.35 s
///   either way): one claim of its gate, no queue, nothing registered;
/// - a busy private context: eight threads × 1,000 calls on one context take 0.5 s
///   instead of 0.1 s. Each contended call needs two thread wake-ups in a row (the
///   queue's thread for the gate job, then the waiter), where libdispatch hands a queue
///   straight to the next `sync` caller. (With one condition broadcast to every waiter
///   on every change it was 1.2 s.)
/// - the main queue from another thread: 10,000 calls take 0.2–0.3 s instead of
///   0.03–0.05 s. After `dispatchMain()` a `DispatchQueue.main.sync` on an idle main
///   queue runs the block on the calling thread, whereas the gate block needs a worker
///   thread to drain the main queue, then wakes the caller.
///
/// Waits that run inline (the thread holds the executor) never come here, so reentrant
/// calls cost nothing more. Waits the graph cannot see are not part of this: `lock()`
/// blocking for a context, or a thread blocked outside Strata.
// @unchecked Sendable because `graph` and `records` are read and written with `lock`
// held only.
package final class SynchronousWaits: @unchecked Sendable {
    /// What the driver keeps of one wait beside the graph: how to wake its thread, and
    /// the block another thread may run for it.
    private final class Record {
        /// The waiting thread sleeps on it.
        let wakeup: ConditionLock.Condition
        /// The waiting thread, for the private queue's admission.
        let thread: pthread_t
        /// The block, as run by another thread for a main-queue target (the main
        /// queue's gate, a rescuer); taken by the thread that runs it. Nil for a private
        /// queue, whose blocks always run on the waiting thread.
        var job: (() -> Void)?

        init(wakeup: ConditionLock.Condition, thread: pthread_t, job: (() -> Void)?) {
            self.wakeup = wakeup
            self.thread = thread
            self.job = job
        }
    }

    /// The one driver.
    package static let shared = SynchronousWaits()

    /// Guards `graph` and `records`; each waiting thread sleeps on a condition of it.
    private let lock = ConditionLock()
    /// The waits and their rules. Guarded by `lock`.
    private var graph = WaitGraph(mainQueue: ExecutorIdentity.mainQueue)
    /// The driver's part of each wait in the graph. Guarded by `lock`.
    private var records: [WaitGraph.WaitID: Record] = [:]

    /// An empty registry.
    private init() {}

    // MARK: Waiting

    /// Registers a wait of the current thread for `executor`, and returns once `job` ran
    /// (on this thread or another), or, for a `.internal` wait only, with a description of
    /// the deadlock it would be part of (`job` did not run).
    ///
    /// `job` runs the caller's block and keeps its outcome; it is not kept after this
    /// returns (a caller may pass a closure made escapable with `withoutActuallyEscaping`).
    package func wait(for executor: ContextExecutor, as kind: SynchronousWaitKind, _ job: @escaping () -> Void) -> String? {
        let isMainQueue = if case .mainQueue = executor { true } else { false }
        let record = Record(wakeup: lock.makeCondition(), thread: pthread_self(), job: isMainQueue ? job : nil)
        let drainsMainQueue = ExecutorOwnership.currentQueue === ExecutorIdentity.mainQueue
        let holdings = ExecutorOwnership.holdings
        lock.lock()
        defer { lock.unlock() }
        let (id, wake) = graph.begin(
            thread: ThreadKey(pthread_self()), target: executor.identity,
            kind: kind, drainsMainQueue: drainsMainQueue, holdings: holdings)
        records[id] = record
        signal(wake)
        while true {
            switch graph.nextStep(for: id) {
            case .leave:
                records[id] = nil
                return nil
            case .giveUp(let deadlock):
                records[id] = nil
                return deadlock
            case .runGranted:
                lock.withoutLock {
                    ExecutorOwnership.withHolding(ExecutorHolding(executor.identity), job)
                    if case .privateQueue(let queue) = executor { queue.admission.release() }
                }
                signal(graph.finishRunning(id))
                records[id] = nil
                return nil
            case .borrow:
                lock.withoutLock { ExecutorOwnership.withHolding(ExecutorHolding(executor.identity), job) }
                signal(graph.finishRunning(id))
                records[id] = nil
                return nil
            case .relay(let relay, _, let lent):
                record.job = nil
                lock.withoutLock { relay.run(lending: lent, job) }
                signal(graph.finishRunning(id))
                records[id] = nil
                return nil
            case .askRescue(let rescuer):
                signal([rescuer])
            case .rescue(let rescued, let lent):
                var block = records[rescued]?.job
                records[rescued]?.job = nil
                lock.withoutLock {
                    if let block { ExecutorOwnership.lend(lent, block) }
                    block = nil  // no reference left when the rescued waiter returns
                }
                signal(graph.rescueFinished(id))
            case .sendGate:
                lock.withoutLock { sendGate(for: id, thread: record.thread, to: executor) }
            case .sleep:
                lock.wait(on: record.wakeup)
            }
        }
    }

    /// The number of waits in progress for `target` (by a thread holding `held`, when
    /// given), whatever their state: for tests that wait until a thread is blocked
    /// before they go on.
    package func waitCount(for target: ExecutorIdentity, holding held: ExecutorIdentity? = nil) -> Int {
        lock.withLock { graph.waitCount(for: target, holding: held) }
    }

    /// Wakes the threads of `waits`. Lock held.
    private func signal(_ waits: [WaitGraph.WaitID]) {
        for id in waits {
            if let record = records[id] { lock.signal(record.wakeup) }
        }
    }

    // MARK: Gates

    /// Sends the gate of wait `id` (of `thread`) to `executor`'s queue: a job at the back
    /// of a private queue, a block on the main queue. Lock not held.
    private func sendGate(for id: WaitGraph.WaitID, thread: pthread_t, to executor: ContextExecutor) {
        switch executor {
        case .privateQueue(let queue):
            queue.submit { [self] in
                queue.admission.claimWaiting(for: thread)
                let action = lock.withLock { () -> WaitGraph.PrivateGateAction in
                    let action = graph.privateGateArrived(id)
                    if case .grant(let waiter) = action { signal([waiter]) }
                    return action
                }
                if case .giveBack = action { queue.admission.release() }
            }
        case .mainQueue:
            // Through a plain `DispatchQueue` value, so the block is not taken for
            // main-actor code (see `ContextExecutor.runAndWait`).
            let main: DispatchQueue = .main
            main.async { [self] in runOnMainQueue(id) }
        }
    }

    /// The main queue's gate block for wait `id`: runs its block here when it still
    /// waits, lending it the waiter's holdings and the main queue.
    private func runOnMainQueue(_ id: WaitGraph.WaitID) {
        lock.lock()
        defer { lock.unlock() }
        guard case .run(let lent) = graph.mainGateArrived(id) else { return }
        var block = records[id]?.job
        records[id]?.job = nil
        lock.withoutLock {
            if let block { ExecutorOwnership.lend(lent, block) }
            block = nil  // no reference left when the waiter returns
        }
        signal([graph.mainGateFinished(id)])
    }
}

extension ContextExecutor {
    /// Waits for this executor, which the current thread does not hold, then runs `body`
    /// with exclusive use of it: what ``runAndWait(_:)`` (`.user`) and
    /// ``runRequest(failingWith:_:)`` (`.internal`) do after their inline paths.
    ///
    /// An idle private queue is claimed at once (nothing to wait for, nothing to
    /// register); everything else goes through ``SynchronousWaits``. `failure` makes the
    /// error of an `.internal` wait that would never end; a `.user` wait passes nil and
    /// never fails.
    func waitForTurn<T, E: Error, F: Error>(
        as kind: SynchronousWaitKind, failingWith failure: ((String) -> F)?, _ body: () throws(E) -> T
    ) throws(F) -> Result<T, E> {
        if case .privateQueue(let executor) = self, executor.admission.claim(ifIdle: true) {
            defer { executor.admission.release() }
            return ExecutorOwnership.withHolding(ExecutorHolding(executor.identity)) {
                Result { () throws(E) -> T in try body() }
            }
        }
        var outcome: Result<T, E>?
        let deadlock = withoutActuallyEscaping({ outcome = Result { () throws(E) -> T in try body() } }) { job in
            SynchronousWaits.shared.wait(for: self, as: kind, job)
        }
        if let deadlock, let failure { throw failure(deadlock) }
        // The registry returns after the job ran, unless it reports a deadlock, which it
        // only does for an `.internal` wait, and those come with a `failure`.
        return outcome!
    }
}
