import Foundation
internal import StrataLocks

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

    /// No saves, no commits.
    public init() {}

    /// Saves committed per commit (1 without group commit; 0 before the first commit).
    public var savesPerCommit: Double { commits == 0 ? 0 : Double(saves) / Double(commits) }

    /// For example `1200 saves in 310 commits (largest group 8), 0 failed`.
    public var description: String {
        "\(saves) saves in \(commits) commits (largest group \(largestGroup)), \(failedSaves) failed"
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
// @unchecked Sendable because `_result` and `turn` are only read and written with
// `condition` locked, and `saves` and `pinning` never change after init.
final class PendingSave: @unchecked Sendable {
    /// What the save asks of each store.
    let saves: [StoreSave]
    /// Whether the saver wants a generation of the state after the commit.
    let pinning: Bool
    private let condition = NSCondition()
    private var _result: Result<SaveOutcome, any Error>?
    private var turn: Turn?

    /// What wakes a waiting saver.
    enum Turn {
        /// Write the next group (which holds this save).
        case lead
        /// Another saver's group wrote this save: ``result`` is set.
        case done
    }

    init(_ saves: [StoreSave], pinning: Bool) {
        self.saves = saves
        self.pinning = pinning
    }

    /// The outcome or the error; set on the write queue.
    var result: Result<SaveOutcome, any Error>? {
        get {
            condition.lock()
            defer { condition.unlock() }
            return _result
        }
        set {
            condition.lock()
            _result = newValue
            condition.unlock()
        }
    }

    /// Whether the save committed.
    var succeeded: Bool {
        if case .success? = result { return true }
        return false
    }

    /// Records the state after the commit in a committed save's outcome.
    func finish(token: QueryGenerationToken, generation: QueryGeneration?) {
        guard case .success(var outcome)? = result else { return }
        outcome.token = token
        outcome.generation = generation
        result = .success(outcome)
    }

    /// Wakes the saver waiting in ``waitForTurn()``.
    func wake(_ turn: Turn) {
        condition.lock()
        self.turn = turn
        condition.broadcast()
        condition.unlock()
    }

    /// Blocks until another saver wrote this save or handed the lead to it.
    func waitForTurn() -> Turn {
        // A commit without a flush takes some tens of microseconds: look a few times
        // before sleeping, since a sleep and a wake-up cost about as much.
        let deadline = DispatchTime.now().uptimeNanoseconds + Self.spinNanoseconds
        repeat {
            condition.lock()
            let current = turn
            condition.unlock()
            if let current { return current }
            sched_yield()
        } while DispatchTime.now().uptimeNanoseconds < deadline
        condition.lock()
        defer { condition.unlock() }
        while turn == nil { condition.wait() }
        return turn ?? .done
    }

    /// How long a waiting saver looks for its turn before it sleeps.
    static let spinNanoseconds: UInt64 = 20_000
}

/// The saves waiting to be written, who writes them, the group-commit setting and the
/// statistics.
///
/// One saver at a time leads: it writes every save waiting when its write job starts,
/// in one group, wakes their savers, and hands the lead to the first save that arrived
/// meanwhile (or lets it go when none did). The others sleep until their save is
/// written. Savers whose saves were written never queue a job of their own, which
/// would let each of them write the next save to arrive alone.
final class WriteGroups: Sendable {
    private struct State {
        var enabled = true
        var waiting: [PendingSave] = []
        var leading = false
        var lastGroupSize = 0
        var lastWriteNanoseconds: UInt64 = 0
        var statistics = WriteStatistics()
    }

    private let state = LockedValue(State())

    var isEnabled: Bool {
        get { state.withLock { $0.enabled } }
        set { state.withLock { $0.enabled = newValue } }
    }

    var statistics: WriteStatistics { state.withLock { $0.statistics } }

    /// How many saves wait for a write job.
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// What a save does after ``enqueue(_:)``.
    enum Admission {
        /// Group commit is off: the save is written by a write job of its own.
        case alone
        /// No group is being written: the caller leads the next one now.
        case lead
        /// A leader is writing: the caller waits for its turn (``PendingSave/waitForTurn()``).
        case wait
    }

    /// Queues `save` for the next group, unless group commit is off.
    func enqueue(_ save: PendingSave) -> Admission {
        state.withLock { state in
            guard state.enabled else { return .alone }
            state.waiting.append(save)
            if state.leading { return .wait }
            state.leading = true
            return .lead
        }
    }

    /// Every waiting save, in arrival order, leaving none.
    func takeAll() -> [PendingSave] {
        state.withLock { state in
            defer {
                state.lastGroupSize = state.waiting.count
                state.waiting = []
            }
            return state.waiting
        }
    }

    /// Under contention (the last group held several saves), gives the savers of that
    /// group a moment to come back with their next saves before a leader takes the
    /// waiting ones, until as many wait as last time. The moment is a quarter of the
    /// last group's write (a flush to disk is worth waiting for; a commit without one
    /// is not), and at most ``gatherLimit``.
    func gather() {
        let (target, lastWrite) = state.withLock { ($0.lastGroupSize, $0.lastWriteNanoseconds) }
        guard target > 1 else { return }
        let deadline = DispatchTime.now().uptimeNanoseconds + min(Self.gatherLimit, lastWrite / 4)
        while waitingCount < target, DispatchTime.now().uptimeNanoseconds < deadline {
            sched_yield()
        }
    }

    /// Records how long a group's write job took (begin to durable commit).
    func didWrite(nanoseconds: UInt64) {
        state.withLock { $0.lastWriteNanoseconds = nanoseconds }
    }

    /// The longest a leader waits for a group to gather, in nanoseconds.
    static let gatherLimit: UInt64 = 200_000

    /// After a group: the save whose saver leads next (the lead stays taken), or nil
    /// when none waits (the lead is free).
    func nextLeader() -> PendingSave? {
        state.withLock { state in
            guard let next = state.waiting.first else {
                state.leading = false
                return nil
            }
            return next
        }
    }

    /// Counts one commit (none when nothing was saved) of `saves` saves, and `failed`
    /// saves that did not commit.
    func didCommit(saves: Int, failed: Int) {
        state.withLock { state in
            state.statistics.failedSaves += failed
            guard saves > 0 else { return }
            state.statistics.saves += saves
            state.statistics.commits += 1
            state.statistics.largestGroup = max(state.statistics.largestGroup, saves)
        }
    }
}
