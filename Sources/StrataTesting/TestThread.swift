import Foundation
internal import StrataLocks

/// Runs a closure on a new OS thread (not a task): for tests that need real threads,
/// such as LMDB's one-writer-per-thread rule. `join()` waits for it.
///
/// ```swift
/// let writer = TestThread { try? env.write { txn in … } }
/// #expect(writer.join())
/// ```
// @unchecked Sendable because `finished` is read and written with `lock` held only, and
// the body runs once.
public final class TestThread: @unchecked Sendable {
    /// Guards `finished`; `join` sleeps on its condition.
    private let lock = ConditionLock()
    /// Whether the body returned. Guarded by `lock`.
    private var finished = false

    /// Starts `body` on a new thread at once.
    public init(_ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [self] in
            body()
            lock.withLock {
                finished = true
                lock.broadcast()
            }
        }
        thread.start()
    }

    /// Waits for the body to finish; false when it has not after `seconds`.
    @discardableResult
    public func join(seconds: Double = 60) -> Bool {
        let deadline = ConditionLock.now() + UInt64(max(0, seconds) * 1_000_000_000)
        return lock.withLock {
            while !finished {
                if !lock.wait(untilNanoseconds: deadline) { return finished }
            }
            return true
        }
    }
}

/// A value written on one thread and read on another once a ``TestThread`` was joined
/// (or another handshake ordered the accesses).
// @unchecked Sendable because the test orders every access (joins, semaphores).
public final class TestBox<Value>: @unchecked Sendable {
    /// The value.
    public var value: Value
    /// A box holding `value`.
    public init(_ value: Value) { self.value = value }
}
