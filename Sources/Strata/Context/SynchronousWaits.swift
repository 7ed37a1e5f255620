import Dispatch
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who is waiting in a ``SynchronousWait``, which decides whether what it holds may be
/// lent while it waits.
enum SynchronousWaitKind: Sendable, Hashable, CustomStringConvertible {
    /// `performAndWait`: the caller's block is paused at a call that may, by the API's
    /// contract, run other blocks of the contexts it holds (reentrancy), so what it holds
    /// may be lent to a thread it waits for.
    case user
    /// A request Strata makes for its own work (a child context's fetch or save in its
    /// parent): the code that waits is paused in the middle of an operation, so what it
    /// holds is never lent.
    case `internal`

    /// How messages name it.
    var description: String {
        switch self {
        case .user: "performAndWait"
        case .internal: "internal request"
        }
    }
}

/// One thread blocked in a synchronous wait for an executor, as the registry
/// (``SynchronousWaits``) sees it: what it holds, what it waits for, and what is being
/// done for it.
///
/// Created by the waiting thread and read by the gates, lenders and rescuers that work
/// for it. Every mutable property is read and written with the registry's mutex held.
// @unchecked Sendable because every mutable property is guarded by the registry's mutex
// (the `let`s are set once in init).
final class SynchronousWait: @unchecked Sendable {
    /// Where the wait stands.
    enum State: Sendable, Hashable {
        /// Blocked: nothing runs for it. The only state in which it acts, lends, or is
        /// granted its executor.
        case waiting
        /// Its private queue's gate job took the executor for it: its thread is about to
        /// run the block.
        case granted
        /// Its block runs: on its thread (granted, or on an executor borrowed from a
        /// waiter), or through a main-queue lock's relay while its thread waits for it.
        case running
        /// Another thread runs its block for it (the main queue's gate, a rescuer), with
        /// its holdings lent to that thread.
        case delegated
        /// Still blocked, and a thread that it waits for uses one of its holdings.
        case lent
        /// Still blocked, and its thread runs another waiter's main-queue block.
        case rescuing
        /// Its block ran (or it gave up): the waiting thread leaves.
        case finished
    }

    /// The waiting thread.
    let thread: pthread_t
    /// The executor it waits for.
    let target: ExecutorIdentity
    /// Whether its holdings may be lent.
    let kind: SynchronousWaitKind
    /// Whether the waiting thread drains the main queue (a main-queue job, a block the
    /// main queue runs): main-actor code can run on it, so it can run another waiter's
    /// main-queue block while it waits.
    let drainsMainQueue: Bool
    /// What the thread holds (its ownership stack and the queue it drains), plus the
    /// target once its block runs on this thread.
    var holdings: [ExecutorHolding]
    /// Where the wait stands.
    var state: State = .waiting
    /// Whether a gate must (again) be sent to the target: set at first, and when a gate
    /// came while the waiter could not take its turn (lent, or rescuing).
    var needsGate = true
    /// The block, as run by another thread for a main-queue target (the main queue's gate
    /// or a rescuer); the waiting thread clears it before it returns. Nil for a private
    /// queue, whose blocks always run on the waiting thread.
    var job: (() -> Void)?
    /// For a rescuer: the waiter whose main-queue block it is to run.
    var rescued: SynchronousWait?
    // Because a pthread condition must not move once initialised, it lives on the heap,
    // allocated here and freed in deinit.
    /// What the waiting thread waits on, with the registry's mutex: signalled when
    /// something it may act on changed (its grant, its block done, a rescue to run, a
    /// change in the waits it is connected to).
    let wakeup = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    /// A wait of the current thread for `target`.
    init(target: ExecutorIdentity, kind: SynchronousWaitKind) {
        thread = pthread_self()
        self.target = target
        self.kind = kind
        drainsMainQueue = ExecutorOwnership.currentQueue === ExecutorIdentity.mainQueue
        holdings = ExecutorOwnership.holdings
        pthread_cond_init(wakeup, nil)
    }

