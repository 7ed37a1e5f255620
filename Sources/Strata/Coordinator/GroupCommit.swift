internal import StrataLocks
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// What the coordinator has written since it was made: how many saves, in how many
/// commits. With group commit, several saves share one commit under contention; see
/// <doc:Performance>.
public struct WriteStatistics: Sendable, Hashable, CustomStringConvertible {
    /// The saves committed.
    public var saves = 0
    /// The saves that failed: a conflict, an object the store refused, a storage error.
    public var failedSaves = 0
    /// The LMDB commits that wrote them: one per write transaction of a group, or of a
    /// save written alone (a save over several stores counts once).
    public var commits = 0
    /// The most saves one commit held.
    public var largestGroup = 0
    /// The conflicts that committed saves settled by their merge policies (one per
    /// object; see <doc:MergePolicies>).
    public var resolvedConflicts = 0

    /// No saves, no commits.
    public init() {}

    /// Saves committed per commit (1 without group commit; 0 before the first commit).
    public var savesPerCommit: Double { commits == 0 ? 0 : Double(saves) / Double(commits) }

    /// For example `1200 saves in 310 commits (largest group 8), 0 failed, 14 conflicts resolved`.
    public var description: String {
        "\(saves) saves in \(commits) commits (largest group \(largestGroup)), \(failedSaves) failed, \(resolvedConflicts) conflicts resolved"
    }
}

extension PersistentStoreCoordinator {
    /// Whether saves that arrive while a write is running are written together, in one
    /// LMDB transaction per store, by the next write job (group commit). On by default.
    ///
    /// Each save of a group is still atomic and conflict-checked on its own (it runs in
    /// a nested transaction: one that fails leaves the others' writes alone), and none
    /// returns before the shared commit, durable with
    /// ``PersistentStore/Options/Durability/sync``. Grouping only happens under
    /// contention, so a lone saver pays nothing for it; several contexts saving at once
    /// share one flush to disk instead of queueing for one each. Settable from any
    /// thread; saves already waiting keep the setting they arrived under.
    public nonisolated var isGroupCommitEnabled: Bool {
        get { writeGroups.isEnabled }
        set { writeGroups.isEnabled = newValue }
    }

    /// How many saves this coordinator has committed, in how many commits.
    public nonisolated var writeStatistics: WriteStatistics { writeGroups.statistics }
}

/// One save waiting for the write queue, and then its result.
// @unchecked Sendable because `_result` is only read and written with `lock` held, and
// the other properties never change after init.
final class PendingSave: Identifiable, @unchecked Sendable {
    /// What the save asks of each store.
    let saves: [StoreSave]
    /// Whether the saver wants a generation of the state after the commit.
    let pinning: Bool
    /// The write groups' lock, which guards `_result`.
    private let lock: ConditionLock
    /// What the saver sleeps on when its first look found no turn
    /// (``WriteGroups/admit(_:)``). A condition of `lock`.
    let condition: ConditionLock.Condition
    /// The outcome or the error, once written. Guarded by `lock`.
    private var _result: Result<SaveOutcome, any Error>?
    /// The saver's task-local logger when its task bound one (a request's, say): what
    /// the save's own log entries go to, whichever saver's thread writes the group.
    let saverLogger: Logger?

    /// A save of `saves` for the write groups `groups`.
    init(_ saves: [StoreSave], pinning: Bool, in groups: WriteGroups) {
        self.saves = saves
        self.pinning = pinning
        lock = groups.lock
        condition = groups.lock.makeCondition()
        saverLogger = Logger.boundCurrent
    }

    /// The outcome or the error; set on the write queue.
    var result: Result<SaveOutcome, any Error>? {
        get { lock.withLock { _result } }
        set { lock.withLock { _result = newValue } }
    }

    /// Whether the save committed.
    var succeeded: Bool {
        lock.withLock {
            if case .success? = _result { return true }
            return false
        }
    }

    /// Records the state after the commit in a committed save's outcome.
    func finish(token: QueryGenerationToken, generation: QueryGeneration?) {
        lock.withLock {
            guard case .success(var outcome)? = _result else { return }
            outcome.token = token
            outcome.generation = generation
            _result = .success(outcome)
        }
    }
}

/// Group commit's driver: holds its state machine (``GroupCommitStateMachine``) under a
/// lock and performs what the transitions return. Savers sleep on conditions of their
/// own, so that a wake-up reaches only the thread it concerns, and the lock is never
/// held while a group is written.
///
/// One saver at a time leads: it gathers (a short look, under contention only), writes
/// every save waiting when its write job starts, in one group, hands the lead to the
/// first save that arrived meanwhile (or lets it go when none did) and wakes the group's
/// other savers. Savers whose saves were written never queue a job of their own, which
/// would let each of them write the next save to arrive alone.
// @unchecked Sendable because `machine` is only read and written with `lock` held.
final class WriteGroups: @unchecked Sendable {
    /// Guards `machine` and every pending save's result; the savers' conditions are its.
    let lock = ConditionLock()
    /// The saves, who leads, the setting and the statistics. Guarded by `lock`.
    private var machine = GroupCommitStateMachine<PendingSave>()

