import Foundation

/// A point in a store's persistent history: the transaction it names and everything
/// before it (Core Data's `NSPersistentHistoryToken`). Keep the last one you processed
/// (it is `Codable`) and fetch what came after it.
///
/// Tokens of one store compare in commit order; a token of another store compares by its
/// store first.
public struct PersistentHistoryToken: Sendable, Codable, Hashable, Comparable, CustomStringConvertible {
    /// The store whose history it is (``PersistentStore/identifier``).
    public let storeIdentifier: UUID
    /// The transaction's sequence number in that store: from 1, never reused.
    public let sequence: UInt64

    /// The token of transaction `sequence` of the store `storeIdentifier`.
    public init(storeIdentifier: UUID, sequence: UInt64) {
        self.storeIdentifier = storeIdentifier
        self.sequence = sequence
    }

    /// Commit order within a store; stores ordered by their identifiers.
    public static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.storeIdentifier == rhs.storeIdentifier ? lhs.sequence < rhs.sequence : lhs.storeIdentifier.uuidString < rhs.storeIdentifier.uuidString
    }

    /// `history 42 of 6F1E…`.
    public var description: String { "history \(sequence) of \(storeIdentifier)" }
}

/// One transaction of persistent history: one save that reached a store (Core Data's
/// `NSPersistentHistoryTransaction`), with who made it and what it changed.
public struct PersistentHistoryTransaction: Sendable, Hashable, Identifiable {
    /// Where it stands in its store's history.
    public let token: PersistentHistoryToken
    /// When it committed.
    public let timestamp: Date
    /// The saving context's ``ManagedObjectContext/transactionAuthor``.
    public let author: String?
    /// The saving context's name.
    public let contextName: String?
    /// The process that committed it.
    public let processID: Int32
    /// What it changed, in the order the save wrote it.
    public let changes: [PersistentHistoryChange]

    /// The token.
    public var id: PersistentHistoryToken { token }
}

/// One object's change in a ``PersistentHistoryTransaction`` (Core Data's
/// `NSPersistentHistoryChange`).
public struct PersistentHistoryChange: Sendable, Hashable {
    /// What happened to the object.
    public enum ChangeType: Sendable, Hashable {
        case insert, update, delete
    }

    /// Insert, update or delete.
    public let changeType: ChangeType
    /// The object (its entity's name as the store's current model has it).
    public let changedObjectID: ManagedObjectID
    /// For an update: the names of the properties it changed (as named then); nil otherwise.
    public let updatedProperties: Set<String>?
    /// For a delete: the values of its attributes marked
    /// ``AttributeDescription/preservesValueInHistoryOnDeletion``, by name; nil otherwise.
    public let tombstone: [String: AttributeValue]?
}

/// How much persistent history a store keeps (``PersistentStore/Options/historyRetention``):
/// older transactions are deleted as new ones are recorded, in the same write transaction,
/// so a store that nobody trims by hand stays bounded.
///
/// The default keeps the last 7 days and at most 1,000,000 transactions, whichever is
/// less: enough for processes that catch up within a week. Core Data keeps history until
/// it is deleted (`NSPersistentHistoryChangeRequest.deleteHistory(before:)`); ``unlimited``
/// does the same here.
public struct PersistentHistoryRetention: Sendable, Hashable {
    /// The most transactions kept; nil for no limit.
    public var maximumTransactions: Int?
    /// The oldest a kept transaction may be; nil for no limit.
    public var maximumAge: Duration?

    /// A policy keeping at most `maximumTransactions` transactions, none older than `maximumAge`.
    public init(maximumTransactions: Int?, maximumAge: Duration?) {
        self.maximumTransactions = maximumTransactions.map { max(1, $0) }
        self.maximumAge = maximumAge
    }

    /// The last 7 days, at most 1,000,000 transactions.
    public static let `default` = PersistentHistoryRetention(maximumTransactions: 1_000_000, maximumAge: .seconds(7 * 24 * 3600))
    /// Everything, until deleted with ``PersistentHistoryChangeRequest/deleteHistory(before:)-(PersistentHistoryToken)``.
    public static let unlimited = PersistentHistoryRetention(maximumTransactions: nil, maximumAge: nil)
}


extension PersistentHistoryTransaction {
    /// The transaction's objects by what happened to them, under
    /// ``ManagedObjectContext/NotificationKey/insertedObjectIDs``,
    /// ``ManagedObjectContext/NotificationKey/updatedObjectIDs`` and
    /// ``ManagedObjectContext/NotificationKey/deletedObjectIDs``: what
    /// ``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)`` takes (Core Data's
    /// `objectIDNotification()`).
    public var objectIDChanges: [String: [ManagedObjectID]] {
        var changes: [String: [ManagedObjectID]] = [:]
        for change in self.changes {
            let key: ManagedObjectContext.NotificationKey = switch change.changeType {
            case .insert: .insertedObjectIDs
            case .update: .updatedObjectIDs
            case .delete: .deletedObjectIDs
            }
            changes[key.rawValue, default: []].append(change.changedObjectID)
        }
        return changes
    }
}

extension ManagedObjectContext {
    /// Brings the changes of `transactions` (fetched from persistent history, made by
    /// other contexts or other processes) into the context, oldest first, as
    /// ``mergeChanges(fromContextDidSave:)-(ContextNotification)`` does for a save it was
    /// told about: updated objects it holds are refreshed, deleted ones leave, and it
    /// posts ``didMergeChangesObjectIDsNotification``. An object deleted by a later
    /// transaction counts as deleted only.
    ///
    /// - Throws: a storage error while refreshing.
    public func mergeChanges(fromHistory transactions: [PersistentHistoryTransaction]) throws {
        var inserted = Set<ManagedObjectID>(), updated = Set<ManagedObjectID>(), deleted = Set<ManagedObjectID>()
        for transaction in transactions.sorted(by: { $0.token < $1.token }) {
            for change in transaction.changes {
                switch change.changeType {
                case .insert: inserted.insert(change.changedObjectID)
                case .update: updated.insert(change.changedObjectID)
                case .delete: deleted.insert(change.changedObjectID)
                }
            }
        }
        inserted.subtract(deleted)
        updated.subtract(deleted)
        try mergeChanges(inserted: inserted, updated: updated, deleted: deleted, generation: nil)
    }
}