    /// Destroys the condition: nobody waits on it any more (its thread left the
    /// registry, and gates only read the state).
    deinit {
        pthread_cond_destroy(wakeup)
        wakeup.deallocate()
    }

    /// Whether it holds `identity`.
    func holds(_ identity: ExecutorIdentity) -> Bool {
        holdings.contains { $0.identity === identity }
    }

    /// Whether it cannot go on by itself: nothing it waits for runs yet.
    var isBlocked: Bool {
        state == .waiting || state == .lent || state == .rescuing
    }

    /// For messages: "a thread holding 'a', 'b' waits for 'c' (performAndWait)".
    var summary: String {
        var held: [String] = []
        for holding in holdings where !held.contains(holding.identity.label) {
            held.append(holding.identity.label)
        }
        let holding = held.isEmpty ? "nothing" : held.map { "'\($0)'" }.joined(separator: ", ")
        return "a thread holding \(holding) waits for '\(target.label)' (\(kind))"
    }
}

/// The registry of every blocking wait Strata makes between contexts
/// (``ContextExecutor/runAndWait(_:)`` and ``ContextExecutor/runInternalRequest(_:)``
/// when the thread does not hold the executor), and how each one gets its turn.
///
/// ## Why
/// A child context's fetch or save runs synchronously on its parent, from inside a block
/// of the child. Thread 1 runs a block of the parent and calls `child.performAndWait`;
/// thread 2 runs a block of the child that needs the parent: each holds what the other
/// waits for. Plain `queue.sync` and `DispatchQueue.main.sync` hang there for good. The
/// registry knows every such wait: what each waiting thread holds and what it waits for,
/// so a wait can see that the executor it needs is held by a thread that (transitively)
/// waits for it, and use it safely right away.
///
/// ## How a wait for executor X gets its turn
/// 1. **Private X, normal path**: a gate job goes to the back of X's queue (through
///    ``PrivateQueueExecutor/submit(_:)``, so it counts as a job). At the head of the queue
///    it claims X's ``ExecutorAdmission`` for the waiting thread and marks the wait
///    granted; the waiting thread then runs the block itself, with X pushed on its
///    ownership stack, and releases the gate. So the block runs after every job queued
///    before the call, on the caller's thread as with `queue.sync` (a caller on the main
///    queue stays on it inside, which main → private → main chains rely on). When X is
///    idle (nothing queued or running), the caller claims the gate at once and never
///    registers (``ContextExecutor/runAndWait(_:)``).
/// 2. **Main X, normal path**: a gate block goes to the main queue with
///    `DispatchQueue.main.async`; when it runs, it runs the caller's block there, lending
///    it the caller's holdings, as `DispatchQueue.main.sync` did.
/// 3. **Borrow (private X)**: X is held by a `.user` waiter W that is blocked,
///    transitively, by this wait (W waits for something this thread holds, or held by a
///    waiter blocked by this thread, and so on). Then this thread runs its block on X
///    right away, on its own thread; W is marked lent until then, so that nothing else
///    borrows from it and it takes no turn of its own. Safe: W cannot move before this
///    thread lets go of what W waits for, which happens after the block. It is the
///    cross-thread form of the reentrancy `performAndWait` already has on one thread
///    (A → B → A): W's block is paused at its `performAndWait` while another block of X
///    runs.
/// 4. **Rescue (main X)**: main-actor code can only run on a thread that drains the main
///    queue. When the main queue is held by a `.user` waiter that drains it and is
///    blocked by this wait, that waiter runs this wait's block on its own thread, lending
///    this thread's holdings, then goes back to waiting. When the main queue is held by
///    a `.user` waiter through a main-queue lock's ``MainQueueRelay`` (a thread off the
///    main queue holding `lock()`), the block goes through that relay instead.
/// 5. **No way out**: when every thread involved is blocked in a wait that nobody can
///    resolve (the executors are held by `.internal` waiters only, say), an `.internal`
///    request gives up: ``ContextExecutor/runInternalRequest(_:)`` throws
///    ``StrataError/wouldDeadlock(_:)``, naming the queues. A `performAndWait` cannot
///    throw (it `rethrows` its block's errors), so it keeps waiting; a cycle with a
///    `performAndWait` in it is always resolved by steps 3 and 4, since the waiter before
///    it in the cycle can borrow from it or be rescued by it.
///
/// Every waiting thread waits on a condition of its own, with the registry's mutex, and
/// on each wake-up checks again, in this order: its grant or a finished block, a block to
/// run for a rescue, a borrow or rescue it can make, a deadlock it must report, a gate to
/// send. Every check and transition happens with the registry's mutex held, so two
/// waiters never borrow from each other at once.
///
/// A gate that finds its waiter gone (it borrowed, or was rescued) does nothing, and
/// gives back the admission it took; one that finds it lent or rescuing asks it to send
/// a new gate once it is waiting again (so the waiter keeps no admission it cannot use:
/// the thread it lent to may need that executor).
///
/// Wake-ups are targeted: a grant or a finished block wakes its waiter only; a new wait,
/// and a waiter that goes back to waiting (no longer lent, or done rescuing), wake the
/// waits it waits for and those that wait for it, transitively: only those can find a
/// new borrow, rescue or deadlock. A wait that ends wakes nobody: it makes nothing
/// possible that was not before.
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
///   thread to drain the main queue, then wakes the caller. Where the main thread drains
///   the main queue (a run loop), `sync` needs those two wake-ups too.
///
/// Waits that run inline (the thread holds the executor) never come here, so reentrant
/// calls cost nothing more. Waits Strata cannot see are not part of this: `lock()`
/// blocking for a context, or a thread blocked outside Strata.
///
/// A pthread mutex and conditions, not `Synchronization.Mutex`: ThreadSanitizer does not
/// see `Mutex` on Swift 6.3.1 / Linux (see ``LockedValue``), and conditions are needed.
// @unchecked Sendable because `waits` and every mutable property of the waits are read
// and written with `mutex` held; the pthread pointers are set once in init and freed
// once in deinit.
final class SynchronousWaits: @unchecked Sendable {
    /// The one registry.
    static let shared = SynchronousWaits()

