import Foundation
@testable import Strata
import StrataTesting
import Testing

@Suite("Context performAndWait")
struct ContextPerformAndWaitTests {
    @Test func nestsFiveDeepOnOneContext() async {
        let probe = Probe.privateQueue()
        let depth = TestBox(0)
        let ran = await runsOnThread {
            depth.value = probe.performAndWait { probe in
                probe.count += 1
                return probe.performAndWait { probe in
                    probe.count += 1
                    return probe.performAndWait { probe in
                        probe.count += 1
                        return probe.performAndWait { probe in
                            probe.count += 1
                            return probe.performAndWait { probe in
                                probe.count += 1
                                return probe.count
                            }
                        }
                    }
                }
            }
        }
        #expect(ran)
        #expect(depth.value == 5)
        let nested = await probe.perform { $0.finished.map(\.isNested) }
        #expect(nested == [true, true, true, true, false])
    }

    @Test func runsChainsAcrossContextsFromAPlainThread() async {
        let a = Probe.privateQueue("a")
        let b = Probe.privateQueue("b")
        let c = Probe.privateQueue("c")
        let ran = await runsOnThread(seconds: 30) {
            // A→B→A
            a.performAndWait { a in
                a.count += 1
                b.performAndWait { b in
                    b.count += 1
                    a.performAndWait { $0.count += 1 }
                    a.assumeIsolated { $0.count += 1 }
                }
            }
            // A→B→C→A
            a.performAndWait { _ in
                b.performAndWait { _ in
                    c.performAndWait { c in
                        c.count += 1
                        a.performAndWait { $0.count += 1 }
                        b.performAndWait { $0.count += 1 }
                    }
                }
            }
        }
        #expect(ran, "deadlock (watchdog)")
        #expect(await a.count == 4)
        #expect(await b.count == 2)
        #expect(await c.count == 1)
    }

    @Test func runsChainsAcrossContextsFromTasks() async {
        let a = Probe.privateQueue("a")
        let b = Probe.privateQueue("b")
        let c = Probe.privateQueue("c")
        let finished = await finishes {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        a.performAndWait { _ in
                            b.performAndWait { _ in
                                c.performAndWait { c in
                                    c.count += 1
                                    a.performAndWait { $0.count += 1 }
                                }
                            }
                        }
                    }
                }
            }
        }
        #expect(finished, "deadlock (watchdog)")
        #expect(await a.count == 4)
        #expect(await c.count == 4)
    }

    @Test func runsChainsFromInsideAnActorJob() async {
        // The outer hold is a job of A (pushed by the job runner), not a performAndWait.
        let a = Probe.privateQueue("a")
        let b = Probe.privateQueue("b")
        let finished = await finishes {
            await a.chainThrough(b)
        }
        #expect(finished, "deadlock (watchdog)")
        #expect(await a.count == 2)
        #expect(await b.count == 1)
    }

    @Test func eightThreadsIncrementingAThousandTimesLoseNothing() async {
        let probe = Probe.privateQueue()
        let threads = (0..<8).map { _ in
            TestRun {
                for _ in 0..<1000 {
                    probe.performAndWait { $0.enterAndCount() }
                }
            }
        }
        for thread in threads {
            #expect(await thread.joined())
        }
        #expect(await probe.count == 8000)
        #expect(await probe.overlaps == 0)
    }

    @Test func runsInlineInsideAFireAndForgetBlock() async {
        let probe = Probe.privateQueue()
        let done = TestSignal()
        probe.enqueueBlock { probe in
            probe.performAndWait { $0.count += 1 }
            done.signal()
        }
        #expect(await signalled(done))
        #expect(await probe.count == 1)
    }

    @Test func rethrowsTheBlocksError() async {
        let probe = Probe.privateQueue()
        let caught = TestBox<ProbeError?>(nil)
        let ran = await runsOnThread {
            do {
                try probe.performAndWait { _ in throw ProbeError(code: 3) }
            } catch {
                caught.value = error as? ProbeError
            }
        }
        #expect(ran)
        #expect(caught.value == ProbeError(code: 3))
        // The context is usable afterwards; the hook ran for the failed block too.
        #expect(await probe.perform { $0.finished.count } == 1)
    }

    @Test func waitsForTheJobRunningOnTheQueue() async {
        // Timeline:
        //   queue:   [job: 1 ... released] [performAndWait: 2]
        //   thread:        performAndWait ─ waits ───────────── returns
        let probe = Probe.privateQueue()
        let release = TestSignal()
        let blocking = TestSignal()
        probe.enqueueBlock { probe in
            probe.log.append(1)
            blocking.signal()
            release.wait()
        }
        #expect(await signalled(blocking))
        let waiter = TestRun {
            probe.performAndWait { $0.log.append(2) }
        }
        release.signal()
        #expect(await waiter.joined())
        #expect(await probe.log == [1, 2])
    }
}

extension Probe {
    /// In a job of this actor: A→B→A with performAndWait.
    func chainThrough(_ other: Probe) {
        count += 1
        other.performAndWait { other in
            other.count += 1
            self.performAndWait { $0.count += 1 }
        }
    }
}
