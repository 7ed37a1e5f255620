import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// Eight root contexts on one coordinator over a real LMDB store, five on private
/// queues and three on the main queue, four with a child (whose saves go one store up,
/// then the parent saves), four pinning often, run seeded random operations at once
/// (ConcurrencyStressOperations.swift), while an auditor reads the store. Invariants are
/// checked after every step, not only at the end:
///
/// - conserved sum: every read of all accounts by a context with no unsaved changes (a
///   fresh read, or its pinned generation) sums to the opening total, no balance below 0;
/// - generations never go backwards: a pinned context's transaction id never decreases,
///   and a generation taken newest is never older than one anyone saw before;
/// - repeatable reads: a pinned context reads the same accounts and balances again (and
///   so do its child and another context pinned to its token) while others save;
/// - every root-saved object is in the store for a new context, unless a successful save
///   deleted it; at the end the store holds exactly the saved objects less the deleted;
/// - the history (ConcurrencyStressHistory.swift): every save logs what the changing
///   context read and wrote; after the run, replayed, no acknowledged save lost an
///   update or wrote what no change asked for, no two changed an object from the same
///   version, and the final store holds each object's last acknowledged write. It runs
///   after a failed run too, and names the save that lost what the sum only counts.
///
/// Merge policies: three modes (``StressMode``; `STRATA_STRESS_MODE` picks them, all by
/// default), each a test of its own below:
///
/// - ``StressMode/conserved``: the default `.error` policy, and on a conflict the saver
///   rolls back. No merging policy may join this workload: each settles a conflict
///   object by object, so a transfer whose source conflicts and whose destination does
///   not would be half applied: `mergeByPropertyStoreTrump` and `rollback` keep the
///   destination's credit and drop the source's debit, `mergeByPropertyObjectTrump` and
///   `overwrite` write a balance computed from a stale read over another context's
///   transfer. Each breaks the sum.
/// - ``StressMode/disjoint``: `mergeByPropertyObjectTrump` with a workload whose
///   concurrent writers of one object change disjoint properties (each context moves
///   money only in its own column of every account): conflicting saves merge instead of
///   failing, and the sum (and each column's) is conserved all the same. The run must
///   settle conflicts (`resolvedConflicts` above 0, and equal to the writes that
///   replaced a newer version than their contexts had read).
/// - ``StressMode/lastWriterWins``: `mergeByPropertyObjectTrump` and `overwrite` on the
///   same properties. The sum is not conserved by design; the history checker verifies
///   last-writer-wins instead: each committed write is exactly its changes over the
///   state it replaced, every read of a version is what its save stored, versions never
///   go back, no committed save is lost.
///
/// Parents never change objects themselves (a child's save of a property the parent
/// changed meanwhile would conflict). When a parent rolls back or resets, its child
/// resets too: the child's view came from the state the parent discarded.
///
/// Every read of the accounts by a worker, the auditor or a new context is logged too:
/// two reads of one row version must agree, and agree with what the save that wrote it
/// stored, and a reader whose generations only move forward never reads an object at an
/// older version than before.
///
/// A watchdog fails any step over 5 s. Failures print the seed, mode, context and step:
/// `STRATA_STRESS_SEED=… STRATA_STRESS_STEPS=… STRATA_STRESS_MODE=… swift test --filter
/// ConcurrencyStress`. `make stress` runs 1,000 seeds at 400 steps in every mode, two at
/// a time. The modes run one after another (`.serialized`): each loads both cores.
@Suite("Concurrency stress", .serialized)
struct ConcurrencyStressTests {
    @Test("eight contexts (private and main queue, children, pins) insert, transfer, delete, save, roll back, pin and reset at once: the sum is conserved, generations never go back, pinned reads repeat, saved objects stay", .enabled(if: StressSettings.modes.contains(.conserved)), arguments: StressSettings.seeds(for: .conserved))
    func stress(seed: UInt64) async throws {
        try await Self.run(.conserved, seed: seed)
    }

    @Test("the same under mergeByPropertyObjectTrump, concurrent writers of an object changing disjoint properties: conflicting saves merge, and the sum is still conserved", .enabled(if: StressSettings.modes.contains(.disjoint)), arguments: StressSettings.seeds(for: .disjoint))
    func disjointMerge(seed: UInt64) async throws {
        try await Self.run(.disjoint, seed: seed)
    }

