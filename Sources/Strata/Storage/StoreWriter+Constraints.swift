import Foundation
import StrataLMDB

/// How a ``StoreWriter`` keeps uniqueness constraints (``StoredConstraint``): every save's
/// unique-index changes are worked out and checked before anything is written, then
/// applied after the rows.
extension StoreWriter {
    /// The unique-index changes of one save.
    struct UniqueChanges {
        /// Entries to remove: values that rows let go of (deleted, or changed).
        var removals: [(database: Database, key: [UInt8])] = []
        /// Entries to add, each for a row of the save (by index: a new row's key is known
        /// only once it is written).
        var additions: [(database: Database, key: [UInt8], row: Int)] = []
        /// The constraints the save breaks.
        var conflicts: [ConstraintConflict] = []
        /// For each conflict, the rows of the save that claim its values.
        var claimants: [[Int]] = []

        /// Whether the save touches no unique index.
        var isEmpty: Bool { removals.isEmpty && additions.isEmpty }
    }

    /// The unique-index changes of writing `rows` and deleting `deleted`, checked against
    /// the store and against each other: a value claimed by two rows of the save, or by a
    /// row of the save and a stored row the save does not delete or move off it, is a
    /// conflict. Reads only.
    func uniqueChanges(_ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion]) throws -> UniqueChanges {
        var changes = UniqueChanges()
        guard store.hasUniquenessConstraints else { return changes }
        struct Entry: Hashable {
            let database: Database
            let key: [UInt8]
        }
        var released: Set<Entry> = []
        var claimed: [Entry: [Int]] = [:]
        var order: [Entry] = []
        var constraintOf: [Entry: (StoredConstraint, EntityStorage)] = [:]
        try StoreFile.translatingStorageErrors {
            for deletion in deleted {
                let (storage, key) = try store.row(of: deletion.objectID)
                guard !storage.constraints.isEmpty, let record = try reader.record(at: key, of: storage) else { continue }
                for constraint in storage.constraints {
                    guard let entry = constraint.key(of: record) else { continue }
                    released.insert(Entry(database: constraint.database, key: entry))
                    changes.removals.append((constraint.database, entry))
                }
            }
            try rows.bytes.withUnsafeBytes { bytes in
                for (index, row) in rows.rows.enumerated() {
                    guard let storage = store.entityStorage(numbered: row.entity), !storage.constraints.isEmpty else { continue }
                    let record: Record
                    do throws(RecordDecodingError) {
                        record = try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: bytes[row.record]))
                    } catch {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: row.key, reason: "its new record: \(error.reason)")
                    }
                    let stored = row.isInsert ? nil : try PrimaryKey(row.key).flatMap { try reader.record(at: $0, of: storage) }
                    for constraint in storage.constraints {
                        let new = constraint.key(of: record)
                        let old = stored.flatMap { constraint.key(of: $0) }
                        if old == new { continue }
                        if let old {
                            released.insert(Entry(database: constraint.database, key: old))
                            changes.removals.append((constraint.database, old))
                        }
                        guard let new else { continue }
                        let entry = Entry(database: constraint.database, key: new)
                        if claimed[entry] == nil {
                            order.append(entry)
                            constraintOf[entry] = (constraint, storage)
                        }
                        claimed[entry, default: []].append(index)
                        changes.additions.append((constraint.database, new, index))
                    }
                }
            }
            for entry in order {
                guard let (constraint, storage) = constraintOf[entry], let claimants = claimed[entry] else { continue }
                var existing: ManagedObjectID?
                if !released.contains(entry) {
                    existing = try reader.transaction.pointee.withValue(forKey: entry.key, in: entry.database) { value throws -> ManagedObjectID? in
                        guard let value else { return nil }
                        guard let reference = RowReference(encoded: value) else {
                            throw StrataError.corruptStore(store: store.path, reason: "an entry of the unique index of \(constraint.owner)[\(constraint.attributes.joined(separator: ", "))] is not a row reference")
                        }
                        return try store.objectID(for: reference, whereOwner: storage.name, key: PrimaryKey(1)!)
                    }
                }
                guard claimants.count > 1 || existing != nil else { continue }
                // The values, from the first claimant's record.
                var values: [String: AttributeValue] = [:]
                let first = rows.rows[claimants[0]]
                if let record = try? rows.bytes.withUnsafeBytes({ try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[first.record])) }) {
                    for (name, field) in zip(constraint.attributes, constraint.fields) { values[name] = record.fields[field] }
                }
                changes.conflicts.append(ConstraintConflict(
                    entityName: constraint.owner, constraint: constraint.attributes, values: values,
                    objectIDs: claimants.map { rowID(rows.rows[$0]) }, existingObjectID: existing))
                changes.claimants.append(claimants)
            }
        }
        return changes
    }

    /// The ID of a row of a save: the one it carries, or its entity's and key's.
    func rowID(_ row: EncodedRow) -> ManagedObjectID {
        if let id = row.objectID { return id }
        guard let storage = store.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else {
            return ManagedObjectID(temporaryFor: "entity \(row.entity)")
        }
        return store.objectID(entity: storage.name, key: key)
    }

    /// Applies checked unique-index changes once the rows are written (`keys`: each row's
    /// primary key).
    func applyUniqueChanges(_ changes: UniqueChanges, rows: EncodedRows, keys: [UInt64]) throws {
        guard !changes.isEmpty else { return }
        try StoreFile.translatingStorageErrors {
            let txn = reader.transaction
            for removal in changes.removals {
                do {
                    try txn.pointee.delete(forKey: removal.key, in: removal.database)
                } catch LMDBError.notFound {
                    // Already gone: a value the save both let go of and claimed again.
                }
            }
            for addition in changes.additions {
                guard let key = PrimaryKey(keys[addition.row]) else { continue }
                let reference = RowReference(entityNumber: rows.rows[addition.row].entity, primaryKey: key)
                try txn.pointee.put(reference.encoded, forKey: addition.key, in: addition.database)
            }
        }
    }
}

extension StoreFile {
    /// The stored object that holds `values` (by slot of `entity`, an entity of this
    /// store) for `constraint` of `entity`'s ``EntityDescription/uniquenessConstraints``,
    /// or nil when none does (or a value is nil). One read of the unique index.
    func holder(ofValues values: (Int) -> AttributeValue?, constraint: [String], entity entityName: String) throws -> ManagedObjectID? {
        let storage = try entityStorage(named: entityName)
        guard let stored = storage.constraints.first(where: { $0.attributes == constraint }), let key = stored.key(values) else { return nil }
        return try read { reader in
            try reader.transaction.pointee.withValue(forKey: key, in: stored.database) { value throws -> ManagedObjectID? in
                guard let value, let reference = RowReference(encoded: value) else { return nil }
                return try objectID(for: reference, whereOwner: entityName, key: PrimaryKey(1)!)
            }
        }
    }
}
