import Foundation
@testable import Strata
import StrataLocks
import StrataExecution
import StrataTesting
import Testing

/// Synchronous waits that form cycles between threads: `performAndWait` in both
/// directions, and a child's internal request into its parent while the parent's block
/// waits for the child. Each scenario runs on plain threads (and the main queue) under a
/// watchdog, scripted with `TestSignal`s and by watching the wait registry, so that the
/// cycle really forms before the last wait starts.
///
/// Serialized: several of these scenarios park a block on the main queue that waits
/// until its own thread is seen waiting; run at once, in the full suite, one scenario's
/// main-queue block has been seen to keep the main queue from another's for the 20 s of
/// its `eventually`, failing three of them together (CI at de90b54, and locally).
@Suite("Context wait cycles", .serialized)
struct ContextWaitCycleTests {
    // MARK: performAndWait cycles

    @Test func performAndWaitCycleBetweenTwoPrivateContextsCompletes() async {
        // Timeline:
        //   T1:  A { a1 ─ signal ─ B.performAndWait ······ waits ······ { b2 } a3 }
        //   T2:  B { b1 ─ signal ─ (T1 waits) ─ A.performAndWait { a2 } (borrows A) ─ b3 }
        let a = ManagedObjectContext(.privateQueue, name: "cycle.a")
        let b = ManagedObjectContext(.privateQueue, name: "cycle.b")
        let aUse = ExclusiveUse(), bUse = ExclusiveUse()
        let aEntered = TestSignal(), bEntered = TestSignal()
        let t1 = TestRun {
            a.performAndWait { _ in
                aUse.segment()
                aEntered.signal()
                bEntered.wait()
                b.performAndWait { _ in bUse.segment() }
                aUse.segment()
            }
        }
        let t2 = TestRun {
            b.performAndWait { _ in
                bUse.segment()
                bEntered.signal()
                aEntered.wait()
                let blocked = eventually { isWaiting(for: b, holding: a) }
                #expect(blocked)
                a.performAndWait { _ in aUse.segment() }
                bUse.segment()
            }
        }
        #expect(await t1.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect(aUse.entries == 3 && bUse.entries == 3)
        #expect(aUse.overlaps == 0 && bUse.overlaps == 0)
        #expect(aUse.count.value == 3 && bUse.count.value == 3)
    }

    @Test func performAndWaitCycleThroughTheMainQueueCompletes() async {
        // The main queue's block waits for A; A's block waits for the main queue: the
        // main queue's thread runs A's block for it (a rescue), on the main queue.
        let main = ManagedObjectContext(.mainQueue, name: "cycle.main")
        let a = ManagedObjectContext(.privateQueue, name: "cycle.main.a")
        let mainUse = ExclusiveUse(), aUse = ExclusiveUse()
        let aEntered = TestSignal()
        let mainDone = TestSignal()
        DispatchQueue.main.async {
            aEntered.wait()
            main.performAndWait { _ in
                mainUse.segment()
                a.performAndWait { _ in aUse.segment() }
            }
            mainDone.signal()
        }
        let t2 = TestRun {
            a.performAndWait { _ in
                aUse.segment()
                aEntered.signal()
                let blocked = eventually { isWaiting(for: a, holding: nil, mainQueue: true) }
                #expect(blocked)
                main.performAndWait { _ in
                    MainActor.assumeIsolated {}
                    mainUse.segment()
                }
            }
        }
        #expect(await signalled(mainDone, seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect(mainUse.entries == 2 && aUse.entries == 2)
        #expect(mainUse.overlaps == 0 && aUse.overlaps == 0)
    }

    @Test func aThreadHoldingTheMainQueueLockLendsItThroughItsRelay() async {
        // T1 holds the main-queue lock off the main queue (a job parked there) and waits
        // for A; A's block needs the main queue: it runs through T1's parked job.
        let main = ManagedObjectContext(.mainQueue, name: "relay.main")
        let a = ManagedObjectContext(.privateQueue, name: "relay.a")
        let mainUse = ExclusiveUse(), aUse = ExclusiveUse()
        let locked = TestSignal(), aEntered = TestSignal()
        let outcomes = TestBox<[Bool]>([])
        let t1 = TestRun {
            main.lock()
            locked.signal()
            aEntered.wait()
            a.performAndWait { _ in aUse.segment() }
            main.performAndWait { _ in mainUse.segment() }
            try? main.unlock()
        }
        let t2 = TestRun {
            locked.wait()
            a.performAndWait { _ in
                aUse.segment()
                aEntered.signal()
                let blocked = eventually { isWaiting(for: a, holding: nil, mainQueue: true) }
                #expect(blocked)
                // A user wait, then an internal request: both go through the relay.
                main.performAndWait { _ in
                    MainActor.assumeIsolated {}
                    mainUse.segment()
                }
                let ran = Result { () throws in
                    try main.contextExecutor.runInternalRequest {
                        main.assumeIsolated { _ in mainUse.segment() }
                    }
                }
                outcomes.value.append((try? ran.get()) != nil)
            }
        }
        #expect(await t1.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect(outcomes.value == [true])
        #expect(mainUse.entries == 3 && aUse.entries == 2)
        #expect(mainUse.overlaps == 0 && aUse.overlaps == 0)
    }

