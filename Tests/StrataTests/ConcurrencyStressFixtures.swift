import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

// The pieces of the concurrency stress test (ConcurrencyStressTests.swift): its model, its
// settings, the ledger every context reports to, and the watchdog that fails a step
// taking too long without hanging the run.

/// An account of the stress bank: money moves between accounts, so the total of every
/// consistent state is the opening total.
///
/// Its money is `balance` plus its eight columns `share0`…`share7`. The conserved-sum
/// and last-writer-wins modes move `balance` only (the columns stay nil); the
/// disjoint-properties merge mode keeps `balance` at 0 and gives each of the eight
/// contexts a column of every account of its own (``StressMode/disjoint``). `label` is
/// set by the relabel operation of the merge modes. (Columns and label are optional, so
/// that the rows of the modes that leave them nil stay as small as they were: a record
/// holds only the fields that have values.)
final class StressAccount: ManagedObject {
    @Attribute(indexed: true) var number: Int = 0
    @Attribute var balance: Int = 0
    @Attribute var share0: Int?
    @Attribute var share1: Int?
    @Attribute var share2: Int?
    @Attribute var share3: Int?
    @Attribute var share4: Int?
    @Attribute var share5: Int?
    @Attribute var share6: Int?
    @Attribute var share7: Int?
    @Attribute var label: String?
    @Relationship(inverse: "accounts") var holder: StressOwner?   // (`owner` is ManagedObject's context)

    /// How many columns an account has: one per stress context.
    static let columns = 8

    /// Context `k`'s column (0 when it has none).
    subscript(share k: Int) -> Int {
        get {
            switch k {
            case 0: share0 ?? 0
            case 1: share1 ?? 0
            case 2: share2 ?? 0
            case 3: share3 ?? 0
            case 4: share4 ?? 0
            case 5: share5 ?? 0
            case 6: share6 ?? 0
            case 7: share7 ?? 0
            default: preconditionFailure("no column \(k)")
            }
        }
        set {
            switch k {
            case 0: share0 = newValue
            case 1: share1 = newValue
            case 2: share2 = newValue
            case 3: share3 = newValue
            case 4: share4 = newValue
            case 5: share5 = newValue
            case 6: share6 = newValue
            case 7: share7 = newValue
            default: preconditionFailure("no column \(k)")
            }
        }
    }

    /// The columns, in order.
    var shares: [Int?] { [share0, share1, share2, share3, share4, share5, share6, share7] }

    /// The account's money: its balance and its columns.
    var money: Int { shares.reduce(balance) { $0 + ($1 ?? 0) } }
}

/// Holds accounts. Deleting an owner cascades to its accounts, so the stress moves their
/// money out first; deleting an account nullifies its owner's side.
final class StressOwner: ManagedObject {
    @Attribute(indexed: true) var number: Int = 0
    @Relationship(inverse: "holder", deleteRule: .cascade) var accounts: Set<StressAccount>
}

