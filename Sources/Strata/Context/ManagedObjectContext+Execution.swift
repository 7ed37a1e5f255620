internal import StrataExecution

/// `unlock()` was called by a thread that does not hold the lock.
///
/// Misuse of the legacy lock never traps: it throws this instead, so a stray `unlock()`
/// is reported where it happens and changes nothing.
public enum ContextLockError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The calling thread does not hold the lock of the context on the named queue (it
    /// never locked it, already unlocked it as often as it locked it, or another thread
    /// holds it).
    case notHeldByCurrentThread(queue: String)

    /// A sentence describing the error.
    public var description: String {
        switch self {
        case .notHeldByCurrentThread(let queue):
            "unlock() was called on a thread that does not hold the lock of the context on '\(queue)'"
        }
    }
}

// The boundary between the execution layer and the framework: its errors become
// Strata's public ones here.

extension ContextLock {
    /// Releases one level of the lock held by the current thread (``ContextLock/release()``),
    /// reporting misuse as the public ``ContextLockError``.
    @available(*, noasync, message: "unlock() is for threads; use perform in async code")
    func unlock() throws(ContextLockError) {
        do {
            try release()
        } catch {
            throw .notHeldByCurrentThread(queue: error.queue)
        }
    }
}

extension ContextExecutor {
    /// Runs `body` with exclusive use of this executor for an internal request made from
    /// code already holding other contexts (a child's read or save in its parent): see
    /// ``ContextExecutor/runRequest(failingWith:_:)``.
    ///
    /// - Throws: ``StrataError/wouldDeadlock(_:)`` naming the queues involved, without
    ///   running `body`; or what `body` throws.
    func runInternalRequest<T>(_ body: () throws -> T) throws -> T {
        try runRequest(failingWith: { StrataError.wouldDeadlock($0) }, body)
    }
}

// The execution layer schedules the context's blocks: `perform`, the fire-and-forget
// `perform` and `performAndWait` forward to this conformance.
extension ManagedObjectContext: BlockPerformingActor {}
