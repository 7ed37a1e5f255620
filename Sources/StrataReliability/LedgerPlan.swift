import StrataTesting

/// What the ledger holds after a number of saves, computed without Strata: the worker
/// replays it to know what to save next, the audit to know what the store must hold.
public struct LedgerState: Equatable, Sendable {
    /// A customer: its tier and the names of its accounts.
    public struct Customer: Equatable, Sendable {
        /// The customer's tier.
        public var tier: Int16
        /// The names of its accounts.
        public var accounts: Set<String>
    }

    /// An account: its balance and its customer's name.
    public struct Account: Equatable, Sendable {
        /// The account's balance.
        public var balance: Int64
        /// Its customer's name.
        public var customer: String
    }

    /// Customers by name.
    public var customers: [String: Customer] = [:]
    /// Accounts by name.
    public var accounts: [String: Account] = [:]
    /// Batch digests by sequence number.
    public var batches: [Int64: String] = [:]

    /// The empty ledger.
    public init() {}

    /// Writer `writer`'s part of the ledger after its saves `0..<count` of seed `seed`.
    public static func after(_ count: Int, seed: UInt64, writer: Int = 0) -> LedgerState {
        var state = LedgerState()
        for sequence in 0..<count {
            state.apply(LedgerSave.plan(sequence, seed: seed, writer: writer, after: state))
        }
        return state
    }

    /// The part of the ledger that writer `writer`'s saves made: its customers and
    /// accounts (named `w<writer>.…`) and its batches.
    public func part(ofWriter writer: Int) -> LedgerState {
        let prefix = "w\(writer)."
        var part = LedgerState()
        part.customers = customers.filter { $0.key.hasPrefix(prefix) }
        part.accounts = accounts.filter { $0.key.hasPrefix(prefix) }
        part.batches = batches.filter { LedgerSave.writer(ofBatch: $0.key) == writer }
        return part
    }

    /// Applies one save.
    public mutating func apply(_ save: LedgerSave) {
        batches[save.sequence] = save.digest
        customers[save.customer] = Customer(tier: save.tier, accounts: Set(save.accounts.map(\.name)))
        for account in save.accounts {
            accounts[account.name] = Account(balance: account.balance, customer: save.customer)
        }
        if let transfer = save.transfer {
            accounts[transfer.from]?.balance -= transfer.amount
            accounts[transfer.to]?.balance += transfer.amount
        }
        if let change = save.tierChange {
            customers[change.customer]?.tier = change.tier
        }
        if let name = save.deletion, let customer = customers.removeValue(forKey: name) {
            for account in customer.accounts { accounts[account] = nil }
        }
    }
}

/// One save of the ledger, a pure function of its writer, its sequence number, the seed
/// and the state before it. Writers save concurrently and never touch each other's
/// objects, so each writer's part of the ledger is its own plan's result.
public struct LedgerSave: Sendable {
    /// Which context path the worker saves it through.
    public enum Route: Int, Sendable, CaseIterable {
        /// A private-queue root context.
        case privateRoot
        /// A child of the private-queue root: saved into it, then the root saves.
        case child
        /// A second root context, on the main queue.
        case mainRoot
    }

    /// The batch's number: the writer in the high 32 bits, the save's sequence number
    /// among the writer's saves in the low ones.
    public var sequence: Int64
    /// The context path the save goes through.
    public var route: Route
    /// The batch record's filler.
    public var digest: String
    /// The new customer and its accounts.
    public var customer: String
    /// The new customer's tier.
    public var tier: Int16
    /// The new customer's accounts and their opening balances.
    public var accounts: [(name: String, balance: Int64)]
    /// Money moved between two existing accounts.
    public var transfer: (from: String, to: String, amount: Int64)?
    /// A new tier for an existing customer.
    public var tierChange: (customer: String, tier: Int16)?
    /// An existing customer deleted with its accounts (none of the transfer's).
    public var deletion: String?

    /// The writer a batch number belongs to.
    public static func writer(ofBatch sequence: Int64) -> Int { Int(sequence >> 32) }

    /// Writer `writer`'s save `sequence` of seed `seed`, given the writer's state before it.
    public static func plan(_ sequence: Int, seed: UInt64, writer: Int = 0, after state: LedgerState) -> LedgerSave {
        var random = SeededRandomNumberGenerator(
            seed: seed ^ (UInt64(sequence) &* 0x9E37_79B9_7F4A_7C15) ^ (UInt64(writer + 1) &* 0xD1B5_4A32_D192_ED03))
        let name = "w\(writer).c\(sequence)"
        let accountCount = 1 + Int(random.next() % 3)
        let accounts = (0..<accountCount).map { ("\(name).a\($0)", Int64(random.next() % 1_000)) }
        let digestLength = 8 + Int(random.next() % 1_500)
        let digest = String(repeating: String(sequence % 10), count: digestLength)
        var save = LedgerSave(
            sequence: Int64(writer) << 32 | Int64(sequence), route: Route(rawValue: Int(random.next() % 3)) ?? .privateRoot,
            digest: digest, customer: name, tier: Int16(random.next() % 5), accounts: accounts)

        let accountNames = state.accounts.keys.sorted()
        var involved: Set<String> = []
        if accountNames.count >= 2, random.next() % 4 != 0 {
            let from = accountNames[Int(random.next() % UInt64(accountNames.count))]
            let to = accountNames[Int(random.next() % UInt64(accountNames.count))]
            if from != to {
                save.transfer = (from, to, Int64(random.next() % 100))
                involved = Set([state.accounts[from]?.customer, state.accounts[to]?.customer].compactMap { $0 })
            }
        }
        let customerNames = state.customers.keys.sorted()
        if !customerNames.isEmpty, random.next() % 3 == 0 {
            let customer = customerNames[Int(random.next() % UInt64(customerNames.count))]
            save.tierChange = (customer, Int16(random.next() % 5))
        }
        if customerNames.count > 3, random.next() % 3 == 0 {
            let customer = customerNames[Int(random.next() % UInt64(customerNames.count))]
            if !involved.contains(customer), customer != save.tierChange?.customer {
                save.deletion = customer
            }
        }
        return save
    }
}