/// How the stress contexts settle conflicts, and the workload and checks that go with it
/// (issue 22). Each mode runs the same eight contexts, auditor, invariants and history.
enum StressMode: String, CaseIterable, Sendable, CustomStringConvertible {
    /// Every context saves under ``MergePolicy/error`` (optimistic locking): a save whose
    /// rows changed since its context read them fails and the context rolls back.
    /// Transfers, inserts and deletes; the sum is conserved and the history replays
    /// without a lost update. No conflict is ever resolved.
    case conserved
    /// Every context (children too) saves under ``MergePolicy/mergeByPropertyObjectTrump``,
    /// and the workload is arranged so that two saves of one object never change the
    /// same property: conflicting saves merge instead of failing, and the sum still holds.
    ///
    /// Why the money needs columns: the policy decides a property changed on both sides
    /// for the saving context. A transfer read-modify-writes the balances of two
    /// accounts, so two contexts moving money through one account's `balance` would both
    /// change it, and the later save's balance, computed from a stale read, would win:
    /// money made or lost. Optimistic locking cannot guard `balance` here, since under a
    /// merging policy a changed row's conflict is always merged, and
    /// ``ManagedObjectContext/detectConflicts(for:)`` only locks objects the save does
    /// not change; switching a context to `.error` for the saves that move money would
    /// guard them, but then those saves fail on any change of their rows, disjoint or
    /// not, and merge nothing that matters. So no two contexts write one property: each
    /// account's money is split
    /// into eight columns, `share0`…`share7`, one per context (a teller's sub-ledger of
    /// every account), and context `k` moves money only within column `k` (a transfer
    /// from `share<k>` of one account to `share<k>` of another; a new account funded from
    /// column `k`). A column is written by one context (through its child, when it has
    /// one), so two saves of one account change disjoint columns and the merge keeps both:
    /// the total holds, and so does each column's total, which is checked too.
    ///
    /// The other properties have one writer each as well: an account's `label` and
    /// `holder` belong to its keeper (``StressPlan/keeper(ofAccount:)``; an opening account
    /// `n` to context `n % 8`, a new one to the context that made it), and only the keeper
    /// relabels or rehomes it. An owner's `accounts` changes in many contexts (rehomes,
    /// new accounts with a holder), but as members: a merge applies each side's additions
    /// and removals, which never touch the same account.
    ///
    /// Nothing is deleted: under this policy a deletion is kept over another save's
    /// changes to the object (its other columns' money goes with it), and the changes of
    /// a save to an object deleted meanwhile are dropped (half a transfer). Both break the
    /// sum whatever the properties.
    ///
    /// A root save never fails on a conflict here (one that does fails the run). A
    /// child's save into its parent is a compare-and-set on the properties it sets, which
    /// only its own context writes, so it conflicts rarely; in this branch a conflicting
    /// child save fails whatever its policy (the context rolls back), and once child saves
    /// merge, the same disjoint columns merge there and every check still holds. The run
    /// proves merging happened: the coordinator's `resolvedConflicts` is above 0, and it
    /// equals the writes whose saving contexts had read an older version than the one
    /// they replaced (printed in the summary).
    case disjoint
    /// Contexts write the same properties and the last writer wins by design: the even
    /// contexts save under ``MergePolicy/mergeByPropertyObjectTrump``, the odd ones under
    /// ``MergePolicy/overwrite`` (children take their root's policy). Transfers move
    /// `balance` as in ``conserved``, new accounts are funded from balances, and relabels
    /// set the `label` of any account. The sum is not expected to hold (a transfer's
    /// balances computed from a stale read win over another's); no balance goes below 0
    /// (every stored balance is one context's, computed at 0 or more), which is checked.
    ///
    /// The history checker verifies what last-writer-wins promises
    /// (``StressHistory/check(final:mode:)``): each committed save's write of an object is
    /// exactly the state it replaced with the properties its root changed set to its
    /// values (`mergeByPropertyObjectTrump`), or the root's whole state (`overwrite`);
    /// every version of an object is written by one acknowledged save; every read of an
    /// object at a version (workers, their children's parents, the auditor, new contexts
    /// after each save, the final read) sees exactly what the save that wrote that
    /// version stored; a reader never sees an object's version go back; the final store
    /// holds each object's last acknowledged write. A save whose values are lost, in part
    /// or whole, or mixed with another object's, fails one of these and is named.
    ///
    /// No deletions (a kept deletion, or a dropped change to a row deleted meanwhile,
    /// loses a committed save's values by design: not last-writer-wins on properties) and
    /// no relationship changes after the opening: `overwrite` forces the saving context's
    /// whole to-many relationships and then changes the other ends' rows to agree,
    /// outside the save, where the history cannot see them.
    case lastWriterWins = "lww"

    var description: String { rawValue }

    /// Whether conflicts are merged rather than failing the save.
    var merges: Bool { self != .conserved }

    /// Whether the accounts' money sums to the opening total in every consistent state.
    var conservesSum: Bool { self != .lastWriterWins }

    /// The merge policy of context `index` (and of its child).
    func policy(forContext index: Int) -> MergePolicy {
        switch self {
        case .conserved: .error
        case .disjoint: .mergeByPropertyObjectTrump
        case .lastWriterWins: index.isMultiple(of: 2) ? .mergeByPropertyObjectTrump : .overwrite
        }
    }
}