    /// Whether group commit is on (``PersistentStoreCoordinator/isGroupCommitEnabled``).
    var isEnabled: Bool {
        get { lock.withLock { machine.isEnabled } }
        set { lock.withLock { machine.setEnabled(newValue) } }
    }

    /// What was written so far.
    var statistics: WriteStatistics { lock.withLock { machine.statistics } }

    /// How many saves wait for a write job.
    var waitingCount: Int { lock.withLock { machine.waiting.count } }

    /// What a saver does after ``admit(_:)``.
    enum Role {
        /// Group commit is off: write the save by a write job of its own.
        case alone
        /// Lead: ``gather()``, write the group (``writeGroup(_:)``), then ``handOff()``.
        case lead
        /// Nothing: another saver's group wrote the save (its result is set).
        case written
    }

    /// Queues `save` for the next group, unless group commit is off, and, when a saver
    /// leads already, sleeps until it is this saver's turn to lead or its save is written.
    func admit(_ save: PendingSave) -> Role {
        let admitted: Role? = lock.withLock {
            switch machine.enqueue(save) {
            case .alone: return .alone
            case .lead: return .lead
            case .wait: return nil
            case .waitAndWakeLeader:
                // The save completed the leader's gather, which ended it; the leader,
                // looking (`gather()`), sees that without a wake-up.
                return nil
            }
        }
        if let admitted { return admitted }
        // Look for the turn for a moment before sleeping: a commit without a flush takes
        // some tens of microseconds, about what a sleep and a wake-up cost, and on two
        // cores a sleeping saver also waits to be scheduled. The looks pay (strata-bench
        // --only 4, 8 contexts, one object a save, group commit on; see the Performance
        // article): sync off, 7,100 saves/s with neither this look nor the leader's,
        // 20,000-20,500 with this one only, 37,000 with both; sync on, 5,700 / 6,000 /
        // 6,500.
        let deadline = ConditionLock.now() + Self.lookNanoseconds
        repeat {
            if let turn = lock.withLock({ machine.takeTurn(of: save) }) { return Self.role(for: turn) }
            sched_yield()
        } while ConditionLock.now() < deadline
        return lock.withLock {
            while true {
                if let turn = machine.takeTurn(of: save) { return Self.role(for: turn) }
                lock.wait(on: save.condition)
            }
        }
    }

    /// How long a waiting saver looks for its turn before it sleeps.
    static let lookNanoseconds: UInt64 = 20_000

    /// What a saver does with `turn`.
    private static func role(for turn: GroupCommitStateMachine<PendingSave>.Turn) -> Role {
        switch turn {
        case .lead: .lead
        case .done: .written
        }
    }

    /// The leader, before its write job: under contention, waits until as many saves
    /// wait as in the last group, or until the gather's deadline
    /// (``GroupCommitStateMachine/startGathering(now:)``), looking rather than sleeping;
    /// a lone saver does not wait.
    func gather() {
        let start = lock.withLock { machine.startGathering(now: ConditionLock.now()) }
        guard case .waitUntil(let deadline) = start else { return }
        // The gather lasts at most 200 µs: the leader looks (yielding its core to the
        // savers it waits for) rather than sleeping, for the reason `admit` gives.
        while ConditionLock.now() < deadline {
            if !lock.withLock({ machine.isGathering }) { return }
            sched_yield()
        }
        lock.withLock { if machine.isGathering { machine.stopGathering() } }
    }

    /// On the write queue: takes every waiting save as one group, writes it with
    /// `write`, and records how long that took (the next gather's measure).
    func writeGroup(_ write: ([PendingSave]) -> Void) {
        let start = ConditionLock.now()
        let group = lock.withLock { machine.takeGroup() }
        write(group)
        let elapsed = ConditionLock.now() - start
        lock.withLock { machine.groupWritten(nanoseconds: elapsed) }
    }

    /// After the leader's write job: wakes the first save that arrived meanwhile to lead
    /// (first, so that its thread wakes while the others are told), or lets the lead go
    /// when none did, and then the group's other savers, whose saves are written.
    func handOff() {
        let handOff = lock.withLock { machine.handOff() }
        // Signalled with the lock released: each turn is set, so a saver that wakes
        // early finds it, and one that still sleeps gets the signal.
        if let next = handOff.nextLeader { lock.signal(next.condition) }
        for save in handOff.wake { lock.signal(save.condition) }
    }

    /// Counts one commit (none when nothing was saved) of `saves` saves, `failed` saves
    /// that did not commit, and the conflicts the committed ones settled.
    func didCommit(saves: Int, failed: Int, resolvedConflicts: Int = 0) {
        lock.withLock { machine.didCommit(saves: saves, failed: failed, resolvedConflicts: resolvedConflicts) }
    }
}