    // Because pthread objects must not move once initialised, they live on the heap,
    // allocated here and freed in deinit.
    /// Guards `waits` and every wait's mutable state.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// The waits in progress, in the order they began: a thread's nested waits come
    /// after its outer ones.
    private var waits: [SynchronousWait] = []

    /// An empty registry.
    private init() {
        pthread_mutex_init(mutex, nil)
    }

    /// Destroys the pthread objects.
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    // MARK: Waiting

    /// Registers a wait of the current thread for `executor`, and returns once `job` ran
    /// (on this thread or another), or, for a `.internal` wait only, with a description of
    /// the deadlock it would be part of (`job` did not run).
    ///
    /// `job` runs the caller's block and keeps its outcome; it is not kept after this
    /// returns (a caller may pass a closure made escapable with `withoutActuallyEscaping`).
    func wait(for executor: ContextExecutor, as kind: SynchronousWaitKind, _ job: @escaping () -> Void) -> String? {
        let record = SynchronousWait(target: executor.identity, kind: kind)
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if case .mainQueue = executor { record.job = job }
        waits.append(record)
        wakeConnectedWaits(of: record)
        while true {
            switch record.state {
            case .finished:
                leave(record)
                return nil
            case .granted:
                // The gate job claimed the admission for this thread.
                record.state = .running
                record.holdings.append(ExecutorHolding(record.target))
                unlocked {
                    ExecutorOwnership.withHolding(ExecutorHolding(record.target), job)
                    if case .privateQueue(let queue) = executor { queue.admission.release() }
                }
                leave(record)
                return nil
            case .rescuing:
                rescue(for: record)
            case .waiting:
                if let resolution = resolution(for: record, among: activeWaits) {
                    switch resolution {
                    case .borrow(let lender):
                        borrow(from: lender, for: record, job)
                        return nil
                    case .relay(let lender, let relay):
                        run(through: relay, of: lender, for: record, job)
                        return nil
                    case .rescue(let rescuer):
                        rescuer.state = .rescuing
                        rescuer.rescued = record
                        record.state = .delegated
                        pthread_cond_signal(rescuer.wakeup)
                        continue
                    }
                }
                if kind == .internal, let deadlock = deadlock(of: record) {
                    leave(record)
                    return deadlock
                }
                if record.needsGate {
                    record.needsGate = false
                    unlocked { sendGate(for: record, to: executor) }
                    continue
                }
                pthread_cond_wait(record.wakeup, mutex)
            case .delegated, .lent, .running:
                pthread_cond_wait(record.wakeup, mutex)
            }
        }
    }

