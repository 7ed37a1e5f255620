import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The identity of one serial execution context: a private queue or the main queue.
///
/// A context's executor is known by this object, never by its queue: the identity is
/// the value of ``ExecutorOwnership/queueKey`` on the queue it names, and the entries of
/// the per-thread ownership stack. It holds no reference to its executor, so a queue
/// that carries it as a queue-specific value makes no retain cycle.
package final class ExecutorIdentity: Sendable, CustomStringConvertible {
    /// The label of the queue it names, for messages.
    package let label: String

    /// An identity for the queue labelled `label`.
    package init(label: String) {
        self.label = label
    }

    /// The main queue's identity, registered on `DispatchQueue.main` the first time it
    /// is read. Swift initialises a static once and atomically, so the queue-specific
    /// value is set exactly once, before anyone can compare against it.
    package static let mainQueue: ExecutorIdentity = {
        let identity = ExecutorIdentity(label: "main queue")
        DispatchQueue.main.setSpecific(key: ExecutorOwnership.queueKey, value: identity)
        return identity
    }()

    /// The label.
    package var description: String { label }
}

/// One entry of the per-thread ownership stack: an executor the thread holds, and, for
/// a main-queue lock taken off the main queue, the relay that runs blocks there.
package struct ExecutorHolding {
    /// The executor held.
    package let identity: ExecutorIdentity
    /// The job parked on the main queue for a ``ContextLock`` held off the main queue:
    /// blocks for the main queue go through it. Nil for every other holding.
    package let relay: MainQueueRelay?

    /// A plain holding of `identity`.
    package init(_ identity: ExecutorIdentity, relay: MainQueueRelay? = nil) {
        self.identity = identity
        self.relay = relay
    }
}

/// Names one entry pushed on a thread's ownership stack, for its removal.
package struct HoldingToken: Sendable, Hashable {
    /// Unique per thread.
    package let serial: UInt64
}

