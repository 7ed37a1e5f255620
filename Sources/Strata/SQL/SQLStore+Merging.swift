import Foundation

/// Settling a save's conflicts under a merging policy on a SQL store (<doc:MergePolicies>):
/// the same decisions as on LMDB (``MergePlanner``), in one transaction that first locks
/// every row the save changes, deletes or checks (`SELECT ... FOR UPDATE`), then reads
/// what the decisions need (also locked), and writes the merged rows at the versions it
/// read. Another instance's save to those rows waits for the commit, so nothing it writes
/// can slip between the decision and the write.
extension SQLStore {
    /// Writes `save`, its conflicts settled by `merging` (a policy that merges), on
    /// `connection`, in its transaction.
    ///
    /// - Throws: ``StrataError/mergeConflicts(_:)`` when a ``ManagedObjectContext/detectConflicts(for:)``
    ///   check fails (whatever the policy) or a conflicting row has no change record; what
    ///   a custom policy throws; the errors of a write.
    func writeMerging(_ save: StoreSave, merging: SaveMerging, on connection: any SQLConnection) throws -> WriteOutcome {
        // 1. Lock the rows and read their versions.
        var wanted: [ManagedObjectID] = []
        for row in save.rows.rows where !row.isInsert {
            guard let storage = entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
            wanted.append(objectID(entity: storage.name, key: key))
        }
        wanted += save.deleted.filter { $0.expectedVersion != nil }.map(\.objectID)
        wanted += save.checked.filter { $0.expectedVersion != nil }.map(\.objectID)
        let versions = try lockedVersions(of: wanted, on: connection)
        var rowConflicts: [(index: Int, stored: UInt64?)] = []
        for (index, row) in save.rows.rows.enumerated() where !row.isInsert {
            guard let storage = entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
            let stored = versions[objectID(entity: storage.name, key: key)]
            if stored != row.baseVersion { rowConflicts.append((index, stored)) }
        }
        var deletionConflicts: [(index: Int, stored: UInt64?)] = []
        for (index, deletion) in save.deleted.enumerated() {
            guard let expected = deletion.expectedVersion else { continue }
            let stored = versions[deletion.objectID]
            if stored != expected { deletionConflicts.append((index, stored)) }
        }
        let checksFail = save.checked.contains { check in check.expectedVersion.map { versions[check.objectID] != $0 } ?? false }
        let planner = MergePlanner(source: SQLMergeSource(store: self, connection: connection))
        // New objects claiming constrained values a stored row (locked) or another new
        // object holds become one object: upserts (rule 10).
        var joins: [MergeJoin] = []
        if !checksFail {
            let unique = try uniquenessConflicts(of: save, keys: save.rows.rows.map { Int64(bitPattern: $0.key) }, on: connection, locking: true)
            if !unique.isEmpty {
                joins = planner.joins(of: unique.map { ($0.claimants, $0.existing) }, in: save.rows, deleting: save.deleted)
            }
        }
        if checksFail || (rowConflicts.isEmpty && deletionConflicts.isEmpty && joins.isEmpty) {
            // A failed detectConflicts(for:) check fails the save whatever the policy (the
            // write reports every conflict); with nothing in conflict now, the save is
            // written as it came.
            return try write(save, on: connection)
        }

        // 2. Decide, reading what the decisions need through the same transaction.
        let plan: MergePlanner<SQLMergeSource>.Plan
        do {
            plan = try planner.plan(
                save.rows, deleting: save.deleted, merging: merging, rowConflicts: rowConflicts, deletionConflicts: deletionConflicts,
                joins: joins)
        } catch let StoreWriteError.conflict(conflicts) {
            throw StrataError.mergeConflicts(conflicts.map { conflict in
                MergeConflict(
                    objectID: conflict.objectID,
                    persistedSnapshot: conflict.persisted.flatMap { persisted in
                        (try? entityStorage(named: conflict.objectID.entityName)).map { PropertySnapshot(persisted, entity: $0.entity) }
                    },
                    oldVersion: conflict.expectedVersion, newVersion: conflict.storedVersion)
            })
        }

        // 3. Write the merged save: every row at the version read (locked, so it still is).
        var merged = StoreSave(store: save.store)
        merged.rows = plan.written
        merged.deleted = plan.keptDeletions
        let tombstones = save.history == nil || plan.keptDeletions.isEmpty ? [:] : try tombstones(of: plan.keptDeletions, on: connection)
        let written = try write(merged, on: connection, recordsHistory: false)
        let (keys, result) = planner.finish(plan, writtenKeys: written.keys)
        try recordHistory(of: save, keys: keys, merge: result, tombstones: tombstones, on: connection)
        return WriteOutcome(keys: keys, merge: result)
    }

