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
final class StressAccount: ManagedObject {
    @Attribute(indexed: true) var number: Int = 0
    @Attribute var balance: Int = 0
    @Relationship(inverse: "accounts") var holder: StressOwner?   // (`owner` is ManagedObject's context)
}

/// Holds accounts. Deleting an owner cascades to its accounts, so the stress moves their
/// money out first; deleting an account nullifies its owner's side.
final class StressOwner: ManagedObject {
    @Attribute(indexed: true) var number: Int = 0
    @Relationship(inverse: "holder", deleteRule: .cascade) var accounts: Set<StressAccount>
}

/// The stress settings: seeds and steps (from the environment when set), the bank, the
/// step time limit.
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
    /// The longest a single step (one block, one save, one check) may take.
    static let stepLimit: Double = 5

    /// `STRATA_STRESS_SEED` alone when set; otherwise fixed seeds and one new random seed
    /// per run (printed with the run, so a failure can be replayed).
    static let seeds: [UInt64] = {
        if let text = ProcessInfo.processInfo.environment["STRATA_STRESS_SEED"], let seed = UInt64(text) {
            return [seed]
        }
        return [1, 2, 3, UInt64.random(in: 4...999_999)]
    }()

    /// Steps per context: `STRATA_STRESS_STEPS`, or a count that keeps the default seeds
    /// under about 20 s in a debug build on 2 cores.
    static let steps: Int = {
        if let text = ProcessInfo.processInfo.environment["STRATA_STRESS_STEPS"], let steps = Int(text), steps > 0 {
            return steps
        }
        return 250
    }()

    /// How to run `seed` again.
    static func replay(_ seed: UInt64) -> String {
        "STRATA_STRESS_SEED=\(seed) STRATA_STRESS_STEPS=\(steps) swift test --filter ConcurrencyStress"
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

/// A consistent read of the accounts: each account's balance, by object ID, and the
/// transaction id of the generation read (nil when the reader is not pinned).
struct StressView: Sendable, Equatable {
    var balances: [ManagedObjectID: Int]
    var transaction: Int?

    var sum: Int { balances.values.reduce(0, +) }
    var lowest: Int { balances.values.min() ?? 0 }
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

    init(seed: UInt64) {
        self.seed = seed
    }

    /// Whether a failure was reported: the workers stop.
    var failed: Bool { state.withLock { !$0.failures.isEmpty } }

    func count(_ counter: String, _ amount: Int = 1) {
        state.withLock { $0.counters[counter, default: 0] += amount }
    }

    /// Records a failure (an issue of the running test) with the seed, printed at once.
    func fail(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let line = "Concurrency stress FAILED (seed \(seed)): \(message)\n  replay: \(StressSettings.replay(seed))"
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