    /// The number of waits in progress for `target` (by a thread holding `held`, when
    /// given), whatever their state: for tests that wait until a thread is blocked
    /// before they go on.
    func waitCount(for target: ExecutorIdentity, holding held: ExecutorIdentity? = nil) -> Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return waits.count(where: { $0.target === target && (held.map($0.holds) ?? true) })
    }

    /// Runs `body` with the mutex released. Mutex held.
    private func unlocked(_ body: () -> Void) {
        pthread_mutex_unlock(mutex)
        body()
        pthread_mutex_lock(mutex)
    }

    /// Removes `record` for good. Mutex held. Wakes nobody: its thread goes on, which
    /// makes no borrow, rescue or deadlock possible that was not before.
    private func leave(_ record: SynchronousWait) {
        record.state = .finished
        record.job = nil
        record.rescued = nil
        waits.removeAll { $0 === record }
    }

    /// Wakes `record` and every wait connected to it: those it waits for (the holders of
    /// its target, the holders of theirs, and so on) and those that wait for it (whose
    /// target it holds, and so on). A new wait, or one back to waiting, may give exactly
    /// these a borrow, a rescue, or a deadlock to report: a borrow or rescue needs the
    /// lender to wait, transitively, for the borrower, and a deadlock is found by
    /// following what a wait waits for. Mutex held.
    private func wakeConnectedWaits(of record: SynchronousWait) {
        /// `record` and the waits reached from it through `isEdge(from:to:)`.
        func closure(_ isEdge: (SynchronousWait, SynchronousWait) -> Bool) -> [SynchronousWait] {
            var reached = [record]
            var index = 0
            while index < reached.count {
                let current = reached[index]
                index += 1
                for other in waits where isEdge(current, other) && !reached.contains(where: { $0 === other }) {
                    reached.append(other)
                }
            }
            return reached
        }
        let waitedFor = closure { waiter, holder in holder.holds(waiter.target) }
        let waiting = closure { holder, waiter in holder.holds(waiter.target) }
        for waiter in waitedFor + waiting.dropFirst() { pthread_cond_signal(waiter.wakeup) }
    }

    /// Runs `record`'s block on its own thread, on the private executor it borrows from
    /// `lender`, which stays lent meanwhile. Mutex held; leaves `record`.
    private func borrow(from lender: SynchronousWait, for record: SynchronousWait, _ job: () -> Void) {
        lender.state = .lent
        record.state = .running
        record.holdings.append(ExecutorHolding(record.target))
        unlocked { ExecutorOwnership.withHolding(ExecutorHolding(record.target), job) }
        lender.state = .waiting
        leave(record)
        wakeConnectedWaits(of: lender)
    }

    /// Runs `record`'s block on the main queue through `relay`, the parked job of the
    /// main-queue lock `lender` holds off the main queue; `lender` stays lent meanwhile.
    /// Mutex held; leaves `record`.
    ///
    /// The relay is idle: only its lock's holder sends it blocks, and that thread is
    /// blocked here (a thread that drains the main queue is rescued from instead, and
    /// that is the relay's own thread when it runs a block).
    private func run(
        through relay: MainQueueRelay, of lender: SynchronousWait, for record: SynchronousWait,
        _ job: () -> Void
    ) {
        lender.state = .lent
        // Counted as running, holding the main queue: the relay's thread runs the block
        // without a wait of its own, so this is what tells the deadlock check that the
        // main queue is in use by a thread that moves, not by the lent waiter.
        record.state = .running
        record.job = nil
        let holdings = record.holdings
        record.holdings.append(ExecutorHolding(record.target))
        unlocked { relay.run(lending: holdings, job) }
        lender.state = .waiting
        leave(record)
        wakeConnectedWaits(of: lender)
    }

    /// `rescuer` (which drains the main queue) runs the main-queue block of the waiter
    /// that asked it to, lending it that waiter's holdings, then waits again. Mutex held.
    private func rescue(for rescuer: SynchronousWait) {
        if let rescued = rescuer.rescued {
            let holdings = rescued.holdings
            var job = rescued.job
            rescued.job = nil
            unlocked {
                if let block = job { ExecutorOwnership.lend(holdings, block) }
                job = nil  // no reference left when the waiter returns
            }
            rescued.state = .finished
            pthread_cond_signal(rescued.wakeup)
        }
        rescuer.rescued = nil
        rescuer.state = .waiting
        wakeConnectedWaits(of: rescuer)
    }

    // MARK: Gates

    /// Sends `record`'s gate to `executor`'s queue (see the type's discussion, steps 1
    /// and 2). Mutex not held.
    private func sendGate(for record: SynchronousWait, to executor: ContextExecutor) {
        switch executor {
        case .privateQueue(let queue):
            queue.submit { [self] in
                queue.admission.claimWaiting(for: record.thread)
                if !grant(record) { queue.admission.release() }
            }
        case .mainQueue:
            // Through a plain `DispatchQueue` value, so the block is not taken for
            // main-actor code (see `ContextExecutor.runAndWait`).
            let main: DispatchQueue = .main
            main.async { [self] in runOnMainQueue(record) }
        }
    }

    /// At the head of a private queue, with the admission claimed for `record`'s thread:
    /// marks it granted when it still waits; otherwise returns false (the caller gives
    /// the admission back). A waiter that is lent or rescuing sends a new gate later.
    private func grant(_ record: SynchronousWait) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        switch record.state {
        case .waiting:
            record.state = .granted
            pthread_cond_signal(record.wakeup)
            return true
        case .lent, .rescuing:
            record.needsGate = true
            return false
        case .granted, .running, .delegated, .finished:
            return false
        }
    }

    /// The main queue's gate block: runs `record`'s block here when it still waits,
    /// lending it the waiter's holdings and the main queue.
    private func runOnMainQueue(_ record: SynchronousWait) {
        pthread_mutex_lock(mutex)
        guard record.state == .waiting else {
            if record.state == .lent { record.needsGate = true }
            pthread_mutex_unlock(mutex)
            return
        }
        record.state = .delegated
        var job = record.job
        record.job = nil
        let holdings = record.holdings + [ExecutorHolding(ExecutorIdentity.mainQueue)]
        pthread_mutex_unlock(mutex)
        if let block = job { ExecutorOwnership.lend(holdings, block) }
        job = nil  // no reference left when the waiter returns
        pthread_mutex_lock(mutex)
        record.state = .finished
        pthread_cond_signal(record.wakeup)
        pthread_mutex_unlock(mutex)
    }

    // MARK: The wait-for graph

    /// A way for a waiter to take its turn now.
    private enum Resolution {
        /// Run on a private executor held by this waiter.
        case borrow(SynchronousWait)
        /// Have this waiter, which drains the main queue, run the block.
        case rescue(SynchronousWait)
        /// Run through the relay of the main-queue lock this waiter holds.
        case relay(SynchronousWait, MainQueueRelay)
    }

    /// The waits whose holdings are in use by their own thread: the innermost wait of
    /// each thread, unless another thread runs its block (its holdings are then lent to
    /// that thread, whose own waits list them). Mutex held.
    private var activeWaits: [SynchronousWait] {
        var threads: [pthread_t] = []
        var active: [SynchronousWait] = []
        for record in waits.reversed() {
            if threads.contains(where: { pthread_equal($0, record.thread) != 0 }) { continue }
            threads.append(record.thread)
            if record.state != .delegated { active.append(record) }
        }
        return active
    }

    /// The blocked waits that wait, transitively, for `record`: their target is held by
    /// `record`, or by a wait already found. Mutex held.
    private func waits(blockedBy record: SynchronousWait, among active: [SynchronousWait]) -> [SynchronousWait] {
        var chain = [record]
        var index = 0
        while index < chain.count {
            let holder = chain[index]
            index += 1
            for other in active where other.isBlocked && holder.holds(other.target) {
                if !chain.contains(where: { $0 === other }) { chain.append(other) }
            }
        }
        return Array(chain.dropFirst())
    }

    /// How `record` (waiting) can take its turn now: a `.user` waiter that holds its
    /// target and waits, transitively, for `record`. Mutex held.
    private func resolution(for record: SynchronousWait, among active: [SynchronousWait]) -> Resolution? {
        let target = record.target
        let isMainQueue = target === ExecutorIdentity.mainQueue
        for lender in waits(blockedBy: record, among: active)
        where lender.state == .waiting && lender.kind == .user && lender.holds(target) {
            if !isMainQueue { return .borrow(lender) }
            if lender.drainsMainQueue { return .rescue(lender) }
            if let relay = lender.holdings.first(where: { $0.identity === target && $0.relay != nil })?.relay {
                return .relay(lender, relay)
            }
        }
        return nil
    }

    /// A description of the deadlock `record` is part of, or nil when its wait may still
    /// end. Mutex held.
    ///
    /// Follows what `record` waits for: the waits that hold its target, what those wait
    /// for, and so on. The wait may end when some executor on the way is held by none of
    /// these waits (a running job, a thread Strata does not see, or nobody), when a
    /// holder is running or rescuing, or when one of the waits found can resolve its own
    /// wait (borrow, rescue). Otherwise nobody involved can ever move. Then `record`
    /// gives up if it is on a cycle of that graph, or if no other `.internal` wait on a
    /// cycle would give up instead (the first one to look does, and the others then wait
    /// for its thread, which runs again).
    private func deadlock(of record: SynchronousWait) -> String? {
        let active = activeWaits
        var found = [record]
        var edges: [[Int]] = []
        var index = 0
        while index < found.count {
            let waiter = found[index]
            index += 1
            let holders = active.filter { $0 !== waiter && $0.holds(waiter.target) }
            guard !holders.isEmpty else { return nil }
            var next: [Int] = []
            for holder in holders {
                guard holder.state == .waiting || holder.state == .lent else { return nil }
                if let known = found.firstIndex(where: { $0 === holder }) {
                    next.append(known)
                } else {
                    next.append(found.count)
                    found.append(holder)
                }
            }
            edges.append(next)
        }
        for waiter in found where waiter.state == .waiting {
            if resolution(for: waiter, among: active) != nil { return nil }
        }
        /// Whether the wait at `start` reaches itself.
        func isOnCycle(_ start: Int) -> Bool {
            var seen = Set<Int>()
            var pending = edges[start]
            while let next = pending.popLast() {
                if next == start { return true }
                if seen.insert(next).inserted { pending += edges[next] }
            }
            return false
        }
        if !isOnCycle(0) {
            let another = found.indices.dropFirst().contains { found[$0].kind == .internal && isOnCycle($0) }
            if another { return nil }
        }
        return "a synchronous request for '\(record.target.label)' would never end: "
            + found.map(\.summary).joined(separator: "; ")
            + "; internal requests never lend the contexts they hold"
    }
}

extension ContextExecutor {
    /// Waits for this executor, which the current thread does not hold, then runs `body`
    /// with exclusive use of it: what ``runAndWait(_:)`` (`.user`) and
    /// ``runInternalRequest(_:)`` (`.internal`) do after their inline paths.
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