/// The stress settings: seeds, steps and modes (from the environment when set), the
/// bank, the step time limit.
enum StressSettings {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [StressAccount.self, StressOwner.self])
        } catch {
            preconditionFailure("the stress model is invalid: \(error)")
        }
    }()

    static let openingAccounts = 16
    static let openingOwners = 4
    static let openingBalance = 1_000
    static var total: Int { openingAccounts * openingBalance }
    /// Accounts and owners are not deleted below these counts (in the deleting context's view).
    static let minimumAccounts = 8
    static let minimumOwners = 2
    /// The merge modes delete nothing: no account is inserted beyond this count (in the
    /// inserting context's view), so that a step's reads stay as cheap as in the
    /// conserved-sum mode and the accounts few enough to collide.
    static let mergeModeAccounts = 32
    /// The longest a single step (one block, one save, one check) may take.
    static let stepLimit: Double = 5

    /// `STRATA_STRESS_SEED` alone when set; otherwise fixed seeds and one new random seed
    /// per run (printed with the run, so a failure can be replayed): seeds 1, 2 and 3 for
    /// the conserved sum, 1 and 2 for each merge mode.
    static func seeds(for mode: StressMode) -> [UInt64] {
        if let text = ProcessInfo.processInfo.environment["STRATA_STRESS_SEED"], let seed = UInt64(text) {
            return [seed]
        }
        // 717600 (disjoint, 120 steps): a merge's edge repair in a parent cleared an
        // account's holder that no side had changed (fixed: the to-one end decides).
        let fixed: [UInt64] = switch mode {
        case .conserved: [1, 2, 3]
        case .disjoint: [1, 2, 717_600]
        default: [1, 2]
        }
        return fixed + [randomSeed]
    }

    private static let randomSeed = UInt64.random(in: 4...999_999)

    /// The modes to run: `STRATA_STRESS_MODE` when set (`conserved`, `disjoint`, `lww`, a
    /// comma-separated list of them, or `all`), otherwise all.
    static let modes: Set<StressMode> = {
        guard let text = ProcessInfo.processInfo.environment["STRATA_STRESS_MODE"], !text.isEmpty, text != "all" else {
            return Set(StressMode.allCases)
        }
        let names = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let modes = names.compactMap(StressMode.init(rawValue:))
        precondition(modes.count == names.count, "STRATA_STRESS_MODE=\(text): the modes are all, \(StressMode.allCases.map(\.rawValue).joined(separator: ", "))")
        return Set(modes)
    }()

    /// Steps per context in `mode`: `STRATA_STRESS_STEPS`, or counts that keep the default
    /// seeds under about 20 s for the conserved sum and about 25 s for both merge modes
    /// together in a debug build on 2 cores (a merge mode's step costs more: twice as
    /// many root saves go through, each checked by a new context, and nothing is deleted).
    static func steps(for mode: StressMode) -> Int {
        if let text = ProcessInfo.processInfo.environment["STRATA_STRESS_STEPS"], let steps = Int(text), steps > 0 {
            return steps
        }
        return mode == .conserved ? 250 : 120
    }

    /// How to run `seed` of `mode` again.
    static func replay(_ seed: UInt64, mode: StressMode) -> String {
        "STRATA_STRESS_SEED=\(seed) STRATA_STRESS_STEPS=\(steps(for: mode)) STRATA_STRESS_MODE=\(mode) swift test --filter ConcurrencyStress"
    }

    /// A coordinator on a new LMDB store in `directory`, and the store.
    static func coordinator(in directory: URL) async throws -> (PersistentStoreCoordinator, PersistentStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = PersistentStore.Options()
        options.durability = .noSync
        let store = try await coordinator.addPersistentStore(
            type: .lmdb, at: directory.appendingPathComponent("Stress.strata"), options: options)
        return (coordinator, store)
    }
}

/// What one operation did, as it leaves its block.
enum StressOutcome: Sendable {
    /// It changed the context.
    case done
    /// Nothing to do in the context's current view (no account with money, too few left).
    case skipped
}

/// A consistent read of the accounts: each account's money, by object ID, and the
/// transaction id of the generation read (nil when the reader is not pinned); each
/// column's total; and each account's row as read, for the history's read checks.
/// Two views are equal when they name the same generation and the same money.
struct StressView: Sendable, Equatable {
    var balances: [ManagedObjectID: Int]
    var transaction: Int?
    /// Each of the accounts' columns (`share0`…`share7`) summed over the accounts.
    var columns: [Int] = []
    /// Each account's row version and values as read.
    var rows: [ManagedObjectID: StressRead] = [:]

    var sum: Int { balances.values.reduce(0, +) }
    var lowest: Int { balances.values.min() ?? 0 }

    static func == (a: StressView, b: StressView) -> Bool {
        a.balances == b.balances && a.transaction == b.transaction
    }
}

