import Foundation
@testable import Strata
import StrataExecution
import StrataTesting
import Testing

@Suite("Context perform")
struct ContextPerformTests {
    @Test func fireAndForgetBlocksRunInTheOrderTheyWereScheduled() async {
        let probe = Probe.privateQueue()
        let scheduled = await runsOnThread {
            for index in 0..<500 {
                probe.perform { $0.log.append(index) }
            }
        }
        #expect(scheduled)
        // .enqueued from outside: behind all 500.
        let log = await probe.perform(schedule: .enqueued) { $0.log }
        #expect(log == Array(0..<500))
    }

    @Test func fireAndForgetAndAwaitedBlocksShareOneOrder() async {
        // One caller alternates: fire-and-forget k, awaited k+1, ... The awaited ones
        // come from outside the actor, so they queue behind the fire-and-forget ones.
        let probe = Probe.privateQueue()
        for index in stride(from: 0, to: 200, by: 2) {
            probe.enqueueBlock { $0.log.append(index) }
            await probe.perform { $0.log.append(index + 1) }
        }
        #expect(await probe.log == Array(0..<200))
    }

    @Test func immediateRunsInlineWhenAlreadyIsolated() async {
        let probe = Probe.privateQueue()
        #expect(await probe.immediateScenario() == [1, 2, 3])
    }

    @Test func enqueuedRunsAfterEverythingAlreadyScheduledEvenFromInside() async {
        let probe = Probe.privateQueue()
        #expect(await probe.enqueuedScenario() == [1, 2, 3, 4])
    }

    @Test func enqueuedFromOutsideRunsAfterQueuedBlocks() async {
        // Timeline (one private queue):
        //   gate:     [blocked job .......... released]
        //   queued:                                     A  B
        //   enqueued:                                         C   (awaited from outside)
        let probe = Probe.privateQueue()
        let release = TestSignal()
        let blocking = TestSignal()
        probe.enqueueBlock { _ in
            blocking.signal()
            release.wait()
        }
        #expect(await signalled(blocking))
        probe.enqueueBlock { $0.log.append(1) }
        probe.enqueueBlock { $0.log.append(2) }
        let waiter = Task { await probe.perform(schedule: .enqueued) { $0.log.append(3); return $0.log } }
        release.signal()
        #expect(await waiter.value == [1, 2, 3])
    }

    @Test func everyBlockEndsWithTheHookAlsoWhenItThrows() async {
        let probe = Probe.privateQueue()
        await probe.perform { $0.count += 1 }
        await #expect(throws: ProbeError(code: 7)) {
            try await probe.perform { _ in throw ProbeError(code: 7) }
        }
        let scheduled = await runsOnThread {
            probe.perform { $0.count += 1 }
            probe.performAndWait { probe in
                probe.performAndWait { $0.count += 1 }
            }
        }
        #expect(scheduled)
        await probe.nestedPerformFromInside()
        let finished = await probe.perform(schedule: .enqueued) { $0.finished }
        #expect(finished == [
            PerformedBlock(kind: .perform, isNested: false),
            PerformedBlock(kind: .perform, isNested: false),  // the one that threw
            PerformedBlock(kind: .performLater, isNested: false),
            PerformedBlock(kind: .performAndWait, isNested: true),  // the inner one first
            PerformedBlock(kind: .performAndWait, isNested: false),
            PerformedBlock(kind: .perform, isNested: true),  // .immediate from inside
            PerformedBlock(kind: .perform, isNested: true),  // .enqueued from inside
        ])
    }

    @Test func performRethrowsTheBlocksError() async throws {
        let probe = Probe.privateQueue()
        // A non-throwing block needs no `try`.
        let value = await probe.perform { _ in 42 }
        #expect(value == 42)
        do {
            _ = try await probe.perform(schedule: .enqueued) { _ -> Int in throw ProbeError(code: 1) }
            Issue.record("did not throw")
        } catch let error as ProbeError {
            #expect(error.code == 1)
        }
    }

    @Test func manyTasksPerformingAtOnceLoseNoUpdate() async {
        let probe = Probe.privateQueue()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for index in 0..<250 {
                        await probe.perform(schedule: index.isMultiple(of: 2) ? .immediate : .enqueued) {
                            $0.enterAndCount()
                        }
                    }
                }
            }
        }
        #expect(await probe.count == 2000)
        #expect(await probe.overlaps == 0)
    }

    @Test func aCancelledCallerStillGetsItsBlockRunOnceAndReturns() async {
        // Timeline:
        //   queue:   [blocked job ............ released] [the task's block]
        //   task:       perform ─ waits ─ cancelled ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ returns
        let probe = Probe.privateQueue()
        let release = TestSignal()
        let blocking = TestSignal()
        probe.enqueueBlock { _ in
            blocking.signal()
            release.wait()
        }
        #expect(await signalled(blocking))
        let started = TestSignal()
        let task = Task {
            started.signal()
            return await probe.perform { probe in
                probe.count += 1
                return Task.isCancelled
            }
        }
        #expect(await signalled(started))
        task.cancel()
        release.signal()
        let finished = await finishes { _ = await task.value }
        #expect(finished)
        #expect(await task.value, "the block saw the cancellation")
        // The block ran or did not, and nothing hangs: here it always runs, once.
        #expect(await probe.perform(schedule: .enqueued) { $0.count } == 1)
    }
}

extension Probe {
    /// Inside the actor: a block scheduled for later, then an `.immediate` perform, which
    /// runs inline (before the scheduled block).
    func immediateScenario() async -> [Int] {
        log = []
        // In async code the async `perform` overload wins over the fire-and-forget one,
        // so this calls the machinery directly.
        enqueueBlock { $0.log.append(3) }
        log.append(1)
        await perform { $0.log.append(2) }
        await perform(schedule: .enqueued) { _ in }
        return log
    }

    /// Inside the actor: a block scheduled for later, then an `.enqueued` perform, which
    /// waits for it.
    func enqueuedScenario() async -> [Int] {
        log = []
        enqueueBlock { $0.log.append(2) }
        log.append(1)
        await perform(schedule: .enqueued) { $0.log.append(3) }
        log.append(4)
        return log
    }

    /// Inside the actor: one `.immediate` and one `.enqueued` perform.
    func nestedPerformFromInside() async {
        await perform { $0.count += 1 }
        await perform(schedule: .enqueued) { $0.count += 1 }
    }
}
