import Foundation
@testable import Strata
import StrataExecution
import StrataTesting
import Testing

/// The legacy `lock()`, `unlock()`, `tryLock()`. They block threads, so every scenario
/// runs on plain threads (`TestRun`) under a watchdog, scripted with `TestSignal`s.
@Suite("Context lock")
struct ContextLockTests {
    @Test func recursionCountsLikeARecursiveLock() async {
        let probe = Probe.privateQueue()
        let errors = TestBox<[ContextLockError]>([])
        let ran = await runsOnThread {
            probe.lock()
            probe.lock()
            #expect(probe.tryLock())
            #expect(probe.contextLock.isHeldByCurrentThread)
            for _ in 0..<4 {
                do throws(ContextLockError) { try probe.unlock() } catch { errors.value.append(error) }
            }
            #expect(!probe.contextLock.isHeldByCurrentThread)
        }
        #expect(ran)
        #expect(errors.value == [.notHeldByCurrentThread(queue: "strata.context.probe")])
        // Free again: jobs run.
        #expect(await probe.perform { _ in true })
    }

    @Test func unlockFromAThreadThatDoesNotHoldItThrowsAndChangesNothing() async {
        let probe = Probe.privateQueue()
        let locked = TestSignal()
        let tried = TestSignal()
        let owner = TestRun {
            probe.lock()
            locked.signal()
            tried.wait()
            #expect(probe.contextLock.isHeldByCurrentThread, "still held after a stranger's unlock")
            #expect(throws: Never.self) { try probe.unlock() }
        }
        #expect(await signalled(locked))
        let stranger = TestRun {
            #expect(throws: ContextLockError.notHeldByCurrentThread(queue: "strata.context.probe")) {
                try probe.unlock()
            }
            #expect(!probe.tryLock())
            tried.signal()
        }
        #expect(await stranger.joined())
        #expect(await owner.joined())
        let never = TestRun {
            #expect(throws: ContextLockError.self) { try probe.unlock() }
        }
        #expect(await never.joined())
    }

    @Test func theLockingThreadReachesTheContextWithoutAClosure() async {
        let probe = Probe.privateQueue()
        let ran = await runsOnThread {
            probe.lock()
            probe.assumeIsolated { $0.count += 1 }
            probe.performAndWait { $0.count += 1 }  // inline
            try? probe.unlock()
        }
        #expect(ran)
        #expect(await probe.count == 2)
        #expect(await probe.perform { $0.finished } == [PerformedBlock(kind: .performAndWait, isNested: true)])
    }

    @Test func aHeldLockHoldsBackJobsAndOtherThreadsUntilUnlock() async {
        // Timeline:
        //   owner:    lock ─ (locked) ─────────── wait go ─ log 1 ─ unlock
        //   queue:               job: log 2 ── held back ──────────────────── runs
        //   waiter:              performAndWait: log 3 ── blocked ─────────── runs
        let probe = Probe.privateQueue()
        let locked = TestSignal()
        let go = TestSignal()
        let owner = TestRun {
            probe.lock()
            locked.signal()
            go.wait()
            probe.assumeIsolated { $0.log.append(1) }
            try? probe.unlock()
        }
        #expect(await signalled(locked))
        let jobRan = TestSignal()
        probe.enqueueBlock { probe in
            probe.log.append(2)
            jobRan.signal()
        }
        let waiterRan = TestSignal()
        let waiter = TestRun {
            probe.performAndWait { $0.log.append(3) }
            waiterRan.signal()
        }
        #expect(!(await signalled(jobRan, seconds: 0.3)), "a job ran while the lock was held")
        #expect(!(await signalled(waiterRan, seconds: 0.1)), "performAndWait ran while the lock was held")
        go.signal()
        #expect(await owner.joined())
        #expect(await waiter.joined())
        #expect(await signalled(jobRan))
        #expect(await probe.log == [1, 2, 3])
    }

    @Test func lockWaitsForTheJobThatIsRunning() async {
        let probe = Probe.privateQueue()
        let release = TestSignal()
        let blocking = TestSignal()
        probe.enqueueBlock { probe in
            blocking.signal()
            release.wait()
            probe.log.append(1)
        }
        #expect(await signalled(blocking))
        let acquired = TestSignal()
        let locker = TestRun {
            probe.lock()
            acquired.signal()
            probe.assumeIsolated { $0.log.append(2) }
            try? probe.unlock()
        }
        #expect(!(await signalled(acquired, seconds: 0.3)), "lock() returned while a job ran")
        release.signal()
        #expect(await locker.joined())
        #expect(await probe.log == [1, 2])
    }

    @Test func tryLockNeverBlocks() async {
        let probe = Probe.privateQueue()
        let results = TestBox<[Bool]>([])
        // Idle: succeeds.
        let idle = await runsOnThread {
            results.value.append(probe.tryLock())
            try? probe.unlock()
        }
        #expect(idle)
        // A job running: fails at once.
        let release = TestSignal()
        let blocking = TestSignal()
        probe.enqueueBlock { _ in
            blocking.signal()
            release.wait()
        }
        #expect(await signalled(blocking))
        let busy = await runsOnThread { results.value.append(probe.tryLock()) }
        #expect(busy)
        release.signal()
        // Inside a block of the context: the thread already holds it.
        let inside = await runsOnThread {
            probe.performAndWait { _ in
                results.value.append(probe.tryLock())
                results.value.append((try? probe.unlock()) != nil)
            }
        }
        #expect(inside)
        #expect(results.value == [true, false, true, true])
    }

    @Test func aLockTakenInsideABlockOutlivesTheBlock() async {
        // Timeline:
        //   owner:  performAndWait { lock } ─ (locked) ─ wait go ─ log 1 ─ unlock
        //   queue:                             job: log 2 ── held back ─────────── runs
        let probe = Probe.privateQueue()
        let locked = TestSignal()
        let go = TestSignal()
        let owner = TestRun {
            probe.performAndWait { _ in probe.lock() }
            locked.signal()
            go.wait()
            probe.assumeIsolated { $0.log.append(1) }
            try? probe.unlock()
        }
        #expect(await signalled(locked))
        let jobRan = TestSignal()
        probe.enqueueBlock { probe in
            probe.log.append(2)
            jobRan.signal()
        }
        #expect(!(await signalled(jobRan, seconds: 0.3)), "a job ran while the lock was held")
        go.signal()
        #expect(await owner.joined())
        #expect(await signalled(jobRan))
        #expect(await probe.log == [1, 2])
    }

    @Test func locksAndBlocksMayEndInAnyOrder() async {
        // A lock on B taken inside a block of A outlives that block; a lock on A taken
        // before a block of B is released inside it. The ownership stack follows.
        let a = Probe.privateQueue("a")
        let b = Probe.privateQueue("b")
        let ran = await runsOnThread(seconds: 30) {
            a.performAndWait { _ in b.lock() }
            #expect(b.contextLock.isHeldByCurrentThread)
            #expect(!a.executor.isHeldByCurrentThread)
            b.assumeIsolated { $0.count += 1 }
            a.lock()
            b.performAndWait { _ in
                #expect(throws: Never.self) { try a.unlock() }
            }
            #expect(!a.executor.isHeldByCurrentThread)
            #expect(b.executor.isHeldByCurrentThread)
            #expect(throws: Never.self) { try b.unlock() }
            #expect(!b.executor.isHeldByCurrentThread)
        }
        #expect(ran, "deadlock (watchdog)")
        #expect(await a.perform { _ in true })
        #expect(await b.perform { $0.count } == 1)
    }

    @Test func contentionFromSeveralThreadsKeepsEveryBlockExclusive() async {
        let probe = Probe.privateQueue()
        let successes = TestBox(0)
        let trySuccesses = (0..<2).map { _ in TestBox(0) }
        var threads = (0..<4).map { _ in
            TestRun {
                for round in 0..<200 {
                    probe.lock()
                    if round.isMultiple(of: 3) { probe.lock() }  // recursion under contention
                    probe.assumeIsolated { $0.enterAndCount() }
                    if round.isMultiple(of: 3) { try? probe.unlock() }
                    try? probe.unlock()
                }
            }
        }
        threads += (0..<2).map { _ in
            TestRun {
                for _ in 0..<200 { probe.performAndWait { $0.enterAndCount() } }
            }
        }
        threads += trySuccesses.map { mine in
            TestRun {
                for _ in 0..<200 where probe.tryLock() {
                    probe.assumeIsolated { $0.enterAndCount() }
                    try? probe.unlock()
                    mine.value += 1
                }
            }
        }
        for _ in 0..<200 {
            probe.enqueueBlock { $0.enterAndCount() }
        }
        for thread in threads {
            #expect(await thread.joined(), "deadlock (watchdog)")
        }
        successes.value = trySuccesses.map(\.value).reduce(0, +)
        let (count, overlaps) = await probe.perform(schedule: .enqueued) { ($0.count, $0.overlaps) }
        #expect(count == 800 + 400 + 200 + successes.value)
        #expect(overlaps == 0)
    }

    @Test func codeRunningForTheOwnerMayLockWhileTheOwnerWaits() async {
        // The owner of A's lock also holds the main queue's lock, so its main-queue
        // blocks run on the main queue's thread through the parked job, with A lent to
        // that thread. There, A's lock nests (it runs for the owner) and cannot release
        // the owner's own hold.
        let a = Probe.privateQueue("a")
        let main = Probe.mainQueue()
        let ownerThread = TestBox<pthread_t?>(nil)
        let blockThread = TestBox<pthread_t?>(nil)
        let ran = await runsOnThread(seconds: 30) {
            ownerThread.value = pthread_self()
            a.lock()
            main.lock()
            main.performAndWait { _ in
                blockThread.value = pthread_self()
                a.lock()
                a.assumeIsolated { $0.count += 1 }
                #expect(throws: Never.self) { try a.unlock() }
                #expect(throws: ContextLockError.self) { try a.unlock() }
            }
            #expect(a.contextLock.isHeldByCurrentThread)
            try? main.unlock()
            try? a.unlock()
        }
        #expect(ran, "deadlock (watchdog)")
        if let owner = ownerThread.value, let block = blockThread.value {
            #expect(pthread_equal(owner, block) == 0, "the block ran on the owner's thread")
        }
        #expect(await a.count == 1)
    }

    // MARK: Main queue

    @Test func aThreadHoldingTheMainQueueLockRunsBlocksThroughTheParkedJob() async {
        // Timeline:
        //   owner:       lock (parks a job on the main queue) ─ performAndWait × 2 ─ wait go ─ unlock
        //   main queue:  [parked job runs the owner's blocks ........................] job: log 3
        let probe = Probe.mainQueue()
        let locked = TestSignal()
        let go = TestSignal()
        let owner = TestRun {
            probe.lock()
            #expect(probe.tryLock())  // recursion
            try? probe.unlock()
            probe.performAndWait { probe in
                MainActor.assumeIsolated {}
                probe.log.append(1)
            }
            locked.signal()
            go.wait()
            probe.performAndWait { $0.log.append(2) }
            try? probe.unlock()
        }
        #expect(await signalled(locked))
        let jobRan = TestSignal()
        probe.enqueueBlock { probe in
            probe.log.append(3)
            jobRan.signal()
        }
        let stranger = await runsOnThread {
            // Off the main queue, and the lock is held: fails without waiting.
            #expect(!probe.tryLock())
        }
        #expect(stranger)
        #expect(!(await signalled(jobRan, seconds: 0.3)), "a main-queue job ran while the lock was held")
        go.signal()
        #expect(await owner.joined(), "deadlock (watchdog)")
        #expect(await signalled(jobRan))
        #expect(await probe.perform { $0.log } == [1, 2, 3])
        #expect(await probe.perform { $0.finished.prefix(2).map(\.isNested) } == [true, true])
    }

    @MainActor @Test func onTheMainQueueTheLockOnlyCounts() {
        let probe = Probe.mainQueue()
        lockAndUnlockOnTheMainQueue(probe)
    }

    @Test func offTheMainQueueTryLockFailsUnlessHeld() async {
        let probe = Probe.mainQueue()
        let ran = await runsOnThread {
            #expect(!probe.tryLock())
            #expect(throws: ContextLockError.self) { try probe.unlock() }
        }
        #expect(ran)
    }
}

/// On the main queue: lock and tryLock succeed at once and count; the extra unlock throws.
private func lockAndUnlockOnTheMainQueue(_ probe: Probe) {
    probe.lock()
    #expect(probe.tryLock())
    #expect(probe.contextLock.isHeldByCurrentThread)
    probe.performAndWait { $0.count += 1 }
    #expect(throws: Never.self) { try probe.unlock() }
    #expect(throws: Never.self) { try probe.unlock() }
    #expect(throws: ContextLockError.self) { try probe.unlock() }
    #expect(!probe.contextLock.isHeldByCurrentThread)
}