    /// The versions of the rows of `ids` that exist, each row locked until the transaction
    /// ends (`FOR UPDATE`: a concurrent save of it waits).
    private func lockedVersions(of ids: [ManagedObjectID], on connection: any SQLConnection) throws -> [ManagedObjectID: UInt64] {
        var byTable: [String: [Int64]] = [:]
        for id in ids {
            guard let (table, key) = try? row(of: id) else { continue }
            byTable[table.tableName, default: []].append(key)
        }
        var versions: [ManagedObjectID: UInt64] = [:]
        // Tables in name order, keys in order: two merges lock common rows in the same order.
        for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
            guard let table = layout.tables[name] else { continue }
            for chunk in Array(Set(keys)).sorted().chunks(of: Self.maximumBinds) {
                let sql = "SELECT \(SQLName.quoted(SQLLayout.keyColumn)), \(SQLName.quoted(SQLLayout.versionColumn)) FROM \(table.name) "
                    + "WHERE \(SQLName.quoted(SQLLayout.keyColumn)) IN (\(Self.placeholders(from: 1, count: chunk.count))) "
                    + "ORDER BY \(SQLName.quoted(SQLLayout.keyColumn)) FOR UPDATE"
                for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                    guard let key = row[0].integer.flatMap({ PrimaryKey(UInt64(bitPattern: $0)) }), let version = row[1].integer else { continue }
                    versions[objectID(entity: name, key: key)] = UInt64(bitPattern: version)
                }
            }
        }
        return versions
    }
}

/// What a merge reads of a SQL store: the save's connection, in its transaction. Every
/// row it reads is locked until the commit (`FOR UPDATE`; `FOR KEY SHARE` for a row only
/// checked to exist, so that it cannot go), so that nothing the decisions rest on changes
/// before the merged rows are written.
struct SQLMergeSource: MergeSource {
    let store: SQLStore
    let connection: any SQLConnection

    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage { try store.entityStorage(named: entityName) }
    func entityStorage(numbered number: UInt16) -> EntityStorage? { store.entityStorage(numbered: number) }
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID { store.objectID(entity: entityName, key: key) }

    func row(of id: ManagedObjectID) throws(StrataError) -> (storage: EntityStorage, key: PrimaryKey) {
        let (table, key) = try store.row(of: id)
        guard let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else { throw .invalidObjectState(id, reason: "its primary key is 0") }
        return (table.storage, primaryKey)
    }

    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        let (table, key) = try store.row(of: id)
        let sql = "SELECT \(table.selectList) FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1 FOR UPDATE"
        guard let row = try connection.execute(sql, [.int64(key)]).rows.first else { return nil }
        return try store.snapshot(of: row, table: table)
    }

    func persistedSnapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        guard var snapshot = try snapshot(of: id) else { return nil }
        let storage = try store.entityStorage(named: id.entityName)
        for (slot, relationship) in storage.relationships.enumerated() where relationship.description.isToMany {
            snapshot.relationships[slot] = .toMany(try store.destinations(of: [id], relationship: relationship.description.name, on: connection)[id] ?? [])
        }
        return snapshot
    }

    func exists(_ id: ManagedObjectID) throws -> Bool {
        let (table, key) = try store.row(of: id)
        let sql = "SELECT 1 FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1 FOR KEY SHARE"
        return try !connection.execute(sql, [.int64(key)]).rows.isEmpty
    }

    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID] {
        let storage = try store.entityStorage(named: id.entityName)
        guard let slot = storage.relationshipSlot(named: name) else { throw StrataError.unknownKey(key: name, entity: id.entityName) }
        if storage.relationships[slot].description.isToMany {
            return try store.destinations(of: [id], relationship: name, on: connection)[id] ?? []
        }
        guard case .toOne(let destination?)? = try snapshot(of: id)?.relationships[slot] else { return [] }
        return [destination]
    }
}
