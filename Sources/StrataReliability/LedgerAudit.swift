import Foundation
import Strata

/// The parent side: reopens a ledger store after its worker died and checks it against
/// the save plan. What it finds is the number of committed saves and a list of problems;
/// no problem means every committed save is present exactly, none partially, nothing
/// else is there, and indexes and relationships agree with the rows.
public struct LedgerAuditor: Sendable {
    /// The seed of the save plan.
    public let seed: UInt64
    /// The saves of each writer known committed at the last audit, and the states they make.
    public private(set) var committed: [Int]
    private var states: [LedgerState]

    /// An auditor for a new, empty store that `writers` writers save to.
    public init(seed: UInt64, writers: Int = 1) {
        self.seed = seed
        committed = Array(repeating: 0, count: writers)
        states = Array(repeating: LedgerState(), count: writers)
    }

    /// What one audit found.
    public struct Finding: Sendable {
        /// The saves in the store, by writer.
        public var committed: [Int]
        /// Everything wrong: empty when the store is exactly what the plan says.
        public var problems: [String]
    }

    /// Opens `store` and compares it with the plan; `acknowledged` holds the number of
    /// saves each writer acknowledged so far (all must be present; at most one more per
    /// writer may be, its save in flight).
    public mutating func audit(store: URL, acknowledged: [Int]) async throws -> Finding {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let found = try await context.perform { try Self.read($0) }
        let integrity = try await coordinator.checkIntegrity()

        var problems: [String] = found.problems + integrity.problems.map { "integrity: \($0)" }
        problems += try await Self.historyProblems(coordinator: coordinator, context: context)
        let strangers = found.state.batches.keys.filter { LedgerSave.writer(ofBatch: $0) >= committed.count }
        if !strangers.isEmpty { problems.append("batches of unknown writers: \(strangers.prefix(5))") }
        var counts: [Int] = []
        for writer in committed.indices {
            let part = found.state.part(ofWriter: writer)
            let count = part.batches.count
            counts.append(count)
            let acked = writer < acknowledged.count ? acknowledged[writer] : 0
            if count < acked {
                problems.append("writer \(writer): lost acknowledged saves: the store holds \(count), \(acked) were acknowledged")
            } else if count > acked + 1 {
                problems.append("writer \(writer): phantom saves: the store holds \(count), only \(acked) were acknowledged (+1 in flight)")
            }
            if count < committed[writer] {
                problems.append("writer \(writer): saves went missing: \(committed[writer]) were committed at the last audit, \(count) now")
            }
            let expectedKeys = (0..<Int64(count)).map { Int64(writer) << 32 | $0 }
            guard part.batches.keys.sorted() == expectedKeys else {
                problems.append("writer \(writer): the batch sequence has gaps: \(part.batches.keys.sorted().prefix(20).map { $0 & 0xFFFF_FFFF })")
                continue
            }
            while committed[writer] < count {
                states[writer].apply(LedgerSave.plan(committed[writer], seed: seed, writer: writer, after: states[writer]))
                committed[writer] += 1
            }
            problems += Self.differences(expected: states[writer], found: part).map { "writer \(writer): \($0)" }
        }
        return Finding(committed: counts, problems: problems)
    }

    /// Persistent history against the data: every save writes one batch, and records one
    /// history transaction in the same LMDB transaction, so each stored batch is inserted
    /// by exactly one transaction and each transaction inserts one stored batch (history
    /// never without its data, nor data without its history).
    private static func historyProblems(coordinator: PersistentStoreCoordinator, context: ManagedObjectContext) async throws -> [String] {
        let batches = Set(try await context.perform { context in try context.fetch(FetchRequest<LedgerBatch>()).map(\.objectID) })
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        var problems: [String] = []
        var inserted: [ManagedObjectID: Int] = [:]
        for transaction in history {
            let ids = transaction.changes.filter { $0.changeType == .insert && $0.changedObjectID.entityName == "LedgerBatch" }.map(\.changedObjectID)
            if ids.count != 1 { problems.append("history \(transaction.token.sequence) inserts \(ids.count) batches, not 1") }
            for id in ids { inserted[id, default: 0] += 1 }
        }
        if history.count != batches.count {
            problems.append("\(history.count) history transactions for \(batches.count) stored batches")
        }
        let missing = batches.filter { inserted[$0] == nil }
        if !missing.isEmpty { problems.append("\(missing.count) stored batches have no history transaction") }
        let phantoms = inserted.keys.filter { !batches.contains($0) }
        if !phantoms.isEmpty { problems.append("\(phantoms.count) history transactions insert batches the store does not hold") }
        return problems
    }

