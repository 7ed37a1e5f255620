import StrataExecution
import Testing

/// The wait graph's transitions, driven by hand: no thread, no queue, no lock. Each test
/// plays the part of the driver (``SynchronousWaits``) for one or more imagined threads,
/// and the graph checks its invariants after every transition (debug builds).
@Suite struct WaitGraphTests {
    let main = ExecutorIdentity(label: "main")
    let a = ExecutorIdentity(label: "a")
    let b = ExecutorIdentity(label: "b")
    let c = ExecutorIdentity(label: "c")
    let t1 = ThreadKey(1), t2 = ThreadKey(2), t3 = ThreadKey(3)

    func graph() -> WaitGraph { WaitGraph(mainQueue: main) }

    func holding(_ identities: ExecutorIdentity...) -> [ExecutorHolding] {
        identities.map { ExecutorHolding($0) }
    }

    // MARK: The normal paths

    /// A private queue's gate grants the wait, the thread runs its block and leaves.
    @Test func aPrivateWaitSendsAGateIsGrantedRunsAndLeaves() {
        var graph = graph()
        let (id, wake) = graph.begin(thread: t1, target: a, kind: .user, drainsMainQueue: false, holdings: [])
        #expect(wake.isEmpty)
        guard case .sendGate = graph.nextStep(for: id) else { Issue.record("expected a gate"); return }
        guard case .sleep = graph.nextStep(for: id) else { Issue.record("expected sleep after the gate"); return }
        #expect(graph.privateGateArrived(id) == .grant(wake: id))
        #expect(graph.wait(id)?.state == .granted)
        guard case .runGranted = graph.nextStep(for: id) else { Issue.record("expected to run"); return }
        #expect(graph.wait(id)?.state == .running)
        #expect(graph.wait(id)?.holds(a) == true)
        #expect(graph.finishRunning(id).isEmpty)
        #expect(graph.wait(id) == nil)
        #expect(graph.waits.isEmpty)
    }

    /// The main queue's gate runs the block itself, lending the waiter's holdings and the
    /// main queue; the waiter then leaves.
    @Test func aMainQueueWaitIsRunByTheGateWithTheWaitersHoldings() {
        var graph = graph()
        let (id, _) = graph.begin(thread: t1, target: main, kind: .user, drainsMainQueue: false, holdings: holding(a))
        guard case .sendGate = graph.nextStep(for: id) else { Issue.record("expected a gate"); return }
        guard case .run(let lent) = graph.mainGateArrived(id) else { Issue.record("expected the gate to run it"); return }
        #expect(lent.map(\.identity.label) == ["a", "main"])
        #expect(graph.wait(id)?.state == .delegated)
        guard case .sleep = graph.nextStep(for: id) else { Issue.record("a delegated wait sleeps"); return }
        #expect(graph.mainGateFinished(id) == id)
        #expect(graph.wait(id)?.state == .finished)
        guard case .leave = graph.nextStep(for: id) else { Issue.record("expected to leave"); return }
        #expect(graph.waits.isEmpty)
    }

    /// Gates that find their waiter gone, or past waiting, change nothing.
    @Test func lateGatesGiveTheAdmissionBackOrSkip() {
        var graph = graph()
        let gone = WaitGraph.WaitID(raw: 99)
        #expect(graph.privateGateArrived(gone) == .giveBack)
        guard case .skip = graph.mainGateArrived(gone) else { Issue.record("expected skip"); return }

        let (id, _) = graph.begin(thread: t1, target: a, kind: .user, drainsMainQueue: false, holdings: [])
        _ = graph.nextStep(for: id)
        #expect(graph.privateGateArrived(id) == .grant(wake: id))
        #expect(graph.privateGateArrived(id) == .giveBack)  // granted already
        _ = graph.nextStep(for: id)
        #expect(graph.privateGateArrived(id) == .giveBack)  // running
        _ = graph.finishRunning(id)

        let (onMain, _) = graph.begin(thread: t2, target: main, kind: .user, drainsMainQueue: false, holdings: [])
        _ = graph.nextStep(for: onMain)
        guard case .run = graph.mainGateArrived(onMain) else { Issue.record("expected run"); return }
        guard case .skip = graph.mainGateArrived(onMain) else { Issue.record("a second gate skips"); return }
    }

