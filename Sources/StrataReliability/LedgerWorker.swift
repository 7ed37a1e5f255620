import Foundation
import Strata

/// The child side of the crash and fault runs: opens a ledger store and saves
/// ``LedgerSave``s through contexts, one after another, writing `ack N` to its output
/// only after save N's root `save()` returned. The parent kills it (or a crash point or an
/// injected fault stops it) and audits the store against the acknowledgements.
public struct LedgerWorker: Sendable {
    /// The store directory.
    public var store: URL
    /// The seed of the save plan.
    public var seed: UInt64
    /// How commits are made durable.
    public var durability: PersistentStore.Options.Durability = .sync
    /// The initial map size (small maps make saves grow it).
    public var mapSize = 1 << 20
    /// The largest the map may grow to.
    public var maximumMapSize = 1 << 40
    /// The most saves each writer makes before returning; nil: until killed.
    public var limit: Int?
    /// How many writers save at once, each through contexts of its own (so that saves
    /// meet in group commits); each writer's saves are its own ledger.
    public var writers = 1
    /// Where acknowledgements go (a file descriptor: written with `write(2)`, unbuffered).
    public var output: Int32 = 1
    /// What to do when a save fails (``ErrorPolicy/stop``: print it and return).
    public var onError = ErrorPolicy.stop

    /// A worker for `store` with plan seed `seed`.
    public init(store: URL, seed: UInt64) {
        self.store = store
        self.seed = seed
    }

    /// What a run ended with when it was not killed.
    public struct Outcome {
        /// The saves found committed at the start, by writer.
        public var start: [Int]
        /// The saves acknowledged by this run, by writer.
        public var acknowledged: [Int]
        /// The error that stopped the run, if one did (the first, when several writers failed).
        public var error: (any Error)?
    }