    // MARK: Internal requests from a child into its parent

    @Test func internalRequestIntoAPrivateParentWaitingForItsPrivateChild() async {
        let parent = ManagedObjectContext(.privateQueue, name: "family.parent")
        let child = ManagedObjectContext(.privateQueue, name: "family.child")
        let scenario = ParentChildScenario()
        let childEntered = TestSignal()
        let parentSide = TestRun {
            childEntered.wait()
            parent.performAndWait { _ in
                scenario.parentUse.segment()
                child.performAndWait { _ in scenario.childUse.segment() }
            }
        }
        let childSide = TestRun {
            child.performAndWait { _ in
                scenario.childUse.segment()
                childEntered.signal()
                let blocked = eventually { isWaiting(for: child, holding: parent) }
                #expect(blocked)
                scenario.upward(into: parent)
            }
        }
        #expect(await parentSide.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await childSide.joined(seconds: 30), "deadlock (watchdog)")
        scenario.expectCompleted()
    }

    @Test func internalRequestIntoAMainQueueParentWaitingForItsPrivateChild() async {
        // The parent's block runs on the main queue and waits for the child; the child's
        // request is run by the main queue's thread while it waits (a rescue).
        let parent = ManagedObjectContext(.mainQueue, name: "family.main-parent")
        let child = ManagedObjectContext(.privateQueue, name: "family.child-of-main")
        let scenario = ParentChildScenario()
        let childEntered = TestSignal()
        let childSide = TestRun {
            child.performAndWait { _ in
                scenario.childUse.segment()
                childEntered.signal()
                let blocked = eventually { isWaiting(for: child, holding: nil, mainQueue: true) }
                #expect(blocked)
                scenario.upward(into: parent, onMainQueue: true)
            }
        }
        let parentSide = await runsOnMainQueue(seconds: 30) {
            childEntered.wait()
            parent.performAndWait { _ in
                scenario.parentUse.segment()
                child.performAndWait { _ in scenario.childUse.segment() }
            }
        }
        #expect(parentSide, "deadlock (watchdog)")
        #expect(await childSide.joined(seconds: 30), "deadlock (watchdog)")
        scenario.expectCompleted()
    }

    @Test func internalRequestFromAMainQueueChildIntoAPrivateParentWaitingForIt() async {
        // The child's block runs on the main queue; the parent's block, on a plain
        // thread, waits for the main queue. The child's request borrows the parent.
        let parent = ManagedObjectContext(.privateQueue, name: "family.parent-of-main")
        let child = ManagedObjectContext(.mainQueue, name: "family.main-child")
        let scenario = ParentChildScenario()
        let childEntered = TestSignal()
        let childDone = TestSignal()
        DispatchQueue.main.async {
            child.performAndWait { _ in
                scenario.childUse.segment()
                childEntered.signal()
                let blocked = eventually { isWaiting(for: nil, holding: parent, mainQueue: true) }
                #expect(blocked)
                scenario.upward(into: parent)
            }
            childDone.signal()
        }
        let parentSide = TestRun {
            childEntered.wait()
            parent.performAndWait { _ in
                scenario.parentUse.segment()
                child.performAndWait { _ in
                    MainActor.assumeIsolated {}
                    scenario.childUse.segment()
                }
            }
        }
        #expect(await signalled(childDone, seconds: 30), "deadlock (watchdog)")
        #expect(await parentSide.joined(seconds: 30), "deadlock (watchdog)")
        scenario.expectCompleted()
    }

