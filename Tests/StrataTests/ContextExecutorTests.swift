import Foundation
@testable import Strata
import StrataExecution
import StrataTesting
import Testing

@Suite("Context executor")
struct ContextExecutorTests {
    @Test func queueLabelComesFromTheContextName() {
        #expect(PrivateQueueExecutor.label(forContextNamed: "import") == "strata.context.import")
        #expect(PrivateQueueExecutor.label(forContextNamed: nil) == "strata.context")
        #expect(PrivateQueueExecutor.label(forContextNamed: "") == "strata.context")
        guard case .privateQueue(let executor) = ContextExecutor.privateQueue(named: "sync") else {
            Issue.record("not a private queue")
            return
        }
        #expect(executor.queue.label == "strata.context.sync")
    }

    @Test func jobsOfTheActorRunOnTheQueueAndHoldTheExecutor() async {
        let probe = Probe.privateQueue()
        #expect(!probe.executor.isHeldByCurrentThread)
        let inside = await probe.perform { probe in
            (probe.executor.isCurrentQueue, probe.executor.isHeldByCurrentThread)
        }
        #expect(inside == (true, true))
        #expect(!probe.executor.isCurrentQueue)
    }

    @Test func anActorCanTakeItsExecutorFromTheProtocol() async {
        let probe = DefaultExecutorProbe()
        #expect(await probe.isOnItsQueue())
    }

    @Test func assumeIsolatedPassesInsideQueueSyncBlocks() async {
        // A plain thread enters the queue with `queue.sync`, not through a job: the
        // runtime knows no current executor there, and asks checkIsolated().
        let probe = Probe.privateQueue()
        guard case .privateQueue(let executor) = probe.executor else { return }
        let ran = await runsOnThread {
            executor.queue.sync {
                probe.assumeIsolated { $0.count += 1 }
            }
            executor.runSynchronously {
                probe.assumeIsolated { $0.count += 1 }
            }
        }
        #expect(ran)
        #expect(await probe.count == 2)
    }

    @Test func isolationAnswersFollowTheOwnershipStack() async {
        let probe = Probe.privateQueue()
        guard case .privateQueue(let executor) = probe.executor else { return }
        let answers = TestBox<[Bool?]>([])
        let ran = await runsOnThread {
            answers.value.append(executor.isIsolatingCurrentContext())
            executor.queue.sync { answers.value.append(executor.isIsolatingCurrentContext()) }
            ExecutorOwnership.withHolding(ExecutorHolding(executor.identity)) {
                answers.value.append(executor.isIsolatingCurrentContext())
                executor.checkIsolated()  // passes
            }
            answers.value.append(executor.isIsolatingCurrentContext())
        }
        #expect(ran)
        // nil, not false, for "no": the runtime then calls checkIsolated() and its message.
        #expect(answers.value == [nil, true, true, nil])
    }

    @Test func ownershipStackLendsAndRemovesByToken() async {
        let a = ExecutorIdentity(label: "a")
        let b = ExecutorIdentity(label: "b")
        let ran = await runsOnThread {
            #expect(!ExecutorOwnership.holds(a))
            let outer = ExecutorOwnership.push(ExecutorHolding(a))
            ExecutorOwnership.lend([ExecutorHolding(b), ExecutorHolding(a)]) {
                #expect(ExecutorOwnership.holds(a) && ExecutorOwnership.holds(b))
            }
            #expect(ExecutorOwnership.holds(a) && !ExecutorOwnership.holds(b))
            // Scopes and locks end in any order: an entry pushed inside a scope outlives
            // it, and the outer one goes first.
            let inner = ExecutorOwnership.withHolding(ExecutorHolding(a)) {
                ExecutorOwnership.push(ExecutorHolding(b))
            }
            #expect(ExecutorOwnership.holds(b))
            #expect(ExecutorOwnership.remove(outer))
            #expect(!ExecutorOwnership.remove(outer))
            #expect(!ExecutorOwnership.holds(a))
            #expect(ExecutorOwnership.remove(inner))
            #expect(!ExecutorOwnership.holds(b))
        }
        #expect(ran)
    }

    @Test func assumeIsolatedOffTheQueueTrapsWithStrataMessage() async {
        await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            touchProbeWithoutHoldingIt()
        } .map { result in
            let message = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(message.contains("assumed it was isolated to the context on queue 'strata.context.trap'"))
        }
    }
}

/// Assumes a private probe's isolation on a thread that does not hold it (traps).
private func touchProbeWithoutHoldingIt() {
    let probe = Probe.privateQueue("trap")
    probe.assumeIsolated { $0.count += 1 }
}