    @Test("the same under mergeByPropertyObjectTrump and overwrite on the same properties: the last writer wins, which the history checker verifies", .enabled(if: StressSettings.modes.contains(.lastWriterWins)), arguments: StressSettings.seeds(for: .lastWriterWins))
    func lastWriterWins(seed: UInt64) async throws {
        try await Self.run(.lastWriterWins, seed: seed)
    }

    static func run(_ mode: StressMode, seed: UInt64) async throws {
        let directory = TemporaryDirectory()
        let (coordinator, store) = try await StressSettings.coordinator(in: directory.url)
        let run = StressRun(seed: seed, mode: mode, steps: StressSettings.steps(for: mode), coordinator: coordinator, store: store)
        print("Concurrency stress: seed \(seed), mode \(mode), \(run.steps) steps × \(StressPlan.contexts.count) contexts (replay: \(StressSettings.replay(seed, mode: mode)))")
        let clock = ContinuousClock()
        let elapsed = try await clock.measure { try await run.run() }
        print(run.summary(elapsed: elapsed))
    }
}

/// One stress run: the contexts' workers, the auditor, the final check.
final class StressRun: Sendable {
    let seed: UInt64
    let mode: StressMode
    let steps: Int
    let coordinator: PersistentStoreCoordinator
    let store: PersistentStore
    let ledger: StressLedger
    let history = StressHistory()
    let watchdog = StressWatchdog()
    private let finishedWorkers = LockedValue(0)

    init(seed: UInt64, mode: StressMode, steps: Int, coordinator: PersistentStoreCoordinator, store: PersistentStore) {
        self.seed = seed
        self.mode = mode
        self.steps = steps
        self.coordinator = coordinator
        self.store = store
        ledger = StressLedger(seed: seed, mode: mode)
    }

    func run() async throws {
        defer { watchdog.stop() }
        try await open()
        var seeds = SeededRandomNumberGenerator(seed: seed)
        let workerSeeds = StressPlan.contexts.indices.map { _ in seeds.next() }
        let auditorSeed = seeds.next()
        await withTaskGroup(of: Void.self) { group in
            for (index, workerSeed) in workerSeeds.enumerated() {
                group.addTask {
                    await self.work(index, seed: workerSeed)
                    self.finishedWorkers.withLock { $0 += 1 }
                }
            }
            group.addTask { await self.audit(seed: auditorSeed) }
        }
        if !ledger.failed { await finalCheck() }
        await checkHistory()
    }

    /// The sum each column of the accounts keeps (the disjoint mode's opening puts the
    /// opening balance in equal parts in the columns).
    static var openingShare: Int { StressSettings.openingBalance / StressAccount.columns }

    /// Runs `body` in `context`, under the watchdog (a step's limit unless `seconds` says otherwise).
    func perform<T: Sendable>(
        _ context: ManagedObjectContext, _ label: String, seconds: Double = StressSettings.stepLimit,
        _ body: @escaping @Sendable (isolated ManagedObjectContext) throws -> T
    ) async throws -> T {
        try await watchdog.guarded(label, seconds: seconds) { try await context.perform(body) }
    }