    /// Opens the store and saves until killed, until ``limit``, or until a save fails.
    ///
    /// Writes `start W N` per writer (its saves already committed), then `ack W N` per
    /// save, then `error <type> <description>` when a save fails, and returns that error
    /// in the outcome; never traps.
    public func run() async -> Outcome {
        if onError == .continue { return await runContinuing() }
        var outcome = Outcome(start: Array(repeating: 0, count: writers), acknowledged: Array(repeating: 0, count: writers))
        let coordinator: PersistentStoreCoordinator
        do {
            coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: storeOptions)
            outcome.start = try await committedCounts(in: coordinator)
        } catch {
            outcome.error = error
            emit("error \(type(of: error)) \(error)")
            return outcome
        }
        for writer in 0..<writers { emit("start \(writer) \(outcome.start[writer])") }
        await runWriters(into: &outcome) { writer, start in
            await self.save(as: writer, from: start, coordinator: coordinator)
        }
        emit("statistics \(coordinator.writeStatistics)")
        // The store closes now, not when the contexts' last scheduled blocks (a child's
        // adoption of permanent IDs, say) let go of the coordinator: an auditor in this
        // process may open it next, and LMDB allows one environment per store per process.
        for added in coordinator.persistentStores { try? await coordinator.remove(added) }
        return outcome
    }

    /// How the worker opens its store: its durability and map sizes; persistent history
    /// tracked, so that the audit can check it went with the data.
    var storeOptions: PersistentStore.Options {
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        options.durability = durability
        options.mapSize = mapSize
        options.maximumMapSize = maximumMapSize
        return options
    }

    /// The writer and sequence number of an output line `<kind> W N` (`ack 1 42`,
    /// `committed 0 7`), or nil when the line is not one of `kind`.
    public static func save(in line: Substring, kind: String) -> (writer: Int, sequence: Int)? {
        let fields = line.split(separator: " ")
        guard fields.count == 3, fields[0] == kind, let writer = Int(fields[1]), let sequence = Int(fields[2]) else { return nil }
        return (writer, sequence)
    }

    /// The number of each writer's saves in the store (its batches).
    func committedCounts(in coordinator: PersistentStoreCoordinator) async throws -> [Int] {
        let sequences = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<[String: any Sendable]>(entityName: "LedgerBatch")
            request.resultType = .dictionary
            request.propertiesToFetch = ["sequence"]
            return try context.fetch(request).compactMap { $0["sequence"] as? Int64 }
        }
        var counts = Array(repeating: 0, count: writers)
        for sequence in sequences where LedgerSave.writer(ofBatch: sequence) < writers {
            counts[LedgerSave.writer(ofBatch: sequence)] += 1
        }
        return counts
    }

    /// Runs `loop` for every writer at once, from the saves each found committed, and
    /// records what each acknowledged and the first error.
    func runWriters(
        into outcome: inout Outcome, _ loop: @escaping @Sendable (_ writer: Int, _ start: Int) async -> (Int, Int, (any Error)?)
    ) async {
        let starts = outcome.start
        let results = await withTaskGroup(of: (Int, Int, (any Error)?).self) { group in
            for writer in 0..<writers {
                group.addTask { await loop(writer, starts[writer]) }
            }
            var results: [(Int, Int, (any Error)?)] = []
            for await result in group { results.append(result) }
            return results
        }
        for (writer, acknowledged, error) in results {
            outcome.acknowledged[writer] = acknowledged
            if outcome.error == nil, let error { outcome.error = error }
        }
    }

    /// One writer's loop: its saves from `start` on, each acknowledged after it returned.
    private func save(as writer: Int, from start: Int, coordinator: PersistentStoreCoordinator) async -> (Int, Int, (any Error)?) {
        let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let main = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        var state = LedgerState.after(start, seed: seed, writer: writer)
        var sequence = start
        do {
            while limit.map({ sequence < start + $0 }) ?? true {
                let save = LedgerSave.plan(sequence, seed: seed, writer: writer, after: state)
                try await Self.perform(save, root: root, main: main)
                emit("ack \(writer) \(sequence)")
                state.apply(save)
                sequence += 1
            }
        } catch {
            emit("error \(type(of: error)) \(error)")
            return (writer, sequence - start, error)
        }
        return (writer, sequence - start, nil)
    }

    /// Saves `save` through its route: the private root, a child of it, or the main-queue root.
    static func perform(_ save: LedgerSave, root: ManagedObjectContext, main: ManagedObjectContext) async throws {
        switch save.route {
        case .privateRoot:
            try await root.perform { context in
                context.reset()
                try apply(save, in: context)
                try context.save()
            }
        case .mainRoot:
            try await main.perform { context in
                context.reset()
                try apply(save, in: context)
                try context.save()
            }
        case .child:
            await root.perform { $0.reset() }
            let child = ManagedObjectContext(.privateQueue, parent: root)
            try await child.perform { context in
                try apply(save, in: context)
                try context.save()
            }
            try await root.perform { try $0.save() }
        }
    }

    /// Makes `save`'s changes in `context`, unsaved.
    static func apply(_ save: LedgerSave, in context: isolated ManagedObjectContext) throws {
        let batch = LedgerBatch()
        batch.sequence = save.sequence
        batch.digest = save.digest
        try context.insert(batch)
        let customer = LedgerCustomer()
        customer.name = save.customer
        customer.tier = save.tier
        try context.insert(customer)
        for planned in save.accounts {
            let account = LedgerAccount()
            account.name = planned.name
            account.balance = planned.balance
            try context.insert(account)
            account.customer = customer
        }
        if let transfer = save.transfer {
            var request = FetchRequest<LedgerAccount>()
            request.predicate = try FetchPredicate(format: "name IN %@", [transfer.from, transfer.to])
            let accounts = Dictionary(uniqueKeysWithValues: try context.fetch(request).map { ($0.name, $0) })
            guard let from = accounts[transfer.from], let to = accounts[transfer.to] else {
                throw LedgerMismatch(description: "the store lacks account \(transfer.from) or \(transfer.to)")
            }
            from.balance -= transfer.amount
            to.balance += transfer.amount
        }
        if let change = save.tierChange {
            try customerNamed(change.customer, in: context).tier = change.tier
        }
        if let name = save.deletion {
            try context.delete(customerNamed(name, in: context))
        }
    }

    /// The stored customer called `name`.
    static func customerNamed(_ name: String, in context: isolated ManagedObjectContext) throws -> LedgerCustomer {
        var request = FetchRequest<LedgerCustomer>()
        request.predicate = try FetchPredicate(format: "name == %@", name)
        guard let customer = try context.fetch(request).first else {
            throw LedgerMismatch(description: "the store lacks customer \(name)")
        }
        return customer
    }

    func emit(_ line: String) {
        let text = line.replacingOccurrences(of: "\n", with: " ") + "\n"
        text.withCString { pointer in
            var offset = 0
            let length = strlen(pointer)
            while offset < length {
                let written = write(output, pointer + offset, length - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

/// The store and the save plan disagree: an object the plan saved earlier is missing.
public struct LedgerMismatch: Error, CustomStringConvertible {
    /// What is missing.
    public var description: String
}
