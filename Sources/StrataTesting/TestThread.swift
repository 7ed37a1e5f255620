import Foundation

/// Runs a closure on a new OS thread (not a task): for tests that need real threads,
/// such as LMDB's one-writer-per-thread rule. `join()` waits for it.
///
/// ```swift
/// let writer = TestThread { try? env.write { txn in … } }
/// #expect(writer.join())
/// ```
// @unchecked Sendable because `done` is a semaphore and the body runs once.
public final class TestThread: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)

    /// Starts `body` on a new thread at once.
    public init(_ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [done] in
            body()
            done.signal()
        }
        thread.start()
    }

    /// Waits for the body to finish; false when it has not after `seconds`.
    @discardableResult
    public func join(seconds: Double = 60) -> Bool {
        done.wait(timeout: .now() + seconds) == .success
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
