import Foundation
import StrataLMDB

/// What one save records in persistent history, made by the saving context for each store
/// that tracks it (``PersistentStore/Options/tracksPersistentHistory``).
struct SaveHistory: Sendable {
    /// The context's ``ManagedObjectContext/transactionAuthor``.
    var author: String?
    /// The context's name.
    var contextName: String?
    /// The names of each updated row's changed properties, by row index in the save (nil
    /// for a new row; rows past the end are new too).
    var updatedProperties: [[String]?] = []

    /// Records `names` as the changed properties of row `index`.
    mutating func setUpdatedProperties(_ names: [String], ofRow index: Int) {
        while updatedProperties.count < index { updatedProperties.append(nil) }
        if updatedProperties.count == index { updatedProperties.append(names) } else { updatedProperties[index] = names }
    }
}

extension PersistentStoreCoordinator {
    /// The tombstones of the objects `save` deletes: the stored values of their attributes
    /// marked ``AttributeDescription/preservesValueInHistoryOnDeletion``, read before the
    /// write deletes the rows.
    nonisolated func tombstones(of save: StoreSave, with writer: borrowing StoreWriter) throws -> [ManagedObjectID: [String: AttributeValue]] {
        var tombstones: [ManagedObjectID: [String: AttributeValue]] = [:]
        for deletion in save.deleted {
            guard let key = deletion.objectID.primaryKey,
                  let storage = try? save.store.entityStorage(named: deletion.objectID.entityName)
            else { continue }
            let kept = storage.attributes.filter { $0.description.preservesValueInHistoryOnDeletion && $0.field != nil }
            guard !kept.isEmpty, let record = try writer.reader.record(at: key, of: storage) else { continue }
            var values: [String: AttributeValue] = [:]
            for attribute in kept {
                if let field = attribute.field, let value = record.fields[field] { values[attribute.description.name] = value }
            }
            tombstones[deletion.objectID] = values
        }
        return tombstones
    }

    /// Appends the history transaction of `save`, written with `keys` (and settled as
    /// `merge` says), in the writer's transaction: with the data, or not at all.
    nonisolated func recordHistory(
        _ history: SaveHistory, of save: StoreSave, keys: [UInt64], merge: MergeResult?,
        tombstones: [ManagedObjectID: [String: AttributeValue]], with writer: borrowing StoreWriter
    ) throws {
        let changes = history.changes(of: save, keys: keys, merge: merge, tombstones: tombstones)
        guard !changes.isEmpty else { return }
        let record = HistoryRecord(
            timestamp: Date(), author: history.author, contextName: history.contextName, processID: getpid(), changes: changes)
        let file = try save.store.requireLMDB("persistent history")
        _ = try HistoryLog.append(
            record, in: writer.reader.transaction.pointee, history: file.historyDatabase, metadata: file.metadataDatabase,
            retention: save.store.options.historyRetention)
    }
}

/// A row, by entity number and primary key.
private struct RowKey: Hashable {
    let entity: UInt16
    let key: UInt64
}

extension SaveHistory {
    /// The history changes of `save`, written with `keys` (each row's primary key) and
    /// settled as `merge` says: a row per changed object (new objects joined into one are
    /// one change; an upsert is an update of every attribute), none for a change dropped
    /// because its object was deleted elsewhere, and a delete (with its tombstone) per
    /// deleted object that stayed deleted.
    func changes(
        of save: StoreSave, keys: [UInt64], merge: MergeResult?, tombstones: [ManagedObjectID: [String: AttributeValue]]
    ) -> [HistoryRecord.Change] {
        let history = self
        var changes: [HistoryRecord.Change] = []
        changes.reserveCapacity(save.rows.count + save.deleted.count)
        // New objects merged into one row (a uniqueness constraint) are one change.
        let mayRepeat = !(merge?.adopted.isEmpty ?? true)
        var seen = Set<RowKey>()
        for (index, row) in save.rows.rows.enumerated() where index < keys.count {
            let key = keys[index]
            guard key != 0 else { continue }
            if mayRepeat && !seen.insert(RowKey(entity: row.entity, key: key)).inserted { continue }
            if let id = row.objectID, merge?.vanished.contains(id) == true { continue }   // deleted elsewhere: not written
            var kind: HistoryRecord.Kind = row.isInsert ? .insert : .update
            var updated = index < history.updatedProperties.count ? history.updatedProperties[index] ?? [] : []
            if row.isInsert, let id = row.objectID, let adopted = merge?.adopted[id], merge?.joinedInserts.contains(adopted) == false {
                // An upsert: the new object became a stored one, whose values it set.
                kind = .update
                updated = save.store.entityStorage(numbered: row.entity)?.entity.attributes.filter { !$0.isTransient }.map(\.name) ?? []
            }
            changes.append(HistoryRecord.Change(kind: kind, entity: row.entity, primaryKey: key, updatedProperties: kind == .update ? updated : []))
        }
        for deletion in save.deleted where merge?.undeleted[deletion.objectID] == nil {
            guard let key = deletion.objectID.primaryKey?.rawValue,
                  let entity = save.store.schema.entityNumber(of: deletion.objectID.entityName)
            else { continue }
            changes.append(HistoryRecord.Change(kind: .delete, entity: entity, primaryKey: key, tombstone: tombstones[deletion.objectID] ?? [:]))
        }
        return changes
    }
}
