import Foundation
import StrataLMDB

/// How a ``StoreWriter`` settles a save's conflicts under a merging policy, inside the
/// save's own transaction (<doc:MergePolicies>): the store-independent decisions are
/// ``MergePlanner``'s, over this transaction's reader (``LMDBMergeSource``); the groups of
/// new objects to join come from the unique indexes, and the merged save is written with
/// its unique-index changes checked again.
extension StoreWriter {
    /// The stored state of `id` with its to-many relationships, or nil when it has no row.
    func persistedSnapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        try Self.persistedSnapshot(of: id, store: store, reader: reader)
    }

    /// ``persistedSnapshot(of:)`` through `reader`.
    static func persistedSnapshot(of id: ManagedObjectID, store: StoreFile, reader: borrowing StoreReader<WriteTransaction>) throws -> ObjectSnapshot? {
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: id)
            guard let rows = storage.rows else { return nil }
            let found = try reader.transaction.pointee.withValue(forKey: key.encoded, in: rows) { bytes throws -> ObjectSnapshot? in
                guard let bytes else { return nil }
                return try store.snapshot(ofRecord: bytes, storage: storage, key: key)
            }
            guard var snapshot = found else { return nil }
            let owner = RowReference(entityNumber: storage.number, primaryKey: key)
            for (slot, relationship) in storage.relationships.enumerated() {
                guard let links = relationship.links else { continue }
                snapshot.relationships[slot] = .toMany(try reader.links(of: owner, in: links, ownerEntity: storage.name).map {
                    link throws(StrataError) in try store.objectID(for: link.destination, whereOwner: storage.name, key: key)
                })
            }
            return snapshot
        }
    }

    /// Settles the conflicts of one save under `merging`'s policy and writes it: the
    /// conflicting rows merged (``RowMerge``), changes to rows deleted elsewhere dropped,
    /// deletions of rows changed elsewhere kept or dropped by the policy, relationship
    /// edges made consistent on both ends; then deletions and rows are written as
    /// ``apply(_:deleting:checking:merging:)`` does.
    ///
    /// - Returns: the primary key of each row of `rows` (a dropped row keeps its own), and
    ///   what the merge did.
    mutating func merge(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], merging: SaveMerging,
        rowConflicts: [(index: Int, stored: UInt64?)], deletionConflicts: [(index: Int, stored: UInt64?)],
        unique: UniqueChanges? = nil
    ) throws -> (keys: [UInt64], result: MergeResult) {
        let unique = try unique ?? uniqueChanges(rows, deleting: deleted)
        let planner = MergePlanner(source: LMDBMergeSource(store: store, transaction: reader.transaction))
        let joins = unique.conflicts.isEmpty ? [] : planner.joins(of: unique.conflicts.map { ($0.claimants, $0.existing) }, in: rows, deleting: deleted)
        let plan = try planner.plan(
            rows, deleting: deleted, merging: merging, rowConflicts: rowConflicts, deletionConflicts: deletionConflicts, joins: joins)
        let writtenKeys = try writeChecked(
            plan.written, deleting: plan.keptDeletions,
            unique: try recheck(
                unique, rows: plan.rows, written: plan.written, at: plan.position, resolved: plan.work.resolved,
                keepingTheirKeys: plan.work.keepsItsKeys, deleting: plan.keptDeletions))
        return planner.finish(plan, writtenKeys: writtenKeys)
    }

    /// The unique-index changes of writing the merged save (`written`; `position`: where
    /// each row of `rows` went, nil when dropped), from the first check's (`first`, of
    /// `rows`). Only the rows the merge rebuilt (`resolved`), the stored rows it fixed up and
    /// the rows that were in a constraint conflict are checked again: a row written as it
    /// came that was in no conflict claims values no other row of the save or stored row
    /// holds, and the merged rows take their values from the rows they were in conflict
    /// with (or from the stored holder), so they cannot meet it. Its entries are kept. A
    /// row that became a stored row and keeps its constrained values (`kept`) needs nothing.
    private func recheck(
        _ first: UniqueChanges, rows: EncodedRows, written: EncodedRows, at position: [Int?], resolved: [Int: ObjectSnapshot],
        keepingTheirKeys kept: Set<Int>, deleting deleted: [StoreChanges.Deletion]
    ) throws -> UniqueChanges {
        guard store.hasUniquenessConstraints else { return UniqueChanges() }
        var asIs = [Bool](repeating: false, count: rows.count)
        for index in rows.rows.indices where position[index] != nil && resolved[index] == nil { asIs[index] = true }
        for conflict in first.conflicts {
            for index in conflict.claimants { asIs[index] = false }
        }
        var checking = [Bool](repeating: true, count: written.count)
        for index in rows.rows.indices where asIs[index] { checking[position[index]!] = false }
        for index in kept { if let at = position[index] { checking[at] = false } }
        let keptRemovals = first.removals.filter { removal in removal.row.map { asIs[$0] } ?? false }
        var changes = try uniqueChanges(written, deleting: deleted, checking: checking, released: keptRemovals)
        changes.removals += keptRemovals
        for addition in first.additions where asIs[addition.row] {
            changes.additions.append((addition.database, addition.key, position[addition.row]!))
        }
        return changes
    }
}

/// What a merge reads of an LMDB store: the writer's own transaction, so that it sees
/// what the save wrote so far.
struct LMDBMergeSource: MergeSource {
    let store: StoreFile
    /// The writer's transaction (see ``StoreReader/transaction``: it outlives the merge).
    let transaction: UnsafePointer<WriteTransaction>

    // Each method makes its own reader (a non-copyable value made where it is used: a
    // computed property returning one crashed the optimizer of Swift 6.3.1 when inlined).

    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage { try store.entityStorage(named: entityName) }
    func entityStorage(numbered number: UInt16) -> EntityStorage? { store.entityStorage(numbered: number) }
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID { store.objectID(entity: entityName, key: key) }
    func row(of id: ManagedObjectID) throws(StrataError) -> (storage: EntityStorage, key: PrimaryKey) { try store.row(of: id) }

    func persistedSnapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        let reader = StoreReader(store: store, transaction: transaction)
        return try StoreWriter.persistedSnapshot(of: id, store: store, reader: reader)
    }

    func exists(_ id: ManagedObjectID) throws -> Bool {
        let (storage, key) = try store.row(of: id)
        let store = store
        let transaction = transaction
        return try StoreFile.translatingStorageErrors {
            let reader = StoreReader(store: store, transaction: transaction)
            return try reader.version(at: key, of: storage) != nil
        }
    }

    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID] {
        let reader = StoreReader(store: store, transaction: transaction)
        return try reader.destinations(of: id, relationship: name)
    }

    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        let reader = StoreReader(store: store, transaction: transaction)
        return try reader.snapshot(of: id)
    }
}
