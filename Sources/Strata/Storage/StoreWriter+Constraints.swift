import Foundation
import StrataLMDB

/// How a ``StoreWriter`` keeps uniqueness constraints (``StoredConstraint``): every save's
/// unique-index changes are worked out and checked before anything is written, then
/// applied after the rows.
extension StoreWriter {
    /// The unique-index changes of one save.
    struct UniqueChanges {
        /// Entries to remove: values that rows let go of (deleted: no row; or changed: the
        /// index of the row that changed).
        var removals: [(database: Database, key: [UInt8], row: Int?)] = []
        /// Entries to add, each for a row of the save (by index: a new row's key is known
        /// only once it is written).
        var additions: [(database: Database, key: [UInt8], row: Int)] = []
        /// The constraints the save breaks (their public records are made only when the
        /// save fails: ``StoreWriter/records(of:in:)``).
        var conflicts: [UniqueConflict] = []

        /// Whether the save touches no unique index.
        var isEmpty: Bool { removals.isEmpty && additions.isEmpty }
    }

    /// Values of one constraint claimed by several rows of a save, or by a row of the save
    /// and a stored row.
    struct UniqueConflict {
        let constraint: StoredConstraint
        /// The rows of the save that claim the values, in order.
        let claimants: [Int]
        /// The stored object that holds them, if any.
        let existing: ManagedObjectID?
    }

    /// The public records of `conflicts`, found in `rows`.
    func records(of conflicts: [UniqueConflict], in rows: EncodedRows) -> [ConstraintConflict] {
        conflicts.map { conflict in
            // The values, from the first claimant's record.
            var values: [String: AttributeValue] = [:]
            let first = rows.rows[conflict.claimants[0]]
            if let record = try? rows.bytes.withUnsafeBytes({ try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[first.record])) }) {
                for (name, field) in zip(conflict.constraint.attributes, conflict.constraint.fields) { values[name] = record.fields[field] }
            }
            return ConstraintConflict(
                entityName: conflict.constraint.owner, constraint: conflict.constraint.attributes, values: values,
                objectIDs: conflict.claimants.map { rowID(rows.rows[$0]) }, existingObjectID: conflict.existing)
        }
    }

    /// The unique-index changes of writing `rows` and deleting `deleted`, checked against
    /// the store and against each other: a value claimed by two rows of the save, or by a
    /// row of the save and a stored row the save does not delete or move off it, is a
    /// conflict. Reads only.
    ///
    /// With `checking`, only the rows it marks are looked at, and `released` lists values
    /// that the other rows let go of (so a marked row may take them): a merge rechecks the
    /// rows it rebuilt and keeps what the first check found for the rows it left alone.
    func uniqueChanges(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], checking: [Bool]? = nil,
        released alsoReleased: [(database: Database, key: [UInt8], row: Int?)] = []
    ) throws -> UniqueChanges {
        var changes = UniqueChanges()
        guard store.hasUniquenessConstraints else { return changes }
        struct Entry: Hashable {
            let database: Database
            let key: [UInt8]

            func hash(into hasher: inout Hasher) {
                hasher.combine(database)
                key.withUnsafeBytes { hasher.combine(bytes: $0) }   // not byte by byte, as an array hashes
            }
        }
        /// One value claimed by rows of the save.
        struct Claim {
            let entry: Entry
            let constraint: StoredConstraint
            let storage: EntityStorage
            /// The rows that claim it, in order.
            var rows: [Int]
        }
        var released: Set<Entry> = []
        var claims: [Claim] = []
        /// The position in `claims` of each value claimed.
        var claimed: [Entry: Int] = [:]
        claims.reserveCapacity(rows.count)
        claimed.reserveCapacity(rows.count)
        try StoreFile.translatingStorageErrors {
            for deletion in deleted {
                let (storage, key) = try store.row(of: deletion.objectID)
                guard !storage.constraints.isEmpty, let record = try reader.record(at: key, of: storage) else { continue }
                for constraint in storage.constraints {
                    guard let entry = constraint.key(of: record) else { continue }
                    released.insert(Entry(database: constraint.database, key: entry))
                    changes.removals.append((constraint.database, entry, nil))
                }
            }
            for removal in alsoReleased { released.insert(Entry(database: removal.database, key: removal.key)) }
            try rows.bytes.withUnsafeBytes { bytes in
                for (index, row) in rows.rows.enumerated() {
                    if let checking, !checking[index] { continue }
                    guard let storage = store.entityStorage(numbered: row.entity), !storage.constraints.isEmpty else { continue }
                    let record = UnsafeRawBufferPointer(rebasing: bytes[row.record])
                    let stored = row.isInsert ? nil : PrimaryKey(row.key)
                    for constraint in storage.constraints {
                        let new: [UInt8]?
                        do throws(RecordDecodingError) {
                            new = try constraint.key(ofRecord: record)
                        } catch {
                            throw StrataError.corruptRecord(entity: storage.name, primaryKey: row.key, reason: "its new record: \(error.reason)")
                        }
                        let old = try stored.flatMap { try storedKey(of: constraint, at: $0, of: storage) }
                        if old == new { continue }
                        if let old {
                            released.insert(Entry(database: constraint.database, key: old))
                            changes.removals.append((constraint.database, old, index))
                        }
                        guard let new else { continue }
                        let entry = Entry(database: constraint.database, key: new)
                        // One hash of the entry for a value claimed once (the common case).
                        if let earlier = claimed.updateValue(claims.count, forKey: entry) {
                            claimed[entry] = earlier
                            claims[earlier].rows.append(index)
                        } else {
                            claims.append(Claim(entry: entry, constraint: constraint, storage: storage, rows: [index]))
                        }
                        changes.additions.append((constraint.database, new, index))
                    }
                }
            }
            for claim in claims {
                let (entry, constraint, storage, claimants) = (claim.entry, claim.constraint, claim.storage, claim.rows)
                var existing: ManagedObjectID?
                if released.isEmpty || !released.contains(entry) {
                    existing = try reader.transaction.pointee.withValue(forKey: entry.key, in: entry.database) { value throws -> ManagedObjectID? in
                        guard let value else { return nil }
                        guard let reference = RowReference(encoded: value) else {
                            throw StrataError.corruptStore(store: store.path, reason: "an entry of the unique index of \(constraint.owner)[\(constraint.attributes.joined(separator: ", "))] is not a row reference")
                        }
                        return try store.objectID(for: reference, whereOwner: storage.name, key: PrimaryKey(1)!)
                    }
                }
                guard claimants.count > 1 || existing != nil else { continue }
                changes.conflicts.append(UniqueConflict(constraint: constraint, claimants: claimants, existing: existing))
            }
        }
        return changes
    }

    /// The key of `constraint` for the stored row `key` of `storage`'s entity, or nil when
    /// the row has none (or no such row).
    private func storedKey(of constraint: StoredConstraint, at key: PrimaryKey, of storage: EntityStorage) throws -> [UInt8]? {
        guard let rows = storage.rows else { return nil }
        return try reader.transaction.pointee.withValue(forKey: key.encoded, in: rows) { bytes throws -> [UInt8]? in
            guard let bytes else { return nil }
            do throws(RecordDecodingError) {
                return try constraint.key(ofRecord: bytes)
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
        }
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