    /// Reads the whole ledger, checking uniqueness, inverses and index lookups on the way.
    private static func read(_ context: isolated ManagedObjectContext) throws -> (state: LedgerState, problems: [String]) {
        var state = LedgerState()
        var problems: [String] = []
        let batches = try context.fetch(FetchRequest<LedgerBatch>())
        for batch in batches where state.batches.updateValue(batch.digest, forKey: batch.sequence) != nil {
            problems.append("two batches with sequence \(batch.sequence)")
        }
        let customers = try context.fetch(FetchRequest<LedgerCustomer>())
        for customer in customers {
            let accounts = Set(customer.accounts.map(\.name))
            if state.customers.updateValue(.init(tier: customer.tier, accounts: accounts), forKey: customer.name) != nil {
                problems.append("two customers named \(customer.name)")
            }
            for account in customer.accounts where account.customer !== customer {
                problems.append("\(account.name) is in \(customer.name)'s accounts but its customer is \(account.customer?.name ?? "nil")")
            }
        }
        let accounts = try context.fetch(FetchRequest<LedgerAccount>())
        for account in accounts {
            guard let customer = account.customer else {
                problems.append("account \(account.name) has no customer (an orphan: cascade delete lost it)")
                continue
            }
            if !customer.accounts.contains(account) {
                problems.append("\(account.name)'s customer \(customer.name) does not list it")
            }
            if state.accounts.updateValue(.init(balance: account.balance, customer: customer.name), forKey: account.name) != nil {
                problems.append("two accounts named \(account.name)")
            }
        }
        // Index lookups agree with the rows: a range over every name, and equality on a sample.
        let indexedCustomers = try context.count(for: requestFor(LedgerCustomer.self, "name BEGINSWITH %@", "w"))
        let indexedAccounts = try context.count(for: requestFor(LedgerAccount.self, "name BEGINSWITH %@", "w"))
        let indexedBatches = try context.count(for: requestFor(LedgerBatch.self, "sequence >= %@", Int64(0)))
        if indexedCustomers != customers.count || indexedAccounts != accounts.count || indexedBatches != batches.count {
            problems.append("index counts \(indexedCustomers)/\(indexedAccounts)/\(indexedBatches) differ from rows \(customers.count)/\(accounts.count)/\(batches.count)")
        }
        for account in accounts.prefix(8) {
            let hits = try context.fetch(requestFor(LedgerAccount.self, "name == %@", account.name))
            if hits.count != 1 || hits.first !== account {
                problems.append("the name index finds \(hits.count) accounts named \(account.name)")
            }
        }
        return (state, problems)
    }

    private static func requestFor<T: ManagedObject>(_ type: T.Type, _ format: String, _ argument: any Sendable) throws -> FetchRequest<T> {
        var request = FetchRequest<T>()
        request.predicate = try FetchPredicate(format: format, argument)
        return request
    }

    /// Every way `found` differs from `expected`, at most 20.
    static func differences(expected: LedgerState, found: LedgerState) -> [String] {
        var problems: [String] = []
        for name in Set(expected.customers.keys).union(found.customers.keys).sorted() where expected.customers[name] != found.customers[name] {
            problems.append("customer \(name): expected \(expected.customers[name].map { "\($0)" } ?? "none"), found \(found.customers[name].map { "\($0)" } ?? "none")")
        }
        for name in Set(expected.accounts.keys).union(found.accounts.keys).sorted() where expected.accounts[name] != found.accounts[name] {
            problems.append("account \(name): expected \(expected.accounts[name].map { "\($0)" } ?? "none"), found \(found.accounts[name].map { "\($0)" } ?? "none")")
        }
        for sequence in expected.batches.keys.sorted() where expected.batches[sequence] != found.batches[sequence] {
            problems.append("batch \(sequence) has the wrong digest")
        }
        return Array(problems.prefix(20))
    }
}
