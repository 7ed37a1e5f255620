import Foundation
import Strata

extension LedgerWorker {
    /// What a worker does when a save fails.
    public enum ErrorPolicy: String, Sendable, CaseIterable {
        /// Print the error and stop (the crash runs: no save is expected to fail).
        case stop
        /// Print the error and save again (the I/O fault runs): the same save, from a
        /// reset context. When the store reports a terminal state, first check that a
        /// save, a fetch and a fault are refused, then remove the store and add it again.
        case `continue`
    }

    /// The most attempts at one save under ``ErrorPolicy/continue`` before its writer
    /// gives up (a fault that persists fails every one).
    static let attemptsPerSave = 3

    /// ``run()`` under ``ErrorPolicy/continue``. Writes, besides `start W N` and `ack W N`:
    ///
    /// - `error <type> <description>` for each failed save;
    /// - `terminal <error>` when the store then reports a terminal state
    ///   (``PersistentStore/terminalError``), followed by `refused save <type> <error>`,
    ///   `refused fetch <type> <error>` and `refused fault <type> <error>` (or
    ///   `unrefused save|fetch|fault` when the store let one through), then `reopened`
    ///   once the store was removed and added again (by one writer, while no other saves);
    /// - `committed W N` when save N of writer W failed but is found in the store
    ///   afterwards (never acknowledged: the audit allows one such save per writer).
    ///
    /// A writer stops after ``attemptsPerSave`` failures of one save, with that error.
    func runContinuing() async -> Outcome {
        var outcome = Outcome(start: Array(repeating: 0, count: writers), acknowledged: Array(repeating: 0, count: writers))
        let shared: SharedLedgerStore
        let known: ManagedObjectID?
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            shared = SharedLedgerStore(coordinator: coordinator, url: store, options: storeOptions)
            try await shared.open()
            outcome.start = try await committedCounts(in: coordinator)
            // A row read through a fault stays in the coordinator's row cache: the terminal
            // store must refuse to serve it all the same.
            known = outcome.start[0] > 0 ? try await Self.faultInBatch(outcome.start[0] - 1, coordinator: coordinator) : nil
        } catch {
            outcome.error = error
            emit(Self.line("error", error))
            return outcome
        }
        for writer in 0..<writers { emit("start \(writer) \(outcome.start[writer])") }
        await runWriters(into: &outcome) { writer, start in
            await self.saveContinuing(as: writer, from: start, shared: shared, known: known)
        }
        return outcome
    }

    /// One writer's loop under ``ErrorPolicy/continue``.
    private func saveContinuing(as writer: Int, from start: Int, shared: SharedLedgerStore, known: ManagedObjectID?) async -> (Int, Int, (any Error)?) {
        let coordinator = shared.coordinator
        let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let main = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        var state = LedgerState.after(start, seed: seed, writer: writer)
        var sequence = start
        var acknowledged = 0
        var failures = 0
        var lastError: (any Error)?
        while limit.map({ sequence < start + $0 }) ?? true {
            let save = LedgerSave.plan(sequence, seed: seed, writer: writer, after: state)
            await shared.enter()
            do {
                try await Self.perform(save, root: root, main: main)
                emit("ack \(writer) \(sequence)")  // before leaving: a reopen's lines come after
                await shared.leave()
                acknowledged += 1
                state.apply(save)
                sequence += 1
                failures = 0
                continue
            } catch {
                emit(Self.line("error", error))
                await shared.leave()
                lastError = error
                failures += 1
            }
            do {
                if let terminal = await shared.closeIfTerminal() {
                    emit("terminal \(terminal)")
                    await probeRefusals(save, root: root, main: main, known: known, coordinator: coordinator)
                    // Announced before the other writers are let in again: a line written
                    // after `reopen()` returned could follow their next terminal state.
                    try await shared.reopen { self.emit("reopened") }
                }
                // A save whose commit reported a failure must not be in the store; if it
                // is (the audit accepts one per writer), it is not acknowledged.
                await shared.enter()
                let counts: [Int]
                do {
                    counts = try await committedCounts(in: coordinator)
                } catch {
                    await shared.leave()
                    throw error
                }
                await shared.leave()
                if counts[writer] > sequence {
                    emit("committed \(writer) \(sequence)")
                    state.apply(save)
                    sequence += 1
                    failures = 0
                }
            } catch {
                emit(Self.line("error", error))
                return (writer, acknowledged, error)
            }
            if failures >= Self.attemptsPerSave { return (writer, acknowledged, lastError) }
        }
        return (writer, acknowledged, nil)
    }

    /// After a terminal state: a save, a fetch and a fault (of a cached row) must all fail.
    private func probeRefusals(
        _ save: LedgerSave, root: ManagedObjectContext, main: ManagedObjectContext, known: ManagedObjectID?,
        coordinator: PersistentStoreCoordinator
    ) async {
        do {
            try await Self.perform(save, root: root, main: main)
            emit("unrefused save")
        } catch {
            emit(Self.line("refused save", error))
        }
        do {
            _ = try await committedCounts(in: coordinator)
            emit("unrefused fetch")
        } catch {
            emit(Self.line("refused fetch", error))
        }
        guard let known else { return }
        let fresh = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        do {
            try await fresh.perform { _ = try $0.existingObject(with: known) }
            emit("unrefused fault")
        } catch {
            emit(Self.line("refused fault", error))
        }
    }

    /// The ID of writer 0's batch `sequence`, after fulfilling its fault in a fresh
    /// context (which leaves its row in the coordinator's row cache).
    static func faultInBatch(_ sequence: Int, coordinator: PersistentStoreCoordinator) async throws -> ManagedObjectID? {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let id = try await context.perform { context -> ManagedObjectID? in
            var request = FetchRequest<LedgerBatch>()
            request.predicate = try FetchPredicate(format: "sequence == %@", Int64(sequence))
            return try context.fetch(request).first?.objectID
        }
        guard let id else { return nil }
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await reader.perform { _ = try $0.existingObject(with: id) }
        return id
    }

    /// `<prefix> <type> <description>`.
    static func line(_ prefix: String, _ error: any Error) -> String {
        "\(prefix) \(type(of: error)) \(error)"
    }
}

