/// Group commit's state and its transitions: the setting, the saves waiting for the next
/// group, the group being written, who leads, each sleeping saver's turn, the last
/// group's size and write time, and the statistics.
///
/// A value with no threads and no clock in it, in the style of swift-nio's
/// `NIOAsyncWriter` state machine: each transition changes the state and returns what
/// must happen next (write alone, lead, sleep, wake a saver), and the driver,
/// ``WriteGroups``, performs it: it calls every transition with its lock held and wakes
/// threads, or writes, with it released where it can. `Save` is a pending save
/// (``PendingSave`` in the coordinator; plain values in tests).
///
/// One saver at a time leads. It gathers (under contention only: see
/// ``startGathering(now:)``), takes every waiting save as one group (``takeGroup()``),
/// writes it, and hands the lead to the first save that arrived meanwhile, waking the
/// group's other savers, whose saves are written (``handOff()``). Those savers never
/// queue a write job of their own, which would let each of them write the next save to
/// arrive alone.
struct GroupCommitStateMachine<Save: Identifiable> {
    /// What wakes a sleeping saver.
    enum Turn: Hashable, Sendable {
        /// Lead: write the next group, which holds this saver's save.
        case lead
        /// Another saver's group wrote this saver's save.
        case done
    }

    /// What a save does once ``enqueue(_:)`` has seen it.
    enum Admission {
        /// Group commit is off: the save is written by a write job of its own.
        case alone
        /// Nobody leads: the caller leads the next group now.
        case lead
        /// A saver leads: the caller sleeps until ``takeTurn(of:)`` gives it a turn.
        case wait
        /// As ``wait``, and the save completes the group the leader (the payload)
        /// gathers: the gather is over, and a driver whose leader sleeps wakes it (Strata's
        /// leader looks instead, and needs no wake-up).
        case waitAndWakeLeader(Save)
    }

    /// What the leader does before it takes its group: ``startGathering(now:)``.
    enum Gathering: Hashable, Sendable {
        /// Take the group now: the last group held one save or none (a lone saver never
        /// waits), or as many saves wait as last time.
        case writeNow
        /// Sleep until an arrival completes the group (``Admission/waitAndWakeLeader(_:)``)
        /// or until this deadline (monotonic nanoseconds), then ``stopGathering()``.
        case waitUntil(UInt64)
    }

    /// What ``handOff()`` asks the driver to do once a group is written.
    struct HandOff {
        /// The saver to wake first, to lead the next group (the first save that arrived
        /// during the write; its turn is ``Turn/lead``), or nil: the lead is free.
        var nextLeader: Save?
        /// The group's other savers, in arrival order, to wake: their saves are written
        /// (their turns are ``Turn/done``).
        var wake: [Save]
    }

    /// The longest a leader gathers, in nanoseconds.
    static var gatherLimit: UInt64 { 200_000 }

    /// Whether saves that arrive are grouped; saves already queued keep the setting they
    /// arrived under.
    private(set) var isEnabled = true
    /// The saves queued for the next group, in arrival order.
    private(set) var waiting: [Save] = []
    /// The group the leader took and writes, in arrival order; empty between groups.
    private(set) var group: [Save] = []
    /// Who leads: the saver writing the current group, or about to write the next one
    /// (its save is in ``group`` or ``waiting``); nil when the lead is free.
    private(set) var leader: Save?
    /// While the leader gathers: how many waiting saves complete its group.
    private(set) var gatherTarget: Int?
    /// The savers that ``enqueue(_:)`` told to wait and that have not taken their turn
    /// yet, each with its turn once given (nil while none is). A saver holds its save
    /// until it took its turn, so an ID (a ``PendingSave``'s object identifier) names one
    /// save for as long as it is here.
    private(set) var sleepers: [Save.ID: Turn?] = [:]
    /// How many saves the last group held.
    private(set) var lastGroupSize = 0
    /// How long the last group's write took (begin to durable commit), in nanoseconds.
    private(set) var lastWriteNanoseconds: UInt64 = 0
    /// What was written so far.
    private(set) var statistics = WriteStatistics()

    /// Group commit on, nothing waiting, nobody leading, no statistics.
    init() {}

    /// Whether the leader sleeps in its gather.
    var isGathering: Bool { gatherTarget != nil }

    // MARK: Transitions

    /// Turns grouping on or off for saves that arrive from now on.
    mutating func setEnabled(_ enabled: Bool) {
        defer { _checkInvariants() }
        isEnabled = enabled
    }

    /// Queues `save` for the next group, unless group commit is off.
    mutating func enqueue(_ save: Save) -> Admission {
        defer { _checkInvariants() }
        guard isEnabled else { return .alone }
        waiting.append(save)
        guard let leader else {
            leader = save
            return .lead
        }
        sleepers[save.id] = .some(nil)
        if let target = gatherTarget, waiting.count >= target {
            gatherTarget = nil
            return .waitAndWakeLeader(leader)
        }
        return .wait
    }

    /// The leader, before it takes its group: under contention (the last group held
    /// several saves), gives the savers of that group a moment to come back with their
    /// next saves, until as many wait as last time. The moment is a quarter of the last
    /// group's write (a flush to disk is worth waiting for; a commit without one is
    /// not), and at most ``gatherLimit``.
    mutating func startGathering(now: UInt64) -> Gathering {
        defer { _checkInvariants() }
        precondition(leader != nil && group.isEmpty && gatherTarget == nil, "only a leader between groups gathers")
        guard lastGroupSize > 1, waiting.count < lastGroupSize else { return .writeNow }
        gatherTarget = lastGroupSize
        return .waitUntil(now + min(Self.gatherLimit, lastWriteNanoseconds / 4))
    }