    /// The opening bank: owners, and accounts with the opening balance (in the disjoint
    /// mode, in equal parts in its columns), half of them owned.
    private func open() async throws {
        precondition(StressAccount.columns == StressPlan.contexts.count, "the disjoint mode gives each context a column")
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "stress opening")
        // Setting up is not a step: it gets a minute, since the whole test suite runs
        // beside it on two cores (a 5 s limit failed once there, with nothing wrong).
        let ids = try await perform(context, "opening", seconds: 60) { context in
            var owners: [StressOwner] = []
            for number in 0..<StressSettings.openingOwners {
                let owner = StressOwner()
                owner.number = number
                try context.insert(owner)
                owners.append(owner)
            }
            var objects: [ManagedObject] = owners
            for number in 0..<StressSettings.openingAccounts {
                let account = StressAccount()
                account.number = number
                if self.mode == .disjoint {
                    for column in 0..<StressAccount.columns { account[share: column] = Self.openingShare }
                } else {
                    account.balance = StressSettings.openingBalance
                }
                try context.insert(account)
                if number.isMultiple(of: 2) { account.holder = owners[number / 2 % owners.count] }
                objects.append(account)
            }
            let pending = StressHistory.pendingWrites(in: context)
            let own = StressHistory.changes(in: context, place: "opening")
            try context.save()
            let (writes, permanentIDs) = StressHistory.writes(in: context, pending: pending)
            self.history.acknowledged(
                worker: nil, place: "opening", writes: writes, own: own, root: own, policy: context.mergePolicy, permanentIDs: permanentIDs)
            return objects.map(\.objectID)
        }
        ledger.saved(inserted: ids, deleted: [], by: "opening")
    }

    // MARK: Workers

    /// What a worker keeps between steps.
    private struct WorkerState {
        /// Which of ``StressPlan/contexts`` it runs.
        let index: Int
        /// The newest transaction id its root context's generation named.
        var lastTransaction = 0
        /// Its root's latest view read in a pinned generation.
        var pinnedView: StressView?
        /// The next account or owner number it gives.
        var nextNumber: Int
    }

    private func work(_ index: Int, seed: UInt64) async {
        let plan = StressPlan.contexts[index]
        let root = ManagedObjectContext(plan.type, coordinator: coordinator, name: "stress \(index)")
        let child = plan.child.map { ManagedObjectContext($0, parent: root, name: "stress \(index) child") }
        // A child takes its root's policy: in this branch its conflicting saves still fail
        // (and it rolls back); once child saves merge, they merge the same properties.
        root.mergePolicy = mode.policy(forContext: index)
        child?.mergePolicy = mode.policy(forContext: index)
        var random = SeededRandomNumberGenerator(seed: seed)
        var state = WorkerState(index: index, nextNumber: (index + 1) * 1_000_000)
        for step in 0..<steps {
            if ledger.failed { return }
            let operation = plan.pick(in: mode, using: &random)
            let stepSeed = random.next()
            let thenRoot = Int.random(in: 0..<10, using: &random) < 7
            let label = "context \(index) (\(plan), \(root.mergePolicy)), step \(step), \(operation)"
            do {
                try await run(operation, root: root, child: child, state: &state, stepSeed: stepSeed, thenRoot: thenRoot, label: label)
                try await checkInvariants(root: root, child: child, state: &state, label: label)
            } catch let timeout as StressTimeout {
                ledger.fail("\(timeout)")
                return
            } catch {
                ledger.fail("\(label): \(error)")
                return
            }
        }
    }

    private func run(
        _ operation: StressOperation, root: ManagedObjectContext, child: ManagedObjectContext?, state: inout WorkerState,
        stepSeed: UInt64, thenRoot: Bool, label: String
    ) async throws {
        let target = child ?? root
        switch operation {
        case .transfer, .insertAccount, .insertOwner, .deleteAccount, .deleteOwner, .rehome, .relabel:
            let number = state.nextNumber
            state.nextNumber += 1
            let mode = mode, teller = state.index
            let outcome = try await perform(target, label) { context in
                var random = SeededRandomNumberGenerator(seed: stepSeed)
                return try operation.change(context, number: number, mode: mode, teller: teller, using: &random)
            }
            ledger.count(outcome == .done ? "op \(operation)" : "op \(operation) skipped")
        case .save:
            if let child {
                let history = history, worker = state.index
                let saved = try await perform(child, label + " (child)") {
                    try StressOperation.saveChild($0, history: history, worker: worker, label: label)
                }
                ledger.count("save child \(saved)")
                guard thenRoot else { return }
            }
            try await saveRoot(root, child: child, worker: state.index, label: label)
        case .rollback:
            try await perform(target, label) { $0.rollback() }
            ledger.count("op rollback")
        case .pin:
            let again = try await perform(root, label) { context in
                let pinned = context.graph.heldGenerationToken != nil   // (reading the token would take the snapshot)
                try context.setQueryGenerationFrom(.current)
                return pinned
            }
            ledger.count(again ? "op pin again" : "op pin")
        case .unpin:
            try await perform(root, label) { try $0.setQueryGenerationFrom(nil) }
            ledger.count("op unpin")
        case .reset:
            if let child { try await perform(child, label + " (child)") { $0.reset() } }
            try await perform(root, label) { $0.reset() }
            history.discardPending(worker: state.index)
            ledger.count("op reset")
        }
    }

    /// Saves the root; on a conflict (rolled back) resets the child, whose view came from
    /// the discarded state. After a save, a new context must find every object it inserted.
    private func saveRoot(_ root: ManagedObjectContext, child: ManagedObjectContext?, worker: Int, label: String) async throws {
        let ledger = ledger, history = history, hasChild = child != nil
        let result = try await perform(root, label + " (root save)") { context in
            try StressOperation.saveRoot(context, ledger: ledger, history: history, worker: worker, hasChild: hasChild, label: label)
        }
        switch result {
        case .nothing:
            ledger.count("save root nothing")
        case .conflicted:
            ledger.count("save root conflicted")
            if mode.merges {
                ledger.fail("\(label): a root save under \(root.mergePolicy) failed with a merge conflict; its policy settles every conflict")
            }
            if let child { try await perform(child, label + " (child reset)") { $0.reset() } }
        case .saved(let inserted, let deleted, let merged):
            ledger.count("save root saved")
            ledger.count("objects inserted", inserted.count)
            ledger.count("objects deleted", deleted)
            if merged > 0 {
                ledger.count("save root merged")
                ledger.count("objects merged", merged)
            }
            if let temporary = inserted.first(where: \.isTemporaryID) {
                ledger.fail("\(label): \(temporary) still has a temporary ID after its save")
            }
            let contents = try await storeContents(label: label + " (presence check)")
            history.read(contents.view, by: "context \(worker)'s new contexts", at: label + " (new context after the save)")
            checkSum(contents.view, at: label + " (new context after the save)")
            let expected = Dictionary(inserted.map { ($0, label) }) { first, _ in first }
            let checked = ledger.checkPresence(
                of: expected, in: Set(contents.view.balances.keys).union(contents.owners), at: label + " (after its save)")
            ledger.count("check presence", checked)
        }
    }

    /// The store as a new private context reads it (pinned to `token`, the newest by default).
    private func storeContents(
        label: String, token: QueryGenerationToken = .current
    ) async throws -> (view: StressView, owners: Set<ManagedObjectID>) {
        guard let contents = try await storeContents(pinnedTo: token, label: label) else {
            throw StrataError.queryGenerationUnavailable(token)
        }
        return contents
    }

    private func storeContents(pinnedTo token: QueryGenerationToken, label: String) async throws -> (view: StressView, owners: Set<ManagedObjectID>)? {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "stress reader")
        let store = store
        return try await perform(context, label) { context in
            try StressOperation.storeContents(context, token: token, store: store)
        }
    }

    // MARK: Invariants

    /// The sum of `view` is the opening total (in the disjoint mode each column's sum too;
    /// not in the last-writer-wins mode), and no account's money is below 0.
    private func checkSum(_ view: StressView, at place: String) {
        guard mode.conservesSum else {
            ledger.count("check lowest balance")
            if view.lowest < 0 {
                ledger.fail("\(place): an account holds \(view.lowest); every balance written was 0 or more")
            }
            return
        }
        ledger.count("check sum")
        if view.sum != StressSettings.total || view.lowest < 0 {
            ledger.fail("\(place): \(view.balances.count) accounts sum to \(view.sum), lowest balance \(view.lowest); the total is \(StressSettings.total)")
        }
        let columns = mode == .disjoint ? Array(repeating: Self.openingShare * StressSettings.openingAccounts, count: StressAccount.columns)
            : Array(repeating: 0, count: StressAccount.columns)
        if view.columns != columns {
            ledger.fail("\(place): the accounts' columns sum to \(view.columns); each should sum to \(columns[0])")
        }
    }

    /// The checks after every step: the root's generation, its view when it has no
    /// unsaved changes, the child's view when neither has.
    private func checkInvariants(
        root: ManagedObjectContext, child: ManagedObjectContext?, state: inout WorkerState, label: String
    ) async throws {
        let floor = ledger.newestTransaction
        let store = store
        let inspection = try await perform(root, label + " (check)") { context in
            try StressOperation.inspect(context, store: store)
        }
        if let transaction = inspection.transaction {
            ledger.count("check generation")
            if transaction < state.lastTransaction {
                ledger.fail("\(label): the generation went back from transaction \(state.lastTransaction) to \(transaction)")
            }
            if inspection.wasLazy {
                ledger.count("check generation newest")
                if transaction < floor {
                    ledger.fail("\(label): the newest generation, transaction \(transaction), is older than transaction \(floor) seen before")
                }
            }
            state.lastTransaction = max(state.lastTransaction, transaction)
            ledger.observe(transaction: transaction)
        }
        guard let view = inspection.view else { return }
        history.discardPending(worker: state.index)   // no unsaved changes: what its child saved into it changed nothing
        history.read(view, by: "context \(state.index)", at: label + " (its view)")
        checkSum(view, at: label + " (its view)")
        if let transaction = inspection.transaction {
            if let earlier = state.pinnedView, earlier.transaction == transaction {
                ledger.count("check repeatable read")
                if earlier != view {
                    ledger.fail("\(label): a second read of generation \(transaction) differs: \(difference(earlier, view))")
                }
            }
            state.pinnedView = view
            if let token = inspection.token {
                ledger.state.withLock { $0.published[state.index] = (token, view) }
            }
        } else {
            state.pinnedView = nil
        }
        guard let child else { return }
        guard let childView = try await perform(child, label + " (child check)", { try StressOperation.inspectChild($0) }) else { return }
        checkSum(childView, at: label + " (its child's view)")
        if inspection.transaction != nil {
            ledger.count("check repeatable read")
            if childView.balances != view.balances {
                ledger.fail("\(label): the child of a pinned context reads other accounts than its parent: \(difference(view, childView))")
            }
        }
    }

    /// The first few differences between two views.
    private func difference(_ a: StressView, _ b: StressView) -> String {
        let ids = Set(a.balances.keys).union(b.balances.keys)
        let different = ids.filter { a.balances[$0] != b.balances[$0] }.prefix(4)
        return different.map { "\($0): \(a.balances[$0].map(String.init) ?? "absent") vs \(b.balances[$0].map(String.init) ?? "absent")" }
            .joined(separator: ", ") + " (\(a.balances.count) vs \(b.balances.count) accounts)"
    }

    // MARK: Auditor and final check

    /// Until the workers finish: a new context pinned to the newest generation checks the
    /// sum, that its generation is no older than any seen before, and that every saved
    /// object is there; a new context pinned to a worker's published token reads exactly
    /// what the worker read.
    private func audit(seed: UInt64) async {
        var random = SeededRandomNumberGenerator(seed: seed)
        var round = 0
        while finishedWorkers.withLock({ $0 }) < StressPlan.contexts.count && !ledger.failed {
            round += 1
            let label = "auditor, round \(round)"
            do {
                let floor = ledger.newestTransaction
                let expected = ledger.savedObjects
                let contents = try await storeContents(label: label)
                history.read(contents.view, by: "the auditor", at: label)
                checkSum(contents.view, at: label)
                if let transaction = contents.view.transaction {
                    ledger.count("check generation newest")
                    if transaction < floor {
                        ledger.fail("\(label): the newest generation, transaction \(transaction), is older than transaction \(floor) seen before")
                    }
                    ledger.observe(transaction: transaction)
                }
                let present = Set(contents.view.balances.keys).union(contents.owners)
                ledger.count("check presence", ledger.checkPresence(of: expected, in: present, at: label))
                let published = ledger.state.withLock { $0.published.values.sorted { $0.1.transaction ?? 0 < $1.1.transaction ?? 0 } }
                if let (token, view) = published.randomElement(using: &random),
                   let again = try await storeContents(pinnedTo: token, label: label + " (shared token)") {
                    history.read(again.view, by: nil, at: label + " (shared token)")
                    ledger.count("check shared token")
                    if again.view.balances != view.balances {
                        ledger.fail("\(label): a context pinned to another's token \(token) reads other accounts: \(difference(view, again.view))")
                    }
                }
                try await Task.sleep(for: .milliseconds(20))
            } catch {
                ledger.fail("\(label): \(error)")
                return
            }
        }
    }

    /// After the run: the store holds exactly the objects saved less those deleted, each
    /// object found missing during a deletion was deleted, no deletion is under way, and
    /// the sum holds.
    private func finalCheck() async {
        do {
            let contents = try await storeContents(label: "final check")
            history.read(contents.view, by: "the auditor", at: "final check")
            checkSum(contents.view, at: "final check")
            let stored = Set(contents.view.balances.keys).union(contents.owners)
            let state = ledger.state.withLock { $0 }
            let expected = Set(state.saved.keys).subtracting(state.deleted)
            ledger.count("check presence", expected.count)
            if stored != expected {
                let missing = expected.subtracting(stored).prefix(5).map { "\($0) (saved by \(state.saved[$0] ?? "?"))" }
                let extra = stored.subtracting(expected).prefix(5).map { "\($0) (deleted: \(state.deleted.contains($0)))" }
                ledger.fail("final check: the store differs from the saves: missing \(missing), unexpected \(extra)")
            }
            for (id, place) in state.deferred where !state.deleted.contains(id) {
                ledger.fail("\(place): \(id) was missing while a save deleting it was under way, and that save failed")
            }
            if !state.deleting.isEmpty {
                ledger.fail("final check: deletions still marked under way: \(state.deleting.keys.prefix(5))")
            }
        } catch {
            ledger.fail("final check: \(error)")
        }
    }

    /// Replays the history of acknowledged saves against the final store
    /// (ConcurrencyStressHistory.swift): no lost update (but in the last-writer-wins
    /// mode), every write exactly its changes over the state it replaced, every read what
    /// was stored, every acknowledged write kept. Then checks the merges the coordinator
    /// counted: none under `.error`; in the merge modes some (a run that merged nothing
    /// tested nothing), as many as the writes that replaced a newer version than their
    /// contexts had read, and in the last-writer-wins mode, properties decided for the
    /// last writer. Runs after a failed run too, where it tells what the failure lost.
    private func checkHistory() async {
        do {
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "history check")
            let rows = try await perform(context, "history check", seconds: 60) { try StressHistory.finalRows(in: $0) }
            let failedBefore = ledger.failed
            let report = history.check(final: rows, mode: mode)
            ledger.count("history saves checked", history.commitCount)
            ledger.count("history reads checked", report.reads)
            ledger.count("history writes merged", report.merged)
            if mode == .lastWriterWins {
                ledger.count("history properties decided for the last writer", report.decided)
                ledger.count("history properties set back by overwrite", report.reverted)
            }
            let violations = report.violations
            if !violations.isEmpty { print(history.timeline(for: violations)) }
            for violation in violations.prefix(10) { ledger.fail("history: \(violation)") }
            if violations.count > 10 { ledger.fail("history: \(violations.count - 10) more violations") }
            guard !failedBefore else { return }   // (a step left unfinished would not be counted)
            let resolved = coordinator.writeStatistics.resolvedConflicts
            if !mode.merges {
                if resolved != 0 { ledger.fail("merging: \(resolved) conflicts were resolved, but every save is under .error") }
                return
            }
            if resolved == 0 {
                ledger.fail("merging: no save settled a conflict (resolvedConflicts is 0): the \(mode) mode tested no merge")
            } else if resolved != report.merged {
                ledger.fail("merging: the coordinator settled \(resolved) conflicts, but \(report.merged) acknowledged writes replaced a newer version than their contexts had read")
            }
            if mode == .lastWriterWins && report.decided == 0 {
                ledger.fail("merging: no property changed on both sides was decided: the last-writer-wins mode tested nothing")
            }
        } catch {
            ledger.fail("history check: \(error)")
        }
    }

    /// The figures of the run, for the log.
    func summary(elapsed: Duration) -> String {
        let counters = ledger.state.withLock { $0.counters }
        let lines = counters.sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value)" }
        return "Concurrency stress: seed \(seed), mode \(mode), \(steps) steps × \(StressPlan.contexts.count) contexts in \(elapsed); "
            + "\(coordinator.writeStatistics)\n" + lines.joined(separator: "\n")
    }
}