/// One object as a reader read it: its row version and values (a snapshot, to-many
/// relationships not loaded: cheap to take and to compare).
struct StressRead: Sendable {
    var snapshot: ObjectSnapshot
    var entity: EntityDescription

    init(_ object: ManagedObject) {
        snapshot = object.makeSnapshot()
        snapshot.relationships = snapshot.relationships.map { if case .toMany = $0 { .notLoaded } else { $0 } }
        entity = object.entity
    }

    var version: UInt64 { snapshot.version }
    var state: StressObjectState { StressObjectState(snapshot, entity: entity) }
}

/// What every context reports to, shared by the stress run: the objects saved and deleted
/// by successful root saves, the deletions under way, the newest generation anyone has
/// seen, the pinned views published for other contexts to read again, the counters and
/// the failures.
final class StressLedger: Sendable {
    struct State: Sendable {
        /// Objects a successful root save inserted (and the opening ones), with where.
        var saved: [ManagedObjectID: String] = [:]
        /// Objects a successful root save deleted.
        var deleted: Set<ManagedObjectID> = []
        /// Objects a root save under way deletes (counted: two saves may try).
        var deleting: [ManagedObjectID: Int] = [:]
        /// Objects found missing while a deletion of them was under way: checked at the end.
        var deferred: [ManagedObjectID: String] = [:]
        /// The newest transaction id any generation token named so far.
        var newestTransaction = 0
        /// The latest pinned view of each worker, for the auditor to read again.
        var published: [Int: (QueryGenerationToken, StressView)] = [:]
        var counters: [String: Int] = [:]
        var failures: [String] = []
    }

    let state = LockedValue(State())
    let seed: UInt64
    let mode: StressMode

    init(seed: UInt64, mode: StressMode) {
        self.seed = seed
        self.mode = mode
    }

    /// Whether a failure was reported: the workers stop.
    var failed: Bool { state.withLock { !$0.failures.isEmpty } }

    func count(_ counter: String, _ amount: Int = 1) {
        state.withLock { $0.counters[counter, default: 0] += amount }
    }

    /// Records a failure (an issue of the running test) with the seed, printed at once.
    func fail(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let line = "Concurrency stress FAILED (seed \(seed), mode \(mode)): \(message)\n  replay: \(StressSettings.replay(seed, mode: mode))"
        print(line)
        state.withLock { $0.failures.append(line) }
        Issue.record(Comment(rawValue: line), sourceLocation: sourceLocation)
    }

    /// Records what a successful root save inserted and deleted.
    func saved(inserted: [ManagedObjectID], deleted: [ManagedObjectID], by label: String) {
        state.withLock { state in
            for id in inserted { state.saved[id] = label }
            state.deleted.formUnion(deleted)
            for id in deleted { Self.release(id, in: &state) }
        }
    }

    /// A root save that deletes `ids` starts (call before `save()`).
    func deleting(_ ids: [ManagedObjectID]) {
        state.withLock { state in
            for id in ids { state.deleting[id, default: 0] += 1 }
        }
    }

    /// A root save that deleted nothing after all (it failed).
    func abandon(_ ids: [ManagedObjectID]) {
        state.withLock { state in
            for id in ids { Self.release(id, in: &state) }
        }
    }

    private static func release(_ id: ManagedObjectID, in state: inout State) {
        guard let count = state.deleting[id] else { return }
        state.deleting[id] = count > 1 ? count - 1 : nil
    }

    /// Checks that every object of `expected` is in `present` (read after `expected` was
    /// taken from the ledger), unless a successful save deleted it; one whose deletion is
    /// still under way is checked at the end. The number of objects checked.
    func checkPresence(of expected: [ManagedObjectID: String], in present: Set<ManagedObjectID>, at place: String) -> Int {
        let missing = expected.filter { !present.contains($0.key) }
        guard !missing.isEmpty else { return expected.count }
        let unexplained = state.withLock { state -> [(ManagedObjectID, String)] in
            var unexplained: [(ManagedObjectID, String)] = []
            for (id, label) in missing where !state.deleted.contains(id) {
                if state.deleting[id] != nil {
                    state.deferred[id] = "\(place), saved by \(label)"
                } else {
                    unexplained.append((id, label))
                }
            }
            return unexplained
        }
        for (id, label) in unexplained {
            fail("\(place): \(id) saved by \(label) is missing from the store, and no successful save deleted it")
        }
        return expected.count
    }