/// The store the writers of a fault run share, and the one way to reopen it after a
/// terminal state: saves ``enter()`` and ``leave()``; ``closeIfTerminal()`` lets no more
/// in and waits until none is inside, so that ``reopen()`` removes the store while
/// nothing refers to it (the environment closes with its last reference, and only then
/// can the directory open again).
actor SharedLedgerStore {
    nonisolated let coordinator: PersistentStoreCoordinator
    let url: URL
    let options: PersistentStore.Options
    private var store: PersistentStore?
    private var inside = 0
    private var closed = false
    private var entrants: [CheckedContinuation<Void, Never>] = []
    private var drained: CheckedContinuation<Void, Never>?

    init(coordinator: PersistentStoreCoordinator, url: URL, options: PersistentStore.Options) {
        self.coordinator = coordinator
        self.url = url
        self.options = options
    }

    /// Adds the store to the coordinator.
    func open() async throws {
        store = try await coordinator.addPersistentStore(type: .lmdb, at: url, options: options)
    }

    /// Waits while a reopen is under way, then counts a save in.
    func enter() async {
        while closed { await withCheckedContinuation { entrants.append($0) } }
        inside += 1
    }

    /// Counts a save out.
    func leave() {
        inside -= 1
        if inside == 0, let drained {
            self.drained = nil
            drained.resume()
        }
    }

    /// When the store is terminal and no other writer is reopening it: lets no save in,
    /// waits until none is inside, and returns the terminal error. The caller probes the
    /// store, then calls ``reopen()``. Otherwise returns nil at once (another writer
    /// reopens it; this one's next ``enter()`` waits for that).
    func closeIfTerminal() async -> StrataError? {
        guard !closed, let terminal = store?.terminalError else { return nil }
        closed = true
        if inside > 0 { await withCheckedContinuation { drained = $0 } }
        return terminal
    }

    /// Removes the terminal store, lets go of it, adds the directory again, calls
    /// `reopened` (while no save can come in yet), and lets the waiting saves in.
    func reopen(_ reopened: @Sendable () -> Void) async throws {
        defer {
            closed = false
            let waiting = entrants
            entrants = []
            for entrant in waiting { entrant.resume() }
        }
        if let old = store { try await coordinator.remove(old) }
        store = nil
        store = try await coordinator.addPersistentStore(type: .lmdb, at: url, options: options)
        reopened()
    }
}
