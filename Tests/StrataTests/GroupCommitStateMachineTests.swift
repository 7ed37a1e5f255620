@testable import Strata
import Testing

/// A save for the state machine: only its identity matters.
private struct Saver: Identifiable, Hashable, CustomStringConvertible {
    /// The saver's number.
    let id: Int
    /// `s<id>`.
    var description: String { "s\(id)" }
}

/// The state machine under test, over plain savers.
private typealias Machine = GroupCommitStateMachine<Saver>

/// Savers 0 to 9.
private let s = (0..<10).map(Saver.init)

/// Group commit's state machine driven directly, with no threads and no clock: every
/// transition and every action it returns, with the invariants checked after each step.
@Suite("Group commit state machine")
struct GroupCommitStateMachineTests {
    /// Runs `step` on `machine`, then expects every invariant to hold.
    private static func step<T>(_ machine: inout Machine, _ step: (inout Machine) -> T,
                                sourceLocation: SourceLocation = #_sourceLocation) -> T {
        let result = step(&machine)
        #expect(machine.invariantViolation == nil, sourceLocation: sourceLocation)
        return result
    }

    /// A machine whose last group held `size` saves (s0 leading, then s1...) and took
    /// `nanoseconds` to write, one commit for all; nobody leads any more.
    private static func afterGroup(of size: Int, nanoseconds: UInt64) -> Machine {
        var machine = Machine()
        for index in 0..<size { _ = step(&machine) { $0.enqueue(s[index]) } }
        _ = step(&machine) { $0.takeGroup() }
        step(&machine) { $0.groupWritten(nanoseconds: nanoseconds) }
        step(&machine) { $0.didCommit(saves: size, failed: 0) }
        let handOff = step(&machine) { $0.handOff() }
        for saver in handOff.wake { #expect(step(&machine) { $0.takeTurn(of: saver) } == .done) }
        #expect(machine.leader == nil && machine.sleepers.isEmpty)
        return machine
    }

    @Test("a new machine: enabled, nothing waiting, nobody leading, no statistics")
    func initialState() {
        let machine = Machine()
        #expect(machine.isEnabled && machine.waiting.isEmpty && machine.group.isEmpty)
        #expect(machine.leader == nil && !machine.isGathering && machine.sleepers.isEmpty)
        #expect(machine.lastGroupSize == 0 && machine.lastWriteNanoseconds == 0)
        #expect(machine.statistics == WriteStatistics())
        #expect(machine.invariantViolation == nil)
    }

    @Test("group commit off: a save is written alone and never queued")
    func disabledAdmitsAlone() {
        var machine = Machine()
        Self.step(&machine) { $0.setEnabled(false) }
        #expect(!machine.isEnabled)
        #expect(Self.step(&machine) { $0.enqueue(s[0]) } == .alone)
        #expect(Self.step(&machine) { $0.enqueue(s[1]) } == .alone)
        #expect(machine.waiting.isEmpty && machine.leader == nil && machine.sleepers.isEmpty)
        Self.step(&machine) { $0.didCommit(saves: 1, failed: 0) }
        Self.step(&machine) { $0.didCommit(saves: 1, failed: 0) }
        #expect(machine.statistics.saves == 2 && machine.statistics.commits == 2 && machine.statistics.largestGroup == 1)
    }

    @Test("the first arrival leads; arrivals while it leads sleep without a turn")
    func firstArrivalLeadsOthersWait() {
        var machine = Machine()
        #expect(Self.step(&machine) { $0.enqueue(s[0]) } == .lead)
        #expect(machine.leader == s[0] && machine.waiting == [s[0]] && machine.sleepers.isEmpty)
        #expect(Self.step(&machine) { $0.enqueue(s[1]) } == .wait)
        #expect(Self.step(&machine) { $0.enqueue(s[2]) } == .wait)
        #expect(machine.leader == s[0] && machine.waiting == [s[0], s[1], s[2]])
        #expect(machine.sleepers.count == 2 && machine.sleepers[s[1].id] == .some(nil))
        // Woken early (a spurious wake-up): no turn yet, it sleeps on.
        #expect(Self.step(&machine) { $0.takeTurn(of: s[1]) } == nil)
        #expect(machine.sleepers[s[1].id] == .some(nil))
    }

    @Test("the leader takes every waiting save, in arrival order; later arrivals wait for the next group")
    func takeGroup() {
        var machine = Machine()
        for saver in s[0..<3] { _ = Self.step(&machine) { $0.enqueue(saver) } }
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[0], s[1], s[2]])
        #expect(machine.group == [s[0], s[1], s[2]] && machine.waiting.isEmpty && machine.lastGroupSize == 3)
        #expect(Self.step(&machine) { $0.enqueue(s[3]) } == .wait)
        #expect(machine.waiting == [s[3]] && machine.leader == s[0])
        Self.step(&machine) { $0.groupWritten(nanoseconds: 1_234) }
        #expect(machine.lastWriteNanoseconds == 1_234)
    }

    @Test("a lone saver never gathers: a last group of one save, or none")
    func loneSaverWritesNow() {
        var first = Machine()
        _ = Self.step(&first) { $0.enqueue(s[0]) }
        #expect(Self.step(&first) { $0.startGathering(now: 1_000) } == .writeNow)
        #expect(!first.isGathering)

        var machine = Self.afterGroup(of: 1, nanoseconds: 4_000_000)
        _ = Self.step(&machine) { $0.enqueue(s[5]) }
        #expect(Self.step(&machine) { $0.startGathering(now: 1_000) } == .writeNow)
        #expect(!machine.isGathering)
    }

    @Test("under contention the leader gathers until as many saves wait as last time; that arrival wakes it")
    func gatherEndsAtTheTarget() {
        var machine = Self.afterGroup(of: 3, nanoseconds: 400_000)
        #expect(Self.step(&machine) { $0.enqueue(s[5]) } == .lead)
        // A quarter of the last write: 100 µs.
        #expect(Self.step(&machine) { $0.startGathering(now: 1_000) } == .waitUntil(101_000))
        #expect(machine.isGathering && machine.gatherTarget == 3)
        #expect(Self.step(&machine) { $0.enqueue(s[6]) } == .wait)
        #expect(machine.isGathering)
        #expect(Self.step(&machine) { $0.enqueue(s[7]) } == .waitAndWakeLeader(s[5]))
        #expect(!machine.isGathering)
        // Later arrivals only wait.
        #expect(Self.step(&machine) { $0.enqueue(s[8]) } == .wait)
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[5], s[6], s[7], s[8]])
    }

    @Test("a gather lasts at most the limit, and stops at its deadline; arrivals after it only wait")
    func gatherStopsAtTheDeadline() {
        var machine = Self.afterGroup(of: 4, nanoseconds: 10_000_000)
        _ = Self.step(&machine) { $0.enqueue(s[5]) }
        #expect(Self.step(&machine) { $0.startGathering(now: 7) } == .waitUntil(7 + Machine.gatherLimit))
        #expect(Self.step(&machine) { $0.enqueue(s[6]) } == .wait)
        Self.step(&machine) { $0.stopGathering() }
        #expect(!machine.isGathering)
        #expect(Self.step(&machine) { $0.enqueue(s[7]) } == .wait)
        #expect(Self.step(&machine) { $0.enqueue(s[8]) } == .wait)  // the old target: nobody gathers
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[5], s[6], s[7], s[8]])
    }

    @Test("no gather when as many saves wait already as last time")
    func gatherTargetAlreadyMet() {
        var machine = Self.afterGroup(of: 2, nanoseconds: 400_000)
        _ = Self.step(&machine) { $0.enqueue(s[5]) }
        _ = Self.step(&machine) { $0.enqueue(s[6]) }
        #expect(Self.step(&machine) { $0.startGathering(now: 0) } == .writeNow)
        #expect(!machine.isGathering)
    }

    @Test("after a write the lead goes to the first save that arrived meanwhile; the group's other savers are done")
    func handOffToFirstArrival() {
        var machine = Machine()
        for saver in s[0..<3] { _ = Self.step(&machine) { $0.enqueue(saver) } }
        _ = Self.step(&machine) { $0.takeGroup() }
        #expect(Self.step(&machine) { $0.enqueue(s[3]) } == .wait)
        #expect(Self.step(&machine) { $0.enqueue(s[4]) } == .wait)
        Self.step(&machine) { $0.groupWritten(nanoseconds: 50_000) }
        Self.step(&machine) { $0.didCommit(saves: 3, failed: 0) }

        let handOff = Self.step(&machine) { $0.handOff() }
        #expect(handOff == Machine.HandOff(nextLeader: s[3], wake: [s[1], s[2]]))
        #expect(machine.leader == s[3] && machine.group.isEmpty && machine.waiting == [s[3], s[4]])
        #expect(machine.sleepers[s[1].id] == .done && machine.sleepers[s[2].id] == .done)
        #expect(machine.sleepers[s[3].id] == .lead && machine.sleepers[s[4].id] == .some(nil))
        // Each saver takes its turn once; the leader that wrote had none.
        #expect(Self.step(&machine) { $0.takeTurn(of: s[2]) } == .done)
        #expect(Self.step(&machine) { $0.takeTurn(of: s[1]) } == .done)
        #expect(Self.step(&machine) { $0.takeTurn(of: s[3]) } == .lead)
        #expect(Self.step(&machine) { $0.takeTurn(of: s[4]) } == nil)
        #expect(machine.sleepers.count == 1)

        // The new leader writes the saves that arrived meanwhile, its own first.
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[3], s[4]])
        let next = Self.step(&machine) { $0.handOff() }
        #expect(next == Machine.HandOff(nextLeader: nil, wake: [s[4]]))
        #expect(Self.step(&machine) { $0.takeTurn(of: s[4]) } == .done)
        #expect(machine.leader == nil && machine.sleepers.isEmpty)
    }

    @Test("a written save's saver that has not woken yet keeps its turn while a new arrival leads")
    func doneTurnOutlivesTheLead() {
        var machine = Machine()
        _ = Self.step(&machine) { $0.enqueue(s[0]) }
        _ = Self.step(&machine) { $0.enqueue(s[1]) }
        _ = Self.step(&machine) { $0.takeGroup() }
        _ = Self.step(&machine) { $0.handOff() }
        // The saver of s1 has not woken yet; a new save arrives and leads.
        #expect(Self.step(&machine) { $0.enqueue(s[2]) } == .lead)
        #expect(machine.sleepers[s[1].id] == .done)
        #expect(Self.step(&machine) { $0.takeTurn(of: s[1]) } == .done)
    }

    @Test("when nobody arrived during the write, the lead is let go and the next arrival leads")
    func leadReleasedWhenNoneWaits() {
        var machine = Machine()
        _ = Self.step(&machine) { $0.enqueue(s[0]) }
        #expect(Self.step(&machine) { $0.startGathering(now: 0) } == .writeNow)
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[0]])
        Self.step(&machine) { $0.groupWritten(nanoseconds: 10_000) }
        Self.step(&machine) { $0.didCommit(saves: 1, failed: 0) }
        #expect(Self.step(&machine) { $0.handOff() } == Machine.HandOff(nextLeader: nil, wake: []))
        #expect(machine.leader == nil && machine.waiting.isEmpty && machine.sleepers.isEmpty)
        #expect(machine.lastGroupSize == 1 && machine.lastWriteNanoseconds == 10_000)
        #expect(Self.step(&machine) { $0.enqueue(s[1]) } == .lead)
    }

    @Test("statistics: saves, commits, the largest group and failed saves; a commit of no save counts only failures")
    func statistics() {
        var machine = Machine()
        Self.step(&machine) { $0.didCommit(saves: 3, failed: 1) }
        Self.step(&machine) { $0.didCommit(saves: 0, failed: 2) }
        Self.step(&machine) { $0.didCommit(saves: 1, failed: 0) }
        Self.step(&machine) { $0.didCommit(saves: 2, failed: 0) }
        var expected = WriteStatistics()
        expected.saves = 6
        expected.commits = 3
        expected.largestGroup = 3
        expected.failedSaves = 3
        #expect(machine.statistics == expected)
        #expect(machine.statistics.savesPerCommit == 2)
        #expect(machine.statistics.description == "6 saves in 3 commits (largest group 3), 3 failed, 0 conflicts resolved")
    }

    @Test("turning group commit off while saves wait: they are still written by the group; new arrivals go alone")
    func disablingKeepsQueuedSaves() {
        var machine = Machine()
        _ = Self.step(&machine) { $0.enqueue(s[0]) }
        _ = Self.step(&machine) { $0.enqueue(s[1]) }
        _ = Self.step(&machine) { $0.takeGroup() }
        #expect(Self.step(&machine) { $0.enqueue(s[2]) } == .wait)  // arrived while on
        Self.step(&machine) { $0.setEnabled(false) }
        #expect(Self.step(&machine) { $0.enqueue(s[3]) } == .alone)
        #expect(machine.waiting == [s[2]])
        // s2 keeps the setting it arrived under: it leads the next group.
        #expect(Self.step(&machine) { $0.handOff() } == Machine.HandOff(nextLeader: s[2], wake: [s[1]]))
        #expect(Self.step(&machine) { $0.takeTurn(of: s[1]) } == .done)
        #expect(Self.step(&machine) { $0.takeTurn(of: s[2]) } == .lead)
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[2]])
        #expect(Self.step(&machine) { $0.handOff() } == Machine.HandOff(nextLeader: nil, wake: []))
        #expect(machine.leader == nil && machine.waiting.isEmpty)

        // On again: the next arrival leads; turning it off then leaves its group alone.
        Self.step(&machine) { $0.setEnabled(true) }
        #expect(Self.step(&machine) { $0.enqueue(s[4]) } == .lead)
        #expect(Self.step(&machine) { $0.enqueue(s[5]) } == .wait)
        Self.step(&machine) { $0.setEnabled(false) }
        #expect(Self.step(&machine) { $0.takeGroup() } == [s[4], s[5]])
        #expect(Self.step(&machine) { $0.handOff() } == Machine.HandOff(nextLeader: nil, wake: [s[5]]))
        #expect(Self.step(&machine) { $0.takeTurn(of: s[5]) } == .done)
    }

    @Test("turning group commit on while a save is written alone changes nothing queued")
    func enablingWhileAlone() {
        var machine = Machine()
        Self.step(&machine) { $0.setEnabled(false) }
        #expect(Self.step(&machine) { $0.enqueue(s[0]) } == .alone)
        Self.step(&machine) { $0.setEnabled(true) }
        #expect(machine.waiting.isEmpty && machine.leader == nil)
        #expect(Self.step(&machine) { $0.enqueue(s[1]) } == .lead)
    }

    @Test("many rounds of arrivals, groups and hand-offs keep every invariant and count every save once")
    func manyRounds() {
        var machine = Machine()
        var next = 0
        var asleep: [Saver] = []
        var written = 0
        /// A new save arrives.
        func arrive() {
            let saver = Saver(id: next)
            next += 1
            switch Self.step(&machine, { $0.enqueue(saver) }) {
            case .lead: #expect(machine.leader == saver)
            case .wait, .waitAndWakeLeader: asleep.append(saver)
            case .alone: Issue.record("group commit is on")
            }
        }
        arrive()
        for round in 0..<20 {
            for _ in 0..<(round % 4) { arrive() }
            if case .waitUntil = Self.step(&machine, { $0.startGathering(now: UInt64(round) * 1_000) }) {
                while machine.isGathering, machine.waiting.count < 3 { arrive() }
                if machine.isGathering { Self.step(&machine) { $0.stopGathering() } }
            }
            let group = Self.step(&machine) { $0.takeGroup() }
            for _ in 0..<(round % 3) { arrive() }  // during the write
            Self.step(&machine) { $0.groupWritten(nanoseconds: 40_000) }
            Self.step(&machine) { $0.didCommit(saves: group.count, failed: 0) }
            written += group.count
            let handOff = Self.step(&machine) { $0.handOff() }
            #expect(handOff.wake.count == group.count - 1)
            var leader: Saver?
            for saver in asleep {
                switch Self.step(&machine, { $0.takeTurn(of: saver) }) {
                case .lead?: leader = saver
                case .done?: #expect(group.contains(saver))
                case nil: #expect(machine.waiting.contains(saver))
                }
            }
            asleep.removeAll { saver in saver == leader || group.contains(saver) }
            #expect(leader == handOff.nextLeader)
            if leader == nil { arrive() }  // a new leader for the next round
        }
        #expect(machine.statistics.saves == written && written + machine.waiting.count == next)
    }

    #if DEBUG
    @Test("a broken invariant traps: a save queued twice")
    func brokenInvariantTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = GroupCommitStateMachine<Saver>()
            _ = machine.enqueue(Saver(id: 1))
            _ = machine.enqueue(Saver(id: 1))
        }
        let message = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
        #expect(message.contains("group commit: a save is queued twice"))
    }
    #endif

    @Test("a transition out of turn traps: taking a group when nobody leads")
    func transitionOutOfTurnTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = GroupCommitStateMachine<Saver>()
            _ = machine.takeGroup()
        }
        let message = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
        #expect(message.contains("only the leader takes a group"))
    }
}
