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
    /// The most saves to make before returning; nil: until killed.
    public var limit: Int?
    /// Where acknowledgements go (a file descriptor: written with `write(2)`, unbuffered).
    public var output: Int32 = 1

    /// A worker for `store` with plan seed `seed`.
    public init(store: URL, seed: UInt64) {
        self.store = store
        self.seed = seed
    }

    /// What a run ended with when it was not killed.
    public struct Outcome {
        /// The saves found committed at the start.
        public var start: Int
        /// The saves acknowledged by this run.
        public var acknowledged: Int
        /// The error that stopped the run, if one did.
        public var error: (any Error)?
    }

    /// Opens the store and saves until killed, until ``limit``, or until a save fails.
    ///
    /// Writes `start N` (saves already committed), then `ack N` per save, then `error
    /// <description>` when a save fails, and returns that error in the outcome; never traps.
    public func run() async -> Outcome {
        var outcome = Outcome(start: 0, acknowledged: 0)
        do {
            var options = PersistentStore.Options()
            options.durability = durability
            options.mapSize = mapSize
            options.maximumMapSize = maximumMapSize
            let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: options)
            let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            let main = ManagedObjectContext(.mainQueue, coordinator: coordinator)
            let start = try await root.perform { try $0.count(for: FetchRequest<LedgerBatch>()) }
            outcome.start = start
            emit("start \(start)")
            var state = LedgerState.after(start, seed: seed)
            var sequence = start
            while limit.map({ sequence < start + $0 }) ?? true {
                let save = LedgerSave.plan(sequence, seed: seed, after: state)
                try await Self.perform(save, root: root, main: main)
                emit("ack \(sequence)")
                outcome.acknowledged += 1
                state.apply(save)
                sequence += 1
            }
        } catch {
            outcome.error = error
            emit("error \(type(of: error)) \(error)".replacingOccurrences(of: "\n", with: " "))
        }
        return outcome
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

    private func emit(_ line: String) {
        let text = line + "\n"
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
