import Strata

// The model the reliability suite saves: customers own accounts (one-to-many, cascade),
// and every save writes one batch record naming its sequence number. Indexed names let
// the audit check index entries against rows.

/// A customer; deleting one deletes its accounts.
public final class LedgerCustomer: ManagedObject {
    /// Unique name, `c<sequence of the save that made it>`.
    @Attribute(indexed: true) public var name: String = ""
    /// A small number the saves change now and then.
    @Attribute public var tier: Int16 = 0
    /// The customer's accounts.
    @Relationship(inverse: "customer", deleteRule: .cascade) public var accounts: Set<LedgerAccount>
}

/// An account of one customer.
public final class LedgerAccount: ManagedObject {
    /// Unique name, `<customer>.a<n>`.
    @Attribute(indexed: true) public var name: String = ""
    /// Money moved between accounts by transfers.
    @Attribute public var balance: Int64 = 0
    /// The owning customer.
    @Relationship(inverse: "accounts") public var customer: LedgerCustomer?
}

/// One record per save, so the audit knows exactly which saves committed.
public final class LedgerBatch: ManagedObject {
    /// The save's sequence number: 0, 1, 2, ... with no gaps.
    @Attribute(indexed: true) public var sequence: Int64 = 0
    /// Deterministic filler of varying length, so that saves touch varying numbers of pages.
    @Attribute public var digest: String = ""
}

/// The reliability suite's model.
public enum LedgerModel {
    /// Customers, accounts and batches.
    public static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [LedgerCustomer.self, LedgerAccount.self, LedgerBatch.self])
        } catch {
            preconditionFailure("the ledger model is invalid: \(error)")
        }
    }()
}
