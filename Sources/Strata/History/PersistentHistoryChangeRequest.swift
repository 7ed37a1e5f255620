import Foundation
import StrataLMDB

/// A request that reads or trims persistent history (Core Data's
/// `NSPersistentHistoryChangeRequest`), run by
/// ``PersistentStoreCoordinator/execute(_:)-(PersistentHistoryChangeRequest)`` or ``ManagedObjectContext/execute(_:)-(PersistentHistoryChangeRequest)``.
///
/// ```swift
/// var request = PersistentHistoryChangeRequest.fetchHistory(after: lastToken)
/// request.authors = ["importer"]
/// for transaction in try coordinator.execute(request).transactions {
///     for change in transaction.changes { … }
///     lastToken = transaction.token
/// }
/// ```
public struct PersistentHistoryChangeRequest: Sendable, Hashable {
    /// What the request does.
    enum Action: Sendable, Hashable {
        case fetchAfterToken(PersistentHistoryToken?)
        case fetchAfterDate(Date)
        case deleteBeforeToken(PersistentHistoryToken)
        case deleteBeforeDate(Date)
    }

    let action: Action
    /// Only transactions by these authors (``PersistentHistoryTransaction/author``); nil
    /// for every author. Fetches only.
    public var authors: Set<String>?
    /// Only changes of these entities (and transactions with such a change); nil for
    /// every entity. Fetches only.
    public var entityNames: Set<String>?
    /// At most this many transactions; nil for all of them. Fetches only.
    public var fetchLimit: Int?

    /// Whether no author or entity filter applies (a limit can then stop the read early).
    var filtersNothing: Bool { authors == nil && entityNames == nil }

    /// The transactions after `token` (every one for nil), oldest first, in every store
    /// that tracks history: after the token in its own store, all of them in the others.
    public static func fetchHistory(after token: PersistentHistoryToken?) -> Self { Self(action: .fetchAfterToken(token)) }

    /// The transactions committed at or after `date`, oldest first.
    public static func fetchHistory(after date: Date) -> Self { Self(action: .fetchAfterDate(date)) }

    /// Deletes the transactions before `token` (of its store), oldest first; the result
    /// counts them.
    public static func deleteHistory(before token: PersistentHistoryToken) -> Self { Self(action: .deleteBeforeToken(token)) }

    /// Deletes the transactions committed before `date`, in every store; the result
    /// counts them.
    public static func deleteHistory(before date: Date) -> Self { Self(action: .deleteBeforeDate(date)) }

    private init(action: Action) {
        self.action = action
    }
}

/// What a ``PersistentHistoryChangeRequest`` returned.
public struct PersistentHistoryResult: Sendable, Hashable {
    /// The transactions a fetch found, oldest first (by store, then commit order); empty
    /// for a delete.
    public let transactions: [PersistentHistoryTransaction]
    /// How many transactions a delete removed, or a fetch found.
    public let count: Int
}

extension PersistentStoreCoordinator {
    /// Runs `request` over the stores that track persistent history.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` (entity
    ///   `strata.history`) for a transaction that does not decode; ``StrataError/storage(_:)``.
    public nonisolated func execute(_ request: PersistentHistoryChangeRequest) throws(StrataError) -> PersistentHistoryResult {
        var transactions: [PersistentHistoryTransaction] = []
        var deleted = 0
        for store in persistentStores where store.options.tracksPersistentHistory {
            if let sql = store.sql {
                switch request.action {
                case .fetchAfterToken(let token):
                    let after = token.flatMap { $0.storeIdentifier == store.identifier ? $0.sequence : nil }
                    let found = try sql.historyRecords(after: after, limit: request.filtersNothing ? request.fetchLimit : nil)
                    transactions += Self.transactions(found.records, of: store, matching: request)
                case .fetchAfterDate(let date):
                    let found = try sql.historyRecords(after: nil, since: date, limit: request.filtersNothing ? request.fetchLimit : nil)
                    transactions += Self.transactions(found.records, of: store, matching: request)
                case .deleteBeforeToken(let token):
                    guard token.storeIdentifier == store.identifier else { continue }
                    deleted += try sql.deleteHistory(before: token.sequence)
                case .deleteBeforeDate(let date):
                    deleted += try sql.deleteHistory(before: date)
                }
                continue
            }
            guard let file = store.file else { continue }
            do {
                switch request.action {
                case .fetchAfterToken(let token):
                    let after = token.flatMap { $0.storeIdentifier == store.identifier ? $0.sequence : nil }
                    let records = try file.withReadTransaction(in: nil) { txn in
                        try HistoryLog.records(after: after, limit: request.filtersNothing ? request.fetchLimit : nil, in: txn, history: file.historyDatabase)
                    }
                    transactions += Self.transactions(records, of: store, matching: request)
                case .fetchAfterDate(let date):
                    let records = try file.withReadTransaction(in: nil) { txn in
                        try HistoryLog.records(
                            after: nil, since: date, limit: request.filtersNothing ? request.fetchLimit : nil, in: txn, history: file.historyDatabase)
                    }
                    transactions += Self.transactions(records, of: store, matching: request)
                case .deleteBeforeToken(let token):
                    guard token.storeIdentifier == store.identifier else { continue }
                    deleted += try writeGate.admit {
                        try file.writeHistory { txn in try HistoryLog.delete(before: token.sequence, in: txn, history: file.historyDatabase) }
                    }
                case .deleteBeforeDate(let date):
                    deleted += try writeGate.admit {
                        try file.writeHistory { txn in try HistoryLog.delete(before: date, in: txn, history: file.historyDatabase) }
                    }
                }
            } catch let error as StrataError {
                throw error
            } catch {
                throw .storage(error as? LMDBError ?? LMDBError(code: LMDBError.invalidArgument.code, message: "\(error)"))
            }
        }
        if let limit = request.fetchLimit, transactions.count > limit { transactions.removeLast(transactions.count - limit) }
        return PersistentHistoryResult(transactions: transactions, count: transactions.isEmpty ? deleted : transactions.count)
    }

