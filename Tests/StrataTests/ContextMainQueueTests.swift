import Foundation
@testable import Strata
import StrataTesting
import Testing

/// The main-queue flavour: a probe on `MainActor.sharedUnownedExecutor`. Under Swift
/// Testing the main queue is drained by worker threads (`dispatchMain()`), so none of
/// this relies on `Thread.isMainThread`.
@Suite("Context main queue")
struct ContextMainQueueTests {
    @MainActor @Test func mainActorCodeIsOnTheMainQueueContext() {
        let probe = Probe.mainQueue()
        #expect(probe.executor.isCurrentQueue)
        #expect(probe.executor.isHeldByCurrentThread)
        // Direct access, as for Core Data's main-queue contexts on the main thread.
        probe.assumeIsolated { $0.count += 1 }
        #expect(probe.assumeIsolated { $0.count } == 1)
    }

    @MainActor @Test func performAndWaitRunsInlineOnTheMainActor() {
        let probe = Probe.mainQueue()
        let value = probe.performAndWait { probe in
            probe.count += 1
            return probe.performAndWait { probe in
                probe.count += 1
                return probe.count
            }
        }
        #expect(value == 2)
        #expect(probe.assumeIsolated { $0.finished.map(\.isNested) } == [true, true])
    }

    @MainActor @Test func immediateIsInlineAndEnqueuedWaitsOnTheMainActor() async {
        let probe = Probe.mainQueue()
        probe.enqueueBlock { $0.log.append(3) }  // DispatchQueue.main.async
        await probe.perform { $0.log.append(1) }  // inline: before 3
        probe.performAndWait { $0.log.append(2) }  // inline too
        await probe.perform(schedule: .enqueued) { $0.log.append(4) }  // after 3
        #expect(probe.performAndWait { $0.log } == [1, 2, 3, 4])
    }

    @Test func fireAndForgetAndAwaitedBlocksShareOneOrder() async {
        let probe = Probe.mainQueue()
        for index in stride(from: 0, to: 200, by: 2) {
            probe.enqueueBlock { $0.log.append(index) }
            await probe.perform { $0.log.append(index + 1) }
        }
        #expect(await probe.perform(schedule: .enqueued) { $0.log } == Array(0..<200))
    }

    @Test func fireAndForgetFromAThreadIsFIFO() async {
        let probe = Probe.mainQueue()
        let scheduled = await runsOnThread {
            for index in 0..<500 {
                probe.perform { probe in
                    MainActor.assumeIsolated {}
                    probe.log.append(index)
                }
            }
        }
        #expect(scheduled)
        #expect(await probe.perform(schedule: .enqueued) { $0.log } == Array(0..<500))
    }

    @Test func blocksFromATaskHopToTheMainActor() async {
        let probe = Probe.mainQueue()
        let onMain = await probe.perform { probe in
            MainActor.assumeIsolated {}
            probe.count += 1
            return probe.executor.isCurrentQueue
        }
        #expect(onMain)
        #expect(await probe.perform(schedule: .enqueued) { $0.count } == 1)
    }

    @Test func backgroundThreadsPerformAndWaitOnTheMainQueue() async {
        let probe = Probe.mainQueue()
        let threads = (0..<4).map { _ in
            TestRun {
                for _ in 0..<250 {
                    probe.performAndWait { probe in
                        MainActor.assumeIsolated {}
                        probe.enterAndCount()
                    }
                }
            }
        }
        for thread in threads {
            #expect(await thread.joined(), "deadlock (watchdog)")
        }
        #expect(await probe.perform { $0.count } == 1000)
        #expect(await probe.perform { $0.overlaps } == 0)
    }

    @Test func chainsFromAThreadThroughTheMainQueue() async {
        // private → main → private → main: the main queue's block may run on another
        // thread, which borrows the caller's holdings.
        let main = Probe.mainQueue()
        let a = Probe.privateQueue("a")
        let ran = await runsOnThread(seconds: 30) {
            a.performAndWait { a in
                a.count += 1
                main.performAndWait { main in
                    MainActor.assumeIsolated {}
                    main.count += 1
                    a.performAndWait { a in
                        a.count += 1
                        main.performAndWait { $0.count += 1 }
                    }
                    a.assumeIsolated { $0.count += 1 }
                }
            }
        }
        #expect(ran, "deadlock (watchdog)")
        #expect(await a.count == 3)
        #expect(await main.perform { $0.count } == 2)
    }

    @MainActor @Test func chainsFromTheMainActorThroughAPrivateQueue() async {
        // main → private → main: inside the private queue's `sync` block the thread still
        // drains the main queue (libdispatch's check passes), and the ownership stack
        // lists it.
        let main = Probe.mainQueue()
        let a = Probe.privateQueue("a")
        let finished = await runsOnMainQueue(seconds: 30) {
            main.performAndWait { main in
                main.count += 1
                a.performAndWait { a in
                    a.count += 1
                    main.performAndWait { main in
                        MainActor.assumeIsolated {}
                        main.count += 1
                    }
                }
            }
        }
        #expect(finished, "deadlock (watchdog)")
        #expect(main.performAndWait { $0.count } == 2)
        #expect(await a.count == 1)
    }

    @Test func chainsFromAPrivateJobThroughTheMainQueue() async {
        let main = Probe.mainQueue()
        let a = Probe.privateQueue("a")
        let finished = await finishes {
            await a.chainThroughMainQueue(main)
        }
        #expect(finished, "deadlock (watchdog)")
        #expect(await a.count == 2)
        #expect(await main.perform { $0.count } == 1)
    }
}

extension Probe {
    /// In a job of this private actor: private → main → private.
    func chainThroughMainQueue(_ main: Probe) {
        count += 1
        main.performAndWait { main in
            MainActor.assumeIsolated {}
            main.count += 1
            self.performAndWait { $0.count += 1 }
        }
    }
}