    // MARK: Borrow

    /// Two threads each hold what the other waits for; the second one borrows the
    /// first's executor, which stays lent until the block ran.
    @Test func aCycleOfPerformAndWaitsIsResolvedByBorrowing() {
        var graph = graph()
        let (first, _) = graph.begin(thread: t1, target: b, kind: .user, drainsMainQueue: false, holdings: holding(a))
        guard case .sendGate = graph.nextStep(for: first) else { Issue.record("expected a gate"); return }
        let (second, wake) = graph.begin(thread: t2, target: a, kind: .user, drainsMainQueue: false, holdings: holding(b))
        #expect(wake == [first])
        guard case .borrow(let lender) = graph.nextStep(for: second) else { Issue.record("expected a borrow"); return }
        #expect(lender == first)
        #expect(graph.wait(first)?.state == .lent)
        #expect(graph.wait(second)?.holds(a) == true)
        guard case .sleep = graph.nextStep(for: first) else { Issue.record("a lent wait sleeps"); return }
        // Its gate arrives meanwhile: it cannot take the turn, and asks for another.
        #expect(graph.privateGateArrived(first) == .giveBack)
        #expect(graph.finishRunning(second).contains(first))
        #expect(graph.wait(first)?.state == .waiting)
        guard case .sendGate = graph.nextStep(for: first) else { Issue.record("expected a new gate"); return }
        #expect(graph.privateGateArrived(first) == .grant(wake: first))
    }

    /// An internal request borrows from a `performAndWait`, never the other way round.
    @Test func onlyUserWaitsLend() {
        var graph = graph()
        let (internalWait, _) = graph.begin(thread: t1, target: b, kind: .internal, drainsMainQueue: false, holdings: holding(a))
        guard case .sendGate = graph.nextStep(for: internalWait) else { Issue.record("expected a gate"); return }
        let (user, _) = graph.begin(thread: t2, target: a, kind: .user, drainsMainQueue: false, holdings: holding(b))
        // The user wait cannot borrow 'a' from an internal request, and never gives up.
        guard case .sendGate = graph.nextStep(for: user) else { Issue.record("expected a gate"); return }
        // The internal request, woken, borrows 'b' from the user wait.
        guard case .borrow(let lender) = graph.nextStep(for: internalWait) else { Issue.record("expected a borrow"); return }
        #expect(lender == user)
        _ = graph.finishRunning(internalWait)
        #expect(graph.wait(user)?.state == .waiting)
    }

    /// Only a thread's innermost wait lends: an outer wait whose block runs is not
    /// blocked, and the inner one holds what the outer one took.
    @Test func nestedWaitsLendFromTheInnermost() {
        var graph = graph()
        let (outer, _) = graph.begin(thread: t1, target: a, kind: .user, drainsMainQueue: false, holdings: [])
        _ = graph.nextStep(for: outer)
        #expect(graph.privateGateArrived(outer) == .grant(wake: outer))
        _ = graph.nextStep(for: outer)  // runs, holding 'a'
        let (inner, _) = graph.begin(thread: t1, target: b, kind: .user, drainsMainQueue: false, holdings: holding(a))
        _ = graph.nextStep(for: inner)
        let (other, _) = graph.begin(thread: t2, target: a, kind: .user, drainsMainQueue: false, holdings: holding(b))
        guard case .borrow(let lender) = graph.nextStep(for: other) else { Issue.record("expected a borrow"); return }
        #expect(lender == inner)
        #expect(graph.waitCount(for: a) == 2)
        #expect(graph.waitCount(for: a, holding: b) == 1)
        #expect(graph.waitCount(for: b, holding: a) == 1)
    }

    // MARK: Rescue and relay