    @Test func threeThreadCycleEndingInAnInternalRequestCompletes() async {
        // T1 holds A and waits for B; T2 holds B and waits for C; T3 holds C and makes
        // an internal request for A.
        let a = ManagedObjectContext(.privateQueue, name: "three.a")
        let b = ManagedObjectContext(.privateQueue, name: "three.b")
        let c = ManagedObjectContext(.privateQueue, name: "three.c")
        let uses = (a: ExclusiveUse(), b: ExclusiveUse(), c: ExclusiveUse())
        let entered = (a: TestSignal(), b: TestSignal(), c: TestSignal())
        let request = TestBox<Result<Void, any Error>?>(nil)
        let t1 = TestRun {
            a.performAndWait { _ in
                uses.a.segment()
                entered.a.signal()
                entered.b.wait()
                b.performAndWait { _ in uses.b.segment() }
            }
        }
        let t2 = TestRun {
            b.performAndWait { _ in
                uses.b.segment()
                entered.b.signal()
                entered.c.wait()
                c.performAndWait { _ in uses.c.segment() }
            }
        }
        let t3 = TestRun {
            c.performAndWait { _ in
                uses.c.segment()
                entered.c.signal()
                entered.a.wait()
                let blocked = eventually { isWaiting(for: b, holding: a) && isWaiting(for: c, holding: b) }
                #expect(blocked)
                request.value = Result { () throws in
                    try a.contextExecutor.runInternalRequest { a.assumeIsolated { _ in uses.a.segment() } }
                }
            }
        }
        #expect(await t1.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await t3.joined(seconds: 30), "deadlock (watchdog)")
        #expect((try? request.value?.get()) != nil)
        #expect(uses.a.entries == 2 && uses.b.entries == 2 && uses.c.entries == 2)
        #expect(uses.a.overlaps + uses.b.overlaps + uses.c.overlaps == 0)
    }

    @Test func internalRequestsThatCanOnlyDeadlockThrow() async {
        // T1 holds A and makes an internal request for B; T2 holds B and makes one for
        // A. Neither may lend what it holds: the second request throws, naming both
        // queues, and the first one then runs once T2's block ends.
        let a = ManagedObjectContext(.privateQueue, name: "deadlock.a")
        let b = ManagedObjectContext(.privateQueue, name: "deadlock.b")
        let aUse = ExclusiveUse(), bUse = ExclusiveUse()
        let aEntered = TestSignal(), bEntered = TestSignal()
        let first = TestBox<Result<Void, any Error>?>(nil)
        let second = TestBox<Result<Void, any Error>?>(nil)
        let t1 = TestRun {
            a.performAndWait { _ in
                aEntered.signal()
                bEntered.wait()
                first.value = Result { () throws in
                    try b.contextExecutor.runInternalRequest { b.assumeIsolated { _ in bUse.segment() } }
                }
            }
        }
        let t2 = TestRun {
            b.performAndWait { _ in
                bEntered.signal()
                aEntered.wait()
                let blocked = eventually { isWaiting(for: b, holding: a) }
                #expect(blocked)
                second.value = Result { () throws in
                    try a.contextExecutor.runInternalRequest { a.assumeIsolated { _ in aUse.segment() } }
                }
            }
        }
        #expect(await t1.joined(seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect((try? first.value?.get()) != nil)
        #expect(bUse.entries == 1 && aUse.entries == 0)
        guard case .failure(let error) = second.value else {
            Issue.record("the second internal request did not fail: \(String(describing: second.value))")
            return
        }
        guard let deadlock = error as? StrataError, deadlock.code == .wouldDeadlock, let message = deadlock.reason else {
            Issue.record("unexpected error \(error)")
            return
        }
        #expect(message.contains("strata.context.deadlock.a") && message.contains("strata.context.deadlock.b"))
        // The contexts work afterwards.
        #expect(await a.perform { _ in true })
        #expect(await b.perform { _ in true })
    }

    @Test func internalRequestsThroughTheMainQueueThatCanOnlyDeadlockThrow() async {
        // The main queue's block makes an internal request for A; A's block makes one for
        // the main queue. The main queue's thread may not run A's request for it (it is
        // paused in an internal request): the second request throws.
        let main = ManagedObjectContext(.mainQueue, name: "deadlock.main")
        let a = ManagedObjectContext(.privateQueue, name: "deadlock.main.a")
        let aEntered = TestSignal(), mainDone = TestSignal()
        let first = TestBox<Result<Void, any Error>?>(nil)
        let second = TestBox<Result<Void, any Error>?>(nil)
        let t2 = TestRun {
            a.performAndWait { _ in
                aEntered.signal()
                let blocked = eventually { isWaiting(for: a, holding: nil, mainQueue: true) }
                #expect(blocked)
                second.value = Result { () throws in
                    try main.contextExecutor.runInternalRequest { main.assumeIsolated { _ in } }
                }
            }
        }
        DispatchQueue.main.async {
            aEntered.wait()
            main.performAndWait { _ in
                first.value = Result { () throws in
                    try a.contextExecutor.runInternalRequest { a.assumeIsolated { _ in } }
                }
            }
            mainDone.signal()
        }
        #expect(await signalled(mainDone, seconds: 30), "deadlock (watchdog)")
        #expect(await t2.joined(seconds: 30), "deadlock (watchdog)")
        #expect((try? first.value?.get()) != nil)
        guard case .failure(let deadlock as StrataError) = second.value, deadlock.code == .wouldDeadlock,
              let message = deadlock.reason else {
            Issue.record("the second internal request did not throw wouldDeadlock: \(String(describing: second.value))")
            return
        }
        #expect(message.contains("'main queue'") && message.contains("strata.context.deadlock.main.a"))
    }

