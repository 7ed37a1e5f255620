import Foundation
@testable import Strata
import StrataExecution
import StrataTesting

/// A small actor on a ``ContextExecutor``, shaped like the context: `perform`,
/// fire-and-forget `perform`, `performAndWait`, all forwarded to
/// ``BlockPerformingActor``.
actor Probe: BlockPerformingActor {
    nonisolated let executor: ContextExecutor
    nonisolated var contextExecutor: ContextExecutor { executor }
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.unownedExecutor }
    /// The legacy lock, as the context will own it.
    nonisolated let contextLock: ContextLock

    /// Incremented by tests.
    var count = 0
    /// Appended to by tests, to check order.
    var log: [Int] = []
    /// Set while a block that checks for overlap runs.
    var isInside = false
    /// How many blocks found another one running (must stay 0).
    var overlaps = 0
    /// Every block the hook saw.
    var finished: [PerformedBlock] = []

    init(_ executor: ContextExecutor) {
        self.executor = executor
        contextLock = ContextLock(executor: executor)
    }

    /// A probe on a new private queue.
    static func privateQueue(_ name: String = "probe") -> Probe {
        Probe(.privateQueue(named: name))
    }

    /// A probe on the main queue.
    static func mainQueue() -> Probe {
        Probe(.mainQueue)
    }

    nonisolated(nonsending)
    func perform<T: Sendable>(
        schedule: BlockSchedule = .immediate, _ body: (isolated Probe) throws -> T
    ) async rethrows -> T {
        try await performBlock(schedule: schedule, body)
    }

    nonisolated func perform(_ body: @escaping @Sendable (isolated Probe) -> Void) {
        enqueueBlock(body)
    }

    nonisolated func performAndWait<T: Sendable>(_ body: (isolated Probe) throws -> T) rethrows -> T {
        try performBlockAndWait(body)
    }

    @available(*, noasync)
    nonisolated func lock() { contextLock.lock() }

    @available(*, noasync)
    nonisolated func tryLock() -> Bool { contextLock.tryLock() }

    @available(*, noasync)
    nonisolated func unlock() throws(ContextLockError) { try contextLock.unlock() }

    func blockDidFinish(_ block: PerformedBlock) {
        finished.append(block)
    }

    /// Counts one block, noting whether another one was running at the same time.
    func enterAndCount() {
        if isInside { overlaps += 1 }
        isInside = true
        count += 1
        isInside = false
    }
}

/// An actor that takes its `unownedExecutor` from ``BlockPerformingActor``'s extension.
actor DefaultExecutorProbe: BlockPerformingActor {
    nonisolated let contextExecutor: ContextExecutor = .privateQueue(named: "default")

    func isOnItsQueue() -> Bool {
        contextExecutor.isCurrentQueue
    }
}

/// A test failure that a block throws.
struct ProbeError: Error, Equatable {
    let code: Int
}

/// A counting semaphore that ThreadSanitizer understands, for the tests' handshakes.
///
/// On Swift 6.3.1 / Linux TSan sees no happens-before edge through
/// `DispatchSemaphore.wait(timeout:)` (measured: a value written before `signal()` and
/// read after a timed wait is reported as a race), and the watchdogs need timed waits.
/// `NSCondition` is a pthread mutex and condition, which TSan intercepts.
// @unchecked Sendable because `count` is only read and written with `condition` locked.
final class TestSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var count = 0

    /// Wakes one waiter (or lets the next wait pass).
    func signal() {
        condition.lock()
        count += 1
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for a signal.
    func wait() {
        condition.lock()
        while count == 0 { condition.wait() }
        count -= 1
        condition.unlock()
    }

    /// Waits for a signal for up to `seconds`; whether one came.
    func wait(seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while count == 0 {
            if !condition.wait(until: deadline) { break }
        }
        guard count > 0 else { return false }
        count -= 1
        return true
    }

    /// Takes and releases the lock: after a wait that succeeded on another thread, this
    /// makes what the signalling thread did before `signal()` visible to TSan here. A
    /// continuation resumed before its task suspended carries no happens-before edge
    /// TSan can see on 6.3.1 (measured), and ``signalled(_:seconds:)`` hands the
    /// result back through one.
    func synchronize() {
        condition.lock()
        condition.unlock()
    }
}

/// Whether `signal` is signalled within `seconds`, waited for on a helper thread so that
/// no pooled thread blocks.
func signalled(_ signal: TestSignal, seconds: Double = 60) async -> Bool {
    let received = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread { continuation.resume(returning: signal.wait(seconds: seconds)) }.start()
    }
    signal.synchronize()
    return received
}

/// A body running on a new OS thread (a ``TestThread``), with a completion that TSan
/// sees and that a test awaits under a watchdog, so a deadlock fails the test instead
/// of hanging it.
final class TestRun: Sendable {
    private let finished = TestSignal()

    /// Starts `body` on a new thread at once.
    init(_ body: @escaping @Sendable () -> Void) {
        let finished = finished
        _ = TestThread {
            body()
            finished.signal()
        }
    }

    /// Whether the body finished within `seconds`.
    func joined(seconds: Double = 60) async -> Bool {
        await signalled(finished, seconds: seconds)
    }
}

/// Whether `thread` finishes within `seconds`, waited for on a helper thread so that no
/// pooled thread blocks. Kept for tests written against it; prefer ``TestRun``, whose
/// completion TSan sees (`TestThread.join(seconds:)` is a timed `DispatchSemaphore` wait,
/// through which TSan sees no happens-before edge on 6.3.1).
func joins(_ thread: TestThread, seconds: Double = 60) async -> Bool {
    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread { continuation.resume(returning: thread.join(seconds: seconds)) }.start()
    }
}

/// Runs `body` on a new thread; whether it finished within `seconds` (the watchdog).
func runsOnThread(seconds: Double = 60, _ body: @escaping @Sendable () -> Void) async -> Bool {
    await TestRun(body).joined(seconds: seconds)
}

/// Runs `body` on the main queue, sent with `DispatchQueue.main.async`; whether it
/// finished within `seconds` (the watchdog). Unlike a main-actor task started with
/// ``finishes(seconds:_:)``, it needs no pooled thread to start, so tests that block the
/// cooperative pool (two threads on two cores) cannot delay it.
func runsOnMainQueue(seconds: Double = 60, _ body: @escaping @MainActor @Sendable () -> Void) async -> Bool {
    let done = TestSignal()
    DispatchQueue.main.async {
        MainActor.assumeIsolated { body() }
        done.signal()
    }
    return await signalled(done, seconds: seconds)
}

/// Runs `operation` in a task; whether it finished within `seconds` (the watchdog).
///
/// A task needs pooled threads to start and to go on, and in the full suite other tests
/// hold the cooperative pool's two threads (two cores) for many seconds at a time: the
/// default watchdog allows for that, and still fails a scenario that deadlocks.
func finishes(seconds: Double = 120, _ operation: @escaping @Sendable () async -> Void) async -> Bool {
    let done = TestSignal()
    let task = Task {
        await operation()
        done.signal()
    }
    let finished = await signalled(done, seconds: seconds)
    if !finished { task.cancel() }
    return finished
}