    /// The token of the last transaction of each store that tracks history, for the
    /// stores given (every store for nil): where a reader that has processed everything
    /// until now stands. Nil when no such store has history yet.
    public nonisolated func currentPersistentHistoryToken(fromStores stores: [PersistentStore]? = nil) throws(StrataError) -> PersistentHistoryToken? {
        var latest: PersistentHistoryToken?
        for store in stores ?? persistentStores where store.options.tracksPersistentHistory {
            if let sql = store.sql, let sequence = try sql.lastHistorySequence() {
                latest = PersistentHistoryToken(storeIdentifier: store.identifier, sequence: sequence)
            } else if let file = store.file, let sequence = try HistoryLog.lastSequence(of: file) {
                latest = PersistentHistoryToken(storeIdentifier: store.identifier, sequence: sequence)
            }
        }
        return latest
    }

    /// `records` of `store` as public transactions, filtered by `request`'s authors and entities.
    static func transactions(
        _ records: [(sequence: UInt64, record: HistoryRecord)], of store: PersistentStore, matching request: PersistentHistoryChangeRequest
    ) -> [PersistentHistoryTransaction] {
        records.compactMap { sequence, record in
            if let authors = request.authors {
                guard let author = record.author, authors.contains(author) else { return nil }
            }
            let changes = record.changes.compactMap { change -> PersistentHistoryChange? in
                guard let entity = store.schema.entityNames[change.entity], let key = PrimaryKey(change.primaryKey) else { return nil }
                if let names = request.entityNames, !names.contains(entity) { return nil }
                return PersistentHistoryChange(
                    changeType: change.kind == .insert ? .insert : change.kind == .update ? .update : .delete,
                    changedObjectID: store.objectID(entity: entity, key: key),
                    updatedProperties: change.kind == .update ? Set(change.updatedProperties) : nil,
                    tombstone: change.kind == .delete ? change.tombstone : nil)
            }
            if request.entityNames != nil && changes.isEmpty { return nil }
            return PersistentHistoryTransaction(
                token: PersistentHistoryToken(storeIdentifier: store.identifier, sequence: sequence), timestamp: record.timestamp,
                author: record.author, contextName: record.contextName, processID: record.processID, changes: changes)
        }
    }
}

extension ManagedObjectContext {
    /// Runs `request` through the context's coordinator (``PersistentStoreCoordinator/execute(_:)-(PersistentHistoryChangeRequest)``).
    ///
    /// - Throws: ``StrataError/noCoordinator`` for a context without one; the
    ///   coordinator's errors.
    public func execute(_ request: PersistentHistoryChangeRequest) throws(StrataError) -> PersistentHistoryResult {
        guard let coordinator = persistentStoreCoordinator else { throw .noCoordinator }
        return try coordinator.execute(request)
    }
}

extension HistoryLog {
    /// The sequence number of the last transaction recorded in `file` (kept even after it
    /// is deleted); nil when none was.
    static func lastSequence(of file: StoreFile) throws(StrataError) -> UInt64? {
        try StoreFile.storage {
            try file.environment.read { txn in
                try txn.value(forKey: Array(HistoryLog.sequenceKey.utf8), in: file.metadataDatabase)
            }
        }.flatMap { bytes in bytes.count == 8 ? bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } : nil }
    }
}

extension StoreFile {
    /// Runs `body` in a write transaction of its own, for the history's upkeep.
    func writeHistory<R>(_ body: (borrowing WriteTransaction) throws -> R) throws -> R {
        try StoreFile.translatingStorageErrors {
            try environment.write { txn in
                try checkModelUnchanged(txn)
                return try body(txn)
            }
        }
    }
}