    // MARK: Order and load

    @Test func performAndWaitRunsAfterBlocksAlreadyEnqueued() async {
        for context in [
            ManagedObjectContext(.privateQueue, name: "order.private"),
            ManagedObjectContext(.mainQueue, name: "order.main"),
        ] {
            let log = TestBox<[Int]>([])
            let release = TestSignal(), blocking = TestSignal()
            enqueue(on: context) { _ in
                blocking.signal()
                release.wait()
                log.value.append(0)
            }
            #expect(await signalled(blocking))
            for index in 1...20 {
                enqueue(on: context) { _ in log.value.append(index) }
            }
            let waiter = TestRun {
                context.performAndWait { _ in log.value.append(21) }
            }
            release.signal()
            #expect(await waiter.joined(seconds: 30), "deadlock (watchdog)")
            let seen = await context.perform { _ in log.value }
            #expect(seen == Array(0...21))
        }
    }

    @Test func inlineWaitsRegisterNothing() async {
        let a = ManagedObjectContext(.privateQueue, name: "inline.a")
        let b = ManagedObjectContext(.privateQueue, name: "inline.b")
        let counts = TestBox<[Int]>([])
        let ran = await runsOnThread(seconds: 30) {
            a.performAndWait { _ in
                b.performAndWait { _ in
                    a.performAndWait { _ in
                        b.performAndWait { _ in
                            let waits = SynchronousWaits.shared
                            counts.value = [
                                waits.waitCount(for: a.contextExecutor.identity),
                                waits.waitCount(for: b.contextExecutor.identity),
                            ]
                        }
                    }
                }
            }
        }
        #expect(ran)
        #expect(counts.value == [0, 0])
    }

    @Test func manyThreadsMixingPerformAndWaitAndInternalRequestsLoseNothing() async {
        // A private parent with two private children and a main-queue one, and a
        // main-queue parent with a private child. Threads go down (parent block waits for
        // a child) and up (child block makes an internal request into its parent) at once.
        let parent = ManagedObjectContext(.privateQueue, name: "load.parent")
        let children = [
            ManagedObjectContext(.privateQueue, name: "load.child1"),
            ManagedObjectContext(.privateQueue, name: "load.child2"),
            ManagedObjectContext(.mainQueue, name: "load.main-child"),
        ]
        let mainParent = ManagedObjectContext(.mainQueue, name: "load.main-parent")
        let mainParentsChild = ManagedObjectContext(.privateQueue, name: "load.child-of-main")
        // One use tracker per executor: every main-queue context shares the main queue.
        let parentUse = ExclusiveUse(), mainUse = ExclusiveUse(), grandUse = ExclusiveUse()
        let childUses = [ExclusiveUse(), ExclusiveUse(), mainUse]
        let failures = LockedValue(0)
        let rounds = 200
        let threads = (0..<6).map { thread in
            TestRun {
                for round in 0..<rounds {
                    let pick = (thread + round) % children.count
                    let child = children[pick], childUse = childUses[pick]
                    switch (thread + round) % 4 {
                    case 0:
                        parent.performAndWait { _ in
                            parentUse.segment()
                            child.performAndWait { _ in childUse.segment() }
                            parentUse.segment()
                        }
                    case 1:
                        child.performAndWait { _ in
                            childUse.segment()
                            do {
                                try parent.contextExecutor.runInternalRequest {
                                    parent.assumeIsolated { _ in parentUse.segment() }
                                }
                            } catch {
                                failures.withLock { $0 += 1 }
                            }
                            childUse.segment()
                        }
                    case 2:
                        mainParent.performAndWait { _ in
                            mainUse.segment()
                            mainParentsChild.performAndWait { _ in grandUse.segment() }
                        }
                    default:
                        mainParentsChild.performAndWait { _ in
                            grandUse.segment()
                            do {
                                try mainParent.contextExecutor.runInternalRequest {
                                    mainParent.assumeIsolated { _ in mainUse.segment() }
                                }
                            } catch {
                                failures.withLock { $0 += 1 }
                            }
                        }
                    }
                }
            }
        }
        for thread in threads {
            #expect(await thread.joined(seconds: 60), "deadlock (watchdog)")
        }
        #expect(failures.withLock { $0 } == 0)
        let all = [parentUse, mainUse, grandUse, childUses[0], childUses[1]]
        #expect(all.map(\.overlaps) == [0, 0, 0, 0, 0])
        // Stretches per round, by pattern: 3, 3, 2, 2.
        let total = all.map(\.entries).reduce(0, +)
        let expected = (0..<6).flatMap { thread in (0..<rounds).map { [3, 3, 2, 2][(thread + $0) % 4] } }
        #expect(total == expected.reduce(0, +))
        #expect(all.map { $0.count.value } == all.map(\.entries))
    }
}