/// Which executors the current thread holds: the per-thread ownership stack.
///
/// A thread holds an executor while it runs one of its jobs, while it is inside a
/// synchronous `performAndWait` (or internal request) on it, and while it holds its
/// ``ContextLock``. ``PrivateQueueExecutor/checkIsolated()``, the reentrancy of
/// `performAndWait`, and the wait registry (``SynchronousWaits``, which records what a
/// waiting thread holds) consult this stack.
///
/// Why a stack, and why per thread:
/// - A private queue's `performAndWait` from another thread runs its block on the
///   calling thread, once the queue's gate admits it (``SynchronousWaits``); the thread
///   drains no new queue, so only the stack says it holds the executor. Inside a job, a
///   `DispatchQueue.getSpecific` answers the job's queue only, never an executor the
///   thread entered synchronously on the way. In A→B→A (a block on A waits for B, and
///   B's block asks for A) the stack still lists A, so the inner request runs inline:
///   A's block is paused on this very thread, so nothing else can run on A. (With
///   `queue.sync`, which Strata used before, a nested `A.sync` traps in libdispatch:
///   "dispatch_sync called on queue already owned by current thread".)
/// - A `@TaskLocal` cannot do this: `performAndWait` is synchronous and is called from
///   plain threads and dispatch blocks, which have no task, and a task-local value
///   cannot be bound around a block that another thread runs for the caller (the main
///   queue's gate, a rescue, a lock's relay). A thread-local (a pthread key) follows
///   the code that actually runs, and a holder that blocks while another thread works
///   for it lends its stack explicitly (``lend(_:_:)``).
package enum ExecutorOwnership {
    /// The queue-specific key whose value on a queue is that queue's identity.
    package static let queueKey = DispatchSpecificKey<ExecutorIdentity>()

    /// The executor whose queue the current thread is draining right now, if it is one
    /// of Strata's (a private queue, or the main queue).
    package static var currentQueue: ExecutorIdentity? {
        _ = ExecutorIdentity.mainQueue  // registers the main queue's value first
        return DispatchQueue.getSpecific(key: queueKey)
    }

    /// Whether the current thread holds `identity`: it is draining its queue, or the
    /// ownership stack lists it.
    package static func holds(_ identity: ExecutorIdentity) -> Bool {
        currentQueue === identity || stackHolding(identity) != nil
    }

    /// The innermost holding of `identity` on the ownership stack (not the queue the
    /// thread is draining).
    package static func stackHolding(_ identity: ExecutorIdentity) -> ExecutorHolding? {
        guard let stack = existingStack else { return nil }
        return stack.entries.last { $0.holding.identity === identity }?.holding
    }

    /// Everything the current thread holds: its stack and the queue it is draining.
    /// What a thread lends to another that works for it while it waits.
    package static var holdings: [ExecutorHolding] {
        (existingStack?.entries.map(\.holding) ?? []) + unlistedQueue
    }

    /// The queue the current thread drains, as a holding, unless the stack lists it
    /// already (jobs of the main actor are run by the runtime, which pushes nothing).
    /// Empty when the thread drains none of Strata's queues.
    package static var unlistedQueue: [ExecutorHolding] {
        guard let queue = currentQueue, stackHolding(queue) == nil else { return [] }
        return [ExecutorHolding(queue)]
    }

    /// Runs `body` with `holding` pushed on the current thread's stack.
    package static func withHolding<T, E: Error>(
        _ holding: ExecutorHolding, _ body: () throws(E) -> T
    ) throws(E) -> T {
        let token = push(holding)
        defer { remove(token) }
        return try body()
    }

    /// Runs `body` with `holdings` (lent by a thread that waits for this one) pushed on
    /// the current thread's stack. Lending is safe because the lender is blocked until
    /// `body` returns: the two threads never use the lent executors at the same time.
    /// Lenders: a thread whose block the main queue runs (its gate, a rescue by a waiting
    /// main-queue thread, a main-queue lock's relay); see ``SynchronousWaits``.
    package static func lend<T, E: Error>(
        _ holdings: [ExecutorHolding], _ body: () throws(E) -> T
    ) throws(E) -> T {
        guard !holdings.isEmpty else { return try body() }
        let tokens = holdings.map(push)
        defer { for token in tokens.reversed() { remove(token) } }
        return try body()
    }

    /// Pushes `holding` until ``remove(_:)`` is called with the token returned: for a
    /// lock that outlives a call. Entries are removed by token, not from the top, so
    /// scopes and locks may end in any order (a lock taken inside a block and released
    /// after it, an outer lock released inside a block).
    @discardableResult
    package static func push(_ holding: ExecutorHolding) -> HoldingToken {
        let stack = self.stack
        stack.serial &+= 1
        let token = HoldingToken(serial: stack.serial)
        stack.entries.append((token, holding))
        return token
    }

    /// Removes the entry pushed with `token`; false when this thread's stack has none
    /// (the token belongs to another thread, or was removed already).
    @discardableResult
    package static func remove(_ token: HoldingToken) -> Bool {
        guard let stack = existingStack,
              let index = stack.entries.lastIndex(where: { $0.token == token })
        else { return false }
        stack.entries.remove(at: index)
        return true
    }

    // MARK: The thread-local storage

    /// One thread's stack. Only its own thread reads or writes it.
    private final class Stack {
        /// The holdings, innermost last, each with the token it was pushed with.
        var entries: [(token: HoldingToken, holding: ExecutorHolding)] = []
        /// The last token handed out.
        var serial: UInt64 = 0
    }

    // Swift initialises a static exactly once, atomically, so the key is created once.
    // The destructor releases a thread's stack when the thread exits.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<AnyObject>.fromOpaque(pointer).release()
        }
        precondition(status == 0, "Strata: pthread_key_create failed (\(status))")
        return key
    }()

    /// The current thread's stack, if it ever had one.
    private static var existingStack: Stack? {
        guard let pointer = pthread_getspecific(key) else { return nil }
        return Unmanaged<Stack>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// The current thread's stack, created on first use.
    private static var stack: Stack {
        if let stack = existingStack { return stack }
        let stack = Stack()
        pthread_setspecific(key, Unmanaged.passRetained(stack).toOpaque())
        return stack
    }
}
