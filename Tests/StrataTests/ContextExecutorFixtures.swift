import Foundation
@testable import Strata
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

/// Whether `thread` finishes within `seconds`, waited for on a helper thread so that no
/// pooled thread blocks (a deadlock fails the test instead of hanging it).
func joins(_ thread: TestThread, seconds: Double = 60) async -> Bool {
    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread { continuation.resume(returning: thread.join(seconds: seconds)) }.start()
    }
}

/// Runs `body` on a new thread; whether it finished within `seconds` (the watchdog).
func runsOnThread(seconds: Double = 60, _ body: @escaping @Sendable () -> Void) async -> Bool {
    await joins(TestThread(body), seconds: seconds)
}

/// Runs `operation` in a task; whether it finished within `seconds` (the watchdog).
func finishes(seconds: Double = 60, _ operation: @escaping @Sendable () async -> Void) async -> Bool {
    let done = DispatchSemaphore(value: 0)
    let task = Task {
        await operation()
        done.signal()
    }
    let finished = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread { continuation.resume(returning: done.wait(timeout: .now() + seconds) == .success) }.start()
    }
    if !finished { task.cancel() }
    return finished
}

/// Whether `semaphore` is signalled within `seconds`, waited for on a helper thread.
func signalled(_ semaphore: DispatchSemaphore, seconds: Double = 60) async -> Bool {
    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread { continuation.resume(returning: semaphore.wait(timeout: .now() + seconds) == .success) }.start()
    }
}