// MARK: Helpers

/// Counts the stretches of code run with one executor and checks that no two of them
/// run at once. Each stretch also bumps a plain counter that only the executor's
/// isolation protects, so ThreadSanitizer reports a stretch that is not exclusive.
private final class ExclusiveUse: Sendable {
    /// Stretches running now, stretches run, and stretches that found another running.
    private let state = LockedValue((inside: 0, entries: 0, overlaps: 0))
    /// Bumped inside each stretch, guarded by the executor only.
    let count = TestBox(0)

    /// One stretch of code with the executor.
    func segment() {
        state.withLock { state in
            if state.inside > 0 { state.overlaps += 1 }
            state.inside += 1
            state.entries += 1
        }
        count.value += 1
        state.withLock { $0.inside -= 1 }
    }

    /// How many stretches ran.
    var entries: Int { state.withLock { $0.entries } }
    /// How many stretches found another one running.
    var overlaps: Int { state.withLock { $0.overlaps } }
}

/// What a parent–child scenario records: both contexts' use, and the child's internal
/// request into the parent.
private final class ParentChildScenario: Sendable {
    let parentUse = ExclusiveUse()
    let childUse = ExclusiveUse()
    /// The outcome of the internal request.
    let request = TestBox<Result<Void, any Error>?>(nil)

    /// The child's internal request into `parent` (a read or save of the child).
    func upward(into parent: ManagedObjectContext, onMainQueue: Bool = false) {
        request.value = Result { () throws in
            try parent.contextExecutor.runInternalRequest {
                parent.assumeIsolated { _ in
                    if onMainQueue { MainActor.assumeIsolated {} }
                    parentUse.segment()
                }
            }
        }
    }

    /// Both blocks and the request ran once each, nothing overlapped.
    func expectCompleted(sourceLocation: SourceLocation = #_sourceLocation) {
        #expect((try? request.value?.get()) != nil, "the internal request failed: \(String(describing: request.value))",
                sourceLocation: sourceLocation)
        #expect(parentUse.entries == 2 && childUse.entries == 2, sourceLocation: sourceLocation)
        #expect(parentUse.overlaps == 0 && childUse.overlaps == 0, sourceLocation: sourceLocation)
    }
}

/// Whether a thread waits for `target` (the main queue with `mainQueue`) while holding
/// `held` (or the main queue with `mainQueue` and no target). Read from the registry.
private func isWaiting(
    for target: ManagedObjectContext?, holding held: ManagedObjectContext?, mainQueue: Bool = false
) -> Bool {
    let main = ExecutorIdentity.mainQueue
    let waits = SynchronousWaits.shared
    switch (target, held) {
    case let (target?, held?):
        return waits.waitCount(for: target.contextExecutor.identity, holding: held.contextExecutor.identity) > 0
    case let (target?, nil):
        return waits.waitCount(for: target.contextExecutor.identity, holding: mainQueue ? main : nil) > 0
    case let (nil, held?):
        return waits.waitCount(for: main, holding: held.contextExecutor.identity) > 0
    case (nil, nil):
        return false
    }
}

/// Schedules `body` on `context` without waiting: the fire-and-forget `perform`, which
/// synchronous code reaches by that spelling (async code gets the awaited one).
private func enqueue(on context: ManagedObjectContext, _ body: @escaping @Sendable (isolated ManagedObjectContext) -> Void) {
    context.perform(body)
}

/// Waits, polling on the current (plain) thread, until `condition` holds; false when it
/// still does not after `seconds`.
private func eventually(seconds: Double = 20, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    while !condition() {
        guard Date() < deadline else { return false }
        Thread.sleep(forTimeInterval: 0.001)
    }
    return true
}
