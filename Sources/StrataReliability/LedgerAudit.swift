import Foundation
import Strata

/// The parent side: reopens a ledger store after its worker died and checks it against
/// the save plan. What it finds is the number of committed saves and a list of problems;
/// no problem means every committed save is present exactly, none partially, nothing
/// else is there, and indexes and relationships agree with the rows.
public struct LedgerAuditor: Sendable {
    /// The seed of the save plan.
    public let seed: UInt64
    /// The saves known committed at the last audit, and the state they make.
    public private(set) var committed = 0
    private var state = LedgerState()

    /// An auditor for a new, empty store.
    public init(seed: UInt64) { self.seed = seed }

    /// What one audit found.
    public struct Finding: Sendable {
        /// The saves in the store.
        public var committed: Int
        /// Everything wrong: empty when the store is exactly what the plan says.
        public var problems: [String]
    }

    /// Opens `store` and compares it with the plan; `acknowledged` is the number of saves the workers
    /// acknowledged so far (all of them must be present; at most one more may be).
    public mutating func audit(store: URL, acknowledged: Int) async throws -> Finding {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let found = try await context.perform { try Self.read($0) }
        let integrity = try await coordinator.checkIntegrity()

        var problems: [String] = found.problems + integrity.problems.map { "integrity: \($0)" }
        let count = found.state.batches.count
        if count < acknowledged {
            problems.append("lost acknowledged saves: the store holds \(count) saves, \(acknowledged) were acknowledged")
        } else if count > acknowledged + 1 {
            problems.append("phantom saves: the store holds \(count) saves, only \(acknowledged) were acknowledged (+1 in flight)")
        }
        if count < committed {
            problems.append("saves went missing: \(committed) were committed at the last audit, \(count) now")
        }
        if found.state.batches.keys.sorted() != (0..<Int64(count)).map({ $0 }) {
            problems.append("the batch sequence has gaps: \(found.state.batches.keys.sorted().prefix(20))…")
        } else {
            while committed < count {
                state.apply(LedgerSave.plan(committed, seed: seed, after: state))
                committed += 1
            }
            problems += Self.differences(expected: state, found: found.state)
        }
        return Finding(committed: count, problems: problems)
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
        let indexedCustomers = try context.count(for: requestFor(LedgerCustomer.self, "name BEGINSWITH %@", "c"))
        let indexedAccounts = try context.count(for: requestFor(LedgerAccount.self, "name BEGINSWITH %@", "c"))
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