    /// Ends the leader's gather at its deadline (when no arrival ended it first).
    mutating func stopGathering() {
        defer { _checkInvariants() }
        gatherTarget = nil
    }

    /// The leader, on the write queue: every waiting save, in arrival order (the
    /// leader's own among them), as the group it writes now, leaving none waiting.
    mutating func takeGroup() -> [Save] {
        defer { _checkInvariants() }
        precondition(group.isEmpty, "a group is already being written")
        guard let leader, waiting.contains(where: { $0.id == leader.id }) else {
            preconditionFailure("only the leader takes a group, which holds its save")
        }
        precondition(sleepers[leader.id] == nil, "the leader took its turn before leading")
        gatherTarget = nil
        group = waiting
        waiting = []
        lastGroupSize = group.count
        return group
    }

    /// Records how long the group's write took (begin to durable commit).
    mutating func groupWritten(nanoseconds: UInt64) {
        defer { _checkInvariants() }
        precondition(!group.isEmpty, "no group was being written")
        lastWriteNanoseconds = nanoseconds
    }

    /// Counts one commit (none when nothing was saved) of `saves` saves, `failed` saves
    /// that did not commit, and the conflicts the committed ones settled.
    mutating func didCommit(saves: Int, failed: Int, resolvedConflicts: Int = 0) {
        defer { _checkInvariants() }
        precondition(saves >= 0 && failed >= 0 && resolvedConflicts >= 0, "negative counts")
        statistics.failedSaves += failed
        statistics.resolvedConflicts += resolvedConflicts
        guard saves > 0 else { return }
        statistics.saves += saves
        statistics.commits += 1
        statistics.largestGroup = max(statistics.largestGroup, saves)
    }

    /// After the group's write: gives the lead to the first save that arrived meanwhile
    /// (or frees it when none did) and tells the group's other savers that their saves
    /// are written. The driver wakes the next leader first, so that its thread wakes
    /// while the others are told.
    mutating func handOff() -> HandOff {
        defer { _checkInvariants() }
        guard let current = leader, !group.isEmpty else { preconditionFailure("no group was being written") }
        var wake: [Save] = []
        wake.reserveCapacity(group.count - 1)
        for save in group where save.id != current.id {
            sleepers[save.id] = .done
            wake.append(save)
        }
        group = []
        leader = waiting.first
        if let next = leader { sleepers[next.id] = .lead }
        return HandOff(nextLeader: leader, wake: wake)
    }

    /// A sleeping saver, woken: its turn, which it takes (it no longer sleeps), or nil
    /// when it has none yet (it sleeps on).
    mutating func takeTurn(of save: Save) -> Turn? {
        defer { _checkInvariants() }
        guard let entry = sleepers[save.id] else { preconditionFailure("the saver does not sleep") }
        guard let turn = entry else { return nil }
        sleepers[save.id] = nil
        return turn
    }

    // MARK: Invariants

    #if DEBUG
    /// Traps when the state breaks an invariant (``invariantViolation``). Every
    /// transition calls it last; a no-op in release builds.
    func _checkInvariants() {
        if let violation = invariantViolation { preconditionFailure("group commit: \(violation)") }
    }
    #else
    /// Checks nothing in release builds (debug builds trap on a broken invariant).
    @inline(__always)
    func _checkInvariants() {}
    #endif

    /// The first invariant the state breaks, described, or nil when it holds them all.
    var invariantViolation: String? {
        var queued = Set<Save.ID>()
        for save in waiting + group where !queued.insert(save.id).inserted {
            return "a save is queued twice"
        }
        if let leader {
            guard queued.contains(leader.id) else { return "the leader's save is neither waiting nor being written" }
            if !group.isEmpty, !group.contains(where: { $0.id == leader.id }) {
                return "the group being written is not the leader's"
            }
        } else if !queued.isEmpty {
            return "saves wait with nobody leading"
        }
        for save in waiting + group where save.id != leader?.id {
            guard let entry = sleepers[save.id], entry == nil else {
                return "a queued save's saver does not sleep without a turn"
            }
        }
        for (id, turn) in sleepers {
            switch turn {
            case nil:
                guard queued.contains(id), id != leader?.id else { return "a saver sleeps for a save not queued" }
            case .lead?:
                guard id == leader?.id, group.isEmpty, waiting.contains(where: { $0.id == id }) else {
                    return "a lead turn for a saver that is not the next leader"
                }
            case .done?:
                guard !queued.contains(id) else { return "a save is both queued and done" }
            }
        }
        if let gatherTarget {
            guard leader != nil, group.isEmpty, waiting.count < gatherTarget else {
                return "a gather with no leader, during a write, or past its target"
            }
        }
        let statistics = statistics
        guard statistics.failedSaves >= 0, statistics.commits >= 0 else { return "negative statistics" }
        guard statistics.commits <= statistics.saves, statistics.largestGroup <= statistics.saves,
              (statistics.commits == 0) == (statistics.saves == 0), (statistics.largestGroup == 0) == (statistics.saves == 0) else {
            return "statistics count more commits, or a larger group, than saves"
        }
        let (most, overflow) = statistics.largestGroup.multipliedReportingOverflow(by: statistics.commits)
        guard overflow || statistics.saves <= most else { return "statistics count more saves than their commits can hold" }
        return nil
    }
}

/// Admissions of equatable saves compare by case and leader (for tests).
extension GroupCommitStateMachine.Admission: Equatable where Save: Equatable {}

/// Hand-offs of equatable saves compare by next leader and savers to wake (for tests).
extension GroupCommitStateMachine.HandOff: Equatable where Save: Equatable {}