    /// A waiter that drains the main queue runs the main-queue block of a thread that
    /// waits for it, then waits again.
    @Test func aMainQueueWaiterRescuesAThreadThatNeedsTheMainQueue() {
        var graph = graph()
        let (rescuer, _) = graph.begin(thread: t1, target: a, kind: .user, drainsMainQueue: true, holdings: holding(main))
        _ = graph.nextStep(for: rescuer)
        let (rescued, wake) = graph.begin(thread: t2, target: main, kind: .internal, drainsMainQueue: false, holdings: holding(a))
        #expect(wake == [rescuer])
        guard case .askRescue(let asked) = graph.nextStep(for: rescued) else { Issue.record("expected a rescue"); return }
        #expect(asked == rescuer)
        #expect(graph.wait(rescued)?.state == .delegated)
        guard case .sleep = graph.nextStep(for: rescued) else { Issue.record("a rescued wait sleeps"); return }
        // The rescuer's own gate comes meanwhile: it asks for another one later.
        #expect(graph.privateGateArrived(rescuer) == .giveBack)
        guard case .rescue(let whom, let lent) = graph.nextStep(for: rescuer) else { Issue.record("expected to rescue"); return }
        #expect(whom == rescued)
        #expect(lent.map(\.identity.label) == ["a"])
        // The main queue's gate for the rescued wait comes late and skips.
        guard case .skip = graph.mainGateArrived(rescued) else { Issue.record("expected skip"); return }
        #expect(graph.rescueFinished(rescuer).first == rescued)
        #expect(graph.wait(rescued)?.state == .finished)
        #expect(graph.wait(rescuer)?.state == .waiting)
        guard case .leave = graph.nextStep(for: rescued) else { Issue.record("expected to leave"); return }
        guard case .sendGate = graph.nextStep(for: rescuer) else { Issue.record("expected a new gate"); return }
    }

    /// A main-queue lock held off the main queue: the block goes through its relay, and
    /// the lock's holder is lent meanwhile.
    @Test func aMainQueueLockHoldersRelayRunsTheBlock() {
        var graph = graph()
        let relay = MainQueueRelay.unparked()
        let (holder, _) = graph.begin(
            thread: t1, target: a, kind: .user, drainsMainQueue: false, holdings: [ExecutorHolding(main, relay: relay)])
        _ = graph.nextStep(for: holder)
        let (waiter, _) = graph.begin(thread: t2, target: main, kind: .user, drainsMainQueue: false, holdings: holding(a))
        guard case .relay(let through, let lender, let lent) = graph.nextStep(for: waiter) else {
            Issue.record("expected the relay"); return
        }
        #expect(through === relay)
        #expect(lender == holder)
        #expect(lent.map(\.identity.label) == ["a"])
        #expect(graph.wait(holder)?.state == .lent)
        #expect(graph.wait(waiter)?.state == .running)
        #expect(graph.finishRunning(waiter).contains(holder))
        #expect(graph.wait(holder)?.state == .waiting)
    }

    /// A main-queue holder that neither drains the main queue nor holds a relay cannot
    /// run main-queue blocks: nothing is resolved.
    @Test func aMainQueueHolderWithoutARelayLendsNothing() {
        var graph = graph()
        let (holder, _) = graph.begin(thread: t1, target: a, kind: .user, drainsMainQueue: false, holdings: holding(main))
        _ = graph.nextStep(for: holder)
        let (waiter, _) = graph.begin(thread: t2, target: main, kind: .user, drainsMainQueue: false, holdings: holding(a))
        guard case .sendGate = graph.nextStep(for: waiter) else { Issue.record("expected a gate"); return }
        guard case .sleep = graph.nextStep(for: waiter) else { Issue.record("expected sleep"); return }
        #expect(graph.wait(holder)?.state == .waiting)
    }

    // MARK: Deadlocks

    /// A cycle made only of internal requests cannot be resolved: the request that looks
    /// gives up and names the cycle; the other goes on waiting.
    @Test func aCycleOfInternalRequestsGivesUp() {
        var graph = graph()
        let (first, _) = graph.begin(thread: t1, target: b, kind: .internal, drainsMainQueue: false, holdings: holding(a))
        guard case .sendGate = graph.nextStep(for: first) else { Issue.record("expected a gate"); return }
        let (second, _) = graph.begin(thread: t2, target: a, kind: .internal, drainsMainQueue: false, holdings: holding(b))
        guard case .giveUp(let message) = graph.nextStep(for: second) else { Issue.record("expected to give up"); return }
        #expect(message.contains("'a'") && message.contains("'b'"))
        #expect(message.contains("internal request"))
        #expect(graph.wait(second) == nil)
        guard case .sleep = graph.nextStep(for: first) else { Issue.record("the other keeps waiting"); return }
    }

