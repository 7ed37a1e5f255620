import Foundation

/// Names one query generation: a frozen state of the stores, which contexts pinned to it
/// read, whatever is saved after (Core Data's `NSQueryGenerationToken`).
///
/// A token is an LMDB transaction id per store (the last commit its snapshot sees) and,
/// for a PostgreSQL store, the server's description of its snapshot, so two tokens are
/// equal exactly when they name the same state. Take one from a pinned
/// context's ``ManagedObjectContext/queryGenerationToken``, or from a save notification
/// (``ContextNotification/queryGenerationToken``), and give it to
/// ``ManagedObjectContext/setQueryGenerationFrom(_:)`` to read that very state:
///
/// ```swift
/// try report.setQueryGenerationFrom(.current)          // pinned at its first read
/// let notes = try report.fetch(FetchRequest<ManagedObject>(entityName: "Note"))
/// try audit.setQueryGenerationFrom(report.queryGenerationToken)   // the same snapshot
/// ```
///
/// A token does not keep its state alive: the snapshot lives while a context is pinned
/// to it. A token whose snapshot is gone (and whose state is no longer the newest) cannot
/// be pinned: ``StrataError/queryGenerationUnavailable(_:)``. See <doc:QueryGenerations>.
public struct QueryGenerationToken: Sendable, Hashable, CustomStringConvertible {
    /// The last transaction id each store's snapshot sees, by store identifier; nil for
    /// ``current``.
    let transactions: [UUID: Int]?
    /// For each server store: its snapshot's description (`xmin:xmax:xip,...`), which
    /// tells apart states with the same horizon (the number in ``transactions``).
    let serverStates: [UUID: String]

    init(transactions: [UUID: Int]?, serverStates: [UUID: String] = [:]) {
        self.transactions = transactions
        self.serverStates = serverStates
    }

    /// The newest committed state, taken when the pinned context first reads.
    public static var current: QueryGenerationToken { QueryGenerationToken(transactions: nil) }

    /// Whether this is ``current`` rather than the name of one state.
    public var isCurrent: Bool { transactions == nil }

    /// The LMDB transaction id (`mdb_txn_id`) whose commit `store`'s snapshot sees (for a
    /// PostgreSQL store, the snapshot's `xmax`: the first transaction id it sees as not yet
    /// begun, which never decreases from one snapshot to a newer one), or nil for
    /// ``current`` and for a store the generation does not name.
    public func transactionID(in store: PersistentStore) -> Int? {
        transactions?[store.identifier]
    }

    /// `QueryGenerationToken(current)`, or the transaction id of each store:
    /// `QueryGenerationToken(6F1E…: 42)`.
    public var description: String {
        guard let transactions else { return "QueryGenerationToken(current)" }
        let stores = transactions.sorted { $0.key.uuidString < $1.key.uuidString }
            .map { "\($0.key.uuidString.prefix(8))…: \($0.value)" }
        return "QueryGenerationToken(\(stores.isEmpty ? "no stores" : stores.joined(separator: ", ")))"
    }

    /// Whether this token names a state no newer than `other` in every store both name
    /// (advancing from `other` to it would go back in time).
    func isNotNewer(than other: QueryGenerationToken) -> Bool {
        guard let mine = transactions, let theirs = other.transactions else { return false }
        return mine.allSatisfy { store, id in
            guard let their = theirs[store] else { return true }
            // A server store's snapshots of one horizon may differ (transactions in
            // progress then): the same one only when the descriptions agree.
            return id < their || (id == their && serverStates[store] == other.serverStates[store])
        }
    }
}

/// What a context does when its query generation is older than a maximum age, at its
/// next read: ``PersistentStoreCoordinator/queryGenerationAgePolicy``.
///
/// A pinned generation holds an LMDB reader slot and stops LMDB from reusing any page
/// freed after it, so the store file grows under writes for as long as it lives. The
/// policy bounds that for contexts that stay pinned by mistake. See <doc:QueryGenerations>.
public enum QueryGenerationAgePolicy: Sendable, Hashable {
    /// Generations live as long as contexts are pinned to them (Core Data's behaviour).
    /// The default.
    case unlimited
    /// A read (fetch, count or fault) of a context whose generation is older than
    /// `maximumAge` throws ``StrataError/queryGenerationExpired(_:age:maximumAge:)``, and
    /// so does every later read, until the context advances (``ManagedObjectContext/setQueryGenerationFrom(_:)``,
    /// a save, a merge or a reset).
    case fail(after: Duration)
    /// A read of a context whose generation is older than `maximumAge` first moves the
    /// context to the newest state, as `setQueryGenerationFrom(.current)` would, and
    /// the context posts ``ContextNotification/Kind/didExpireQueryGeneration`` at the end
    /// of that block. Registered objects keep the values they had.
    case advance(after: Duration)

    /// The maximum age, or nil for ``unlimited``.
    var maximumAge: Duration? {
        switch self {
        case .unlimited: nil
        case .fail(let age), .advance(let age): age
        }
    }
}

/// The query generations open on a coordinator, for monitoring: each one holds a reader
/// slot per store and stops page reuse (``PersistentStoreCoordinator/queryGenerationStatistics``).
public struct QueryGenerationStatistics: Sendable, Hashable {
    /// The reader slots of one store.
    public struct StoreReaders: Sendable, Hashable {
        /// The store's identifier.
        public let storeIdentifier: UUID
        /// Reader slots holding a transaction now, of every process: pinned generations,
        /// reads in flight, other processes' readers.
        public let readerSlotsInUse: Int
        /// The store's reader slots (``PersistentStore/Options/maxReaders``).
        public let maxReaders: Int
        /// How many commits behind the newest the oldest reader's snapshot is: pages
        /// freed by those commits cannot be reused until that reader ends. 0 when no
        /// reader is behind.
        public let oldestReaderLag: Int
    }

    /// Query generations open now (a generation shared by several contexts counts once).
    public let openGenerations: Int
    /// Contexts pinned to one of them now.
    public let pinnedContexts: Int
    /// How long the oldest open generation has been open; nil when none is.
    public let oldestGenerationAge: Duration?
    /// The reader slots of each LMDB store, in the coordinator's order.
    public let stores: [StoreReaders]
    /// The server stores' snapshots open now: each is a `REPEATABLE READ` transaction on a
    /// connection of its own (outside the pool), which keeps the server from removing the
    /// row versions it sees (see <doc:RunningOnPostgreSQL>).
    public let serverSnapshots: Int
}