    /// Notes a generation seen; the newest so far, before it.
    @discardableResult
    func observe(transaction: Int) -> Int {
        state.withLock { state in
            defer { state.newestTransaction = max(state.newestTransaction, transaction) }
            return state.newestTransaction
        }
    }

    var newestTransaction: Int { state.withLock { $0.newestTransaction } }
    var savedObjects: [ManagedObjectID: String] { state.withLock { $0.saved } }
}

/// A step that did not finish within ``StressSettings/stepLimit``.
struct StressTimeout: Error, CustomStringConvertible {
    let step: String
    var description: String { "\(step) did not finish within \(StressSettings.stepLimit) s (watchdog)" }
}

/// One step's result, handed over once: by the step, or by the watchdog when it is late.
final class StepGate<T: Sendable>: Sendable {
    private enum State: Sendable {
        case running
        case awaited(CheckedContinuation<Result<T, any Error>, Never>)
        case finished(Result<T, any Error>)
        case delivered
    }

    private let state = LockedValue(State.running)

    /// The continuation that takes the result; resumed at once when it is already there.
    func install(_ continuation: CheckedContinuation<Result<T, any Error>, Never>) {
        let ready = state.withLock { state -> Result<T, any Error>? in
            guard case .finished(let result) = state else {
                state = .awaited(continuation)
                return nil
            }
            state = .delivered
            return result
        }
        if let ready { continuation.resume(returning: ready) }
    }

    /// Hands over `result` unless a result was handed over already.
    func finish(_ result: Result<T, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<Result<T, any Error>, Never>? in
            switch state {
            case .running:
                state = .finished(result)
                return nil
            case .awaited(let continuation):
                state = .delivered
                return continuation
            case .finished, .delivered:
                return nil
            }
        }
        waiting?.resume(returning: result)
    }

    /// Takes and releases the lock, so that what the step wrote before ``finish(_:)`` is
    /// ordered before what the awaiting task reads for ThreadSanitizer (which sees no
    /// happens-before edge through a continuation on 6.3.1; see `TestSignal`).
    func synchronize() {
        state.withLock { _ in }
    }
}

/// Fails steps that take too long: one thread checks the armed deadlines every 50 ms and
/// runs a late step's action (which hands the step a ``StressTimeout``).
// @unchecked Sendable because `deadlines`, `nextTicket` and `stopped` are only read and
// written with `condition` locked.
final class StressWatchdog: @unchecked Sendable {
    private let condition = NSCondition()
    private var deadlines: [Int: (Date, @Sendable () -> Void)] = [:]
    private var nextTicket = 0
    private var stopped = false

    init() {
        let thread = Thread { [self] in watch() }
        thread.name = "stress watchdog"
        thread.start()
    }

    /// Runs `action` once `seconds` have passed, unless disarmed first.
    func arm(seconds: Double, _ action: @escaping @Sendable () -> Void) -> Int {
        condition.lock()
        defer { condition.unlock() }
        nextTicket += 1
        deadlines[nextTicket] = (Date(timeIntervalSinceNow: seconds), action)
        return nextTicket
    }

    func disarm(_ ticket: Int) {
        condition.lock()
        deadlines[ticket] = nil
        condition.unlock()
    }

    /// Ends the watching thread.
    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    private func watch() {
        condition.lock()
        while !stopped {
            let now = Date()
            let late = deadlines.filter { $0.value.0 <= now }
            for ticket in late.keys { deadlines[ticket] = nil }
            if !late.isEmpty {
                condition.unlock()
                for (_, action) in late.values { action() }
                condition.lock()
                continue
            }
            _ = condition.wait(until: now.addingTimeInterval(0.05))
        }
        condition.unlock()
    }

    /// Runs `operation` in a task of its own and returns its result; throws
    /// ``StressTimeout`` naming `label` when it has not finished within `seconds`. A late
    /// step is abandoned, still running, so that a hang fails the test instead of hanging it.
    func guarded<T: Sendable>(
        _ label: @autoclosure () -> String, seconds: Double = StressSettings.stepLimit,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let gate = StepGate<T>()
        let step = label()
        let ticket = arm(seconds: seconds) { gate.finish(.failure(StressTimeout(step: step))) }
        defer { disarm(ticket) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
            gate.install(continuation)
            Task {
                do {
                    gate.finish(.success(try await operation()))
                } catch {
                    gate.finish(.failure(error))
                }
            }
        }
        gate.synchronize()
        return try result.get()
    }
}