    /// A request off the cycle waits when a request on it will give up instead.
    @Test func aRequestOffTheCycleLetsOneOnItGiveUp() {
        var graph = graph()
        let (first, _) = graph.begin(thread: t1, target: b, kind: .internal, drainsMainQueue: false, holdings: holding(a))
        _ = graph.nextStep(for: first)
        let (second, _) = graph.begin(thread: t2, target: c, kind: .internal, drainsMainQueue: false, holdings: holding(b))
        _ = graph.nextStep(for: second)  // 'c' is held by nobody: a gate
        let (third, _) = graph.begin(thread: t3, target: a, kind: .internal, drainsMainQueue: false, holdings: holding(c))
        // third → a (first) → b (second) → c (third): a cycle of three, third on it.
        guard case .giveUp = graph.nextStep(for: third) else { Issue.record("expected to give up"); return }

        var offCycle = self.graph()
        let (x, _) = offCycle.begin(thread: t1, target: b, kind: .internal, drainsMainQueue: false, holdings: holding(a))
        _ = offCycle.nextStep(for: x)
        let (y, _) = offCycle.begin(thread: t2, target: a, kind: .internal, drainsMainQueue: false, holdings: holding(b))
        // y would give up if asked; a third request for 'a', holding nothing, looks first.
        let (z, _) = offCycle.begin(thread: t3, target: a, kind: .internal, drainsMainQueue: false, holdings: [])
        guard case .sendGate = offCycle.nextStep(for: z) else { Issue.record("off the cycle: wait"); return }
        guard case .giveUp = offCycle.nextStep(for: y) else { Issue.record("on the cycle: give up"); return }
    }

    /// No deadlock while anything on the way can move: an executor held by a running
    /// block, or by nobody.
    @Test func aWaitThatMayEndNeverGivesUp() {
        var graph = graph()
        let (runner, _) = graph.begin(thread: t1, target: a, kind: .internal, drainsMainQueue: false, holdings: [])
        _ = graph.nextStep(for: runner)
        _ = graph.privateGateArrived(runner)
        _ = graph.nextStep(for: runner)  // runs, holding 'a'
        let (waiter, _) = graph.begin(thread: t2, target: a, kind: .internal, drainsMainQueue: false, holdings: holding(b))
        guard case .sendGate = graph.nextStep(for: waiter) else { Issue.record("expected a gate"); return }
        guard case .sleep = graph.nextStep(for: waiter) else { Issue.record("expected sleep"); return }
    }

    // MARK: Wake-ups

    /// A new wait wakes the waits connected to it, both ways, and no other.
    @Test func aNewWaitWakesOnlyConnectedWaits() {
        var graph = graph()
        let (holderOfA, _) = graph.begin(thread: t1, target: c, kind: .user, drainsMainQueue: false, holdings: holding(a))
        let (waiterForB, _) = graph.begin(thread: t2, target: b, kind: .user, drainsMainQueue: false, holdings: [])
        let (unrelated, _) = graph.begin(
            thread: t3, target: main, kind: .user, drainsMainQueue: false, holdings: holding(ExecutorIdentity(label: "d")))
        let (new, wake) = graph.begin(thread: ThreadKey(4), target: a, kind: .user, drainsMainQueue: false, holdings: holding(b))
        #expect(Set(wake) == [holderOfA, waiterForB])
        #expect(!wake.contains(unrelated) && !wake.contains(new))
    }
}

/// A driver that breaks the rules is stopped at once, not left to corrupt the graph.
@Suite struct WaitGraphMisuseTests {
    /// Reporting a block done for a wait that never ran one traps (debug builds).
    @Test func finishingABlockThatNeverRanTraps() async {
        await #expect(processExitsWith: .failure) {
            var graph = WaitGraph(mainQueue: ExecutorIdentity(label: "main"))
            let (id, _) = graph.begin(
                thread: ThreadKey(1), target: ExecutorIdentity(label: "a"), kind: .user,
                drainsMainQueue: false, holdings: [])
            _ = graph.finishRunning(id)
        }
    }

    /// A step for a wait that already left traps.
    @Test func aStepForAWaitThatLeftTraps() async {
        await #expect(processExitsWith: .failure) {
            var graph = WaitGraph(mainQueue: ExecutorIdentity(label: "main"))
            _ = graph.nextStep(for: WaitGraph.WaitID(raw: 7))
        }
    }
}
