import Foundation

/// Batch update and delete requests on a SQL store: set-based statements in one
/// transaction, below every context (<doc:BatchRequests>), with the same rules as on LMDB:
/// values converted and validated, every failure gathered before anything is written,
/// delete rules followed to their end, history recorded in the same transaction.
extension SQLStore {
    /// What a batch request did in the store.
    struct BatchWrite {
        /// The rows updated or deleted.
        var rows: [ManagedObjectID] = []
        /// Rows left in place whose relationship (named) changed: the partners a delete
        /// nullified or unlinked.
        var touched: [(id: ManagedObjectID, relationship: String)] = []
        /// The history transaction recorded, if the store records history and something changed.
        var historySequence: Int64?
    }

    /// One attribute a batch update sets: its column, description and expression.
    struct BatchSetting {
        let column: SQLColumn
        let attribute: AttributeDescription
        let expression: UpdateExpression
    }

    /// Runs `body` in a transaction, again (at most 5 times) when a deadlock chose it as
    /// its victim (it rolled back: running it again is safe).
    private func batchTransaction<R>(_ body: (any SQLConnection) throws -> R) throws -> R {
        var attempts = 1
        while true {
            do {
                return try withConnectionPassingErrors { connection in try connection.transaction { try body(connection) } }
            } catch let error as StrataError where attempts < 5 && ["40001", "40P01"].contains(error.databaseFailure?.sqlState ?? "") {
                attempts += 1
            }
        }
    }

    /// Locks the rows of `ids` that are stored (`FOR UPDATE`: a save or batch of another
    /// instance that changes them waits for this transaction, and this one for it), in
    /// table and key order; returns the IDs locked.
    private func lock(_ ids: [ManagedObjectID], on connection: any SQLConnection) throws -> Set<ManagedObjectID> {
        var byTable: [String: [Int64]] = [:]
        for id in ids {
            guard let (table, key) = try? row(of: id) else { continue }
            byTable[table.tableName, default: []].append(key)
        }
        var locked = Set<ManagedObjectID>()
        for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
            guard let table = layout.tables[name] else { continue }
            for chunk in keys.sorted().chunks(of: Self.maximumBinds) {
                let key = SQLName.quoted(SQLLayout.keyColumn)
                let sql = "SELECT \(key) FROM \(table.name) WHERE \(key) IN (\(Self.placeholders(from: 1, count: chunk.count))) ORDER BY \(key) FOR UPDATE"
                for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                    if let found = row.first?.integer.flatMap({ PrimaryKey(UInt64(bitPattern: $0)) }) { locked.insert(objectID(entity: name, key: found)) }
                }
            }
        }
        return locked
    }

    /// The stored rows `request` matches, locked: matched, locked, then matched again among
    /// the locked rows (a row another instance changed before the lock is judged on its
    /// new values; one that came to match after the first look is left for later).
    private func lockedMatches(_ request: FetchRequest<ManagedObjectID>, on connection: any SQLConnection) throws -> [ManagedObjectID] {
        let locked = try lock(try matchingIDs(request, on: connection), on: connection)
        return try matchingIDs(request, on: connection).filter(locked.contains)
    }

    /// The IDs of the rows `fetch` matches (its ``FetchRequest/resultType`` ignored), read
    /// on `connection`.
    private func matchingIDs(_ request: FetchRequest<ManagedObjectID>, on connection: any SQLConnection) throws -> [ManagedObjectID] {
        var request = request
        request.resultType = .managedObjectID
        guard case .objectIDs(let ids) = try self.fetch(request, on: connection) else { return [] }
        return ids
    }

    // MARK: Update

    /// Sets `settings` (by entity: each concrete entity's columns) in every row `fetch`
    /// matches, each value computed from the row's values before the update; rows whose
    /// values do not change are left alone. Changed rows get a new version.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every failure,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)``, ``StrataError/constraintConflicts(_:)``
    ///   (nothing written); ``StrataError/database(store:failure:)``.
    func batchUpdate(
        _ fetch: FetchRequest<ManagedObjectID>, settings: (SQLTable) throws -> [BatchSetting], names: [String],
        history: (author: String?, contextName: String?)?, retention: PersistentHistoryRetention
    ) throws -> BatchWrite {
        try batchTransaction { connection in
            var write = BatchWrite()
            var changes: [HistoryRecord.Change] = []
            let ids = try lockedMatches(fetch, on: connection)
            var byTable: [String: [Int64]] = [:]
            for id in ids {
                guard let (table, key) = try? row(of: id) else { continue }
                byTable[table.tableName, default: []].append(key)
            }
            for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
                guard let table = layout.tables[name] else { continue }
                let changed = try batchUpdate(table, keys: keys.sorted(), settings: try settings(table), on: connection)
                for key in changed {
                    guard let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else { continue }
                    write.rows.append(objectID(entity: name, key: primaryKey))
                    changes.append(HistoryRecord.Change(kind: .update, entity: table.storage.number, primaryKey: primaryKey.rawValue, updatedProperties: names))
                }
            }
            write.historySequence = try appendHistory(changes, author: history?.author, contextName: history?.contextName, recording: history != nil, retention: retention, on: connection)
            return write
        }
    }

    /// The batch update of `keys` (ascending) of `table`: rows read and locked, values
    /// computed and checked, changed rows written in multi-row statements.
    ///
    /// - Returns: the keys of the rows that changed.
    private func batchUpdate(_ table: SQLTable, keys: [Int64], settings: [BatchSetting], on connection: any SQLConnection) throws -> [Int64] {
        guard !keys.isEmpty, !settings.isEmpty else { return [] }
        let storage = table.storage
        // The columns read: the set ones first (their old values), then those the expressions read.
        var read: [SQLColumn] = settings.map(\.column)
        var compiled: [UpdateExpression.Compiled] = []
        for setting in settings {
            compiled.append(try setting.expression.compiled(for: setting.attribute, entityName: storage.name) { name in
                if let index = read.firstIndex(where: { $0.name == name }) { return index }
                guard let slot = storage.attributeSlot(named: name), let column = table.attributeColumns[slot] else { return nil }
                read.append(column)
                return read.count - 1
            })
        }
        let readList = read.map(\.quoted).joined(separator: ", ")   // rows already locked (lockedMatches)
        var failures: [ValidationFailure] = []
        var changed: [(key: Int64, values: [AttributeValue?])] = []
        for chunk in keys.chunks(of: Self.maximumBinds) {
            let sql = "SELECT \(SQLName.quoted(SQLLayout.keyColumn)), \(readList) FROM \(table.name) "
                + "WHERE \(SQLName.quoted(SQLLayout.keyColumn)) IN (\(Self.placeholders(from: 1, count: chunk.count))) "
                + "ORDER BY \(SQLName.quoted(SQLLayout.keyColumn))"
            for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                guard let key = row[0].integer, let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else { continue }
                let id = objectID(entity: storage.name, key: primaryKey)
                var old: [AttributeValue?] = []
                for (offset, column) in read.enumerated() {
                    guard case .attribute(_, let type) = column.kind else { old.append(nil); continue }
                    do {
                        old.append(try SQLColumn.attributeValue(row[offset + 1], of: type))
                    } catch {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: primaryKey.rawValue, reason: "\(column.name): \(error.description)")
                    }
                }
                var new: [AttributeValue?] = []
                var differs = false
                for (index, setting) in settings.enumerated() {
                    let value = try setting.expression.value(of: compiled[index], on: old, for: setting.attribute, entityName: storage.name, row: id)
                    ManagedObject.check(value, against: setting.attribute) { reason in
                        failures.append(ValidationFailure(objectID: id, key: setting.attribute.name, reason: reason))
                    }
                    new.append(value)
                    if value != old[index] { differs = true }
                }
                if differs { changed.append((key, new)) }
            }
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
        guard !changed.isEmpty else { return [] }
        // No unique index spans the tables of a hierarchy: a constraint of several tables is
        // checked (under its advisory locks) before anything is written.
        let spansTables = zip(storage.entity.uniquenessConstraints, storage.entity.uniquenessConstraintOwners).contains { constraint, owner in
            constraint.contains { name in settings.contains { $0.attribute.name == name } }
                && layout.tables(for: owner, includesSubentities: true, in: model).count > 1
        }
        if spansTables {
            let conflicts = try batchConflicts(table, changed: changed, settings: settings, on: connection)
            if !conflicts.isEmpty { throw StrataError.constraintConflicts(conflicts) }
        }
        // Written through a savepoint: a unique index's violation is then reported as the
        // conflicts it is, not as an aborted transaction.
        _ = try connection.execute("SAVEPOINT strata_batch", [])
        do {
            let columns = settings.map(\.column)
            let perStatement = max(1, Self.maximumBinds / (columns.count + 1))
            for chunk in changed.chunks(of: perStatement) {
                var binds: [SQLValue] = []
                var tuples: [String] = []
                for (key, values) in chunk {
                    var placeholders = ["$\(binds.count + 1)::bigint"]
                    binds.append(.int64(key))
                    for (column, value) in zip(columns, values) {
                        guard case .attribute(_, let type) = column.kind else { continue }
                        binds.append(SQLColumn.sqlValue(value, of: type))
                        placeholders.append("$\(binds.count)::\(SQLColumn.sqlType(of: type))")
                    }
                    tuples.append("(" + placeholders.joined(separator: ", ") + ")")
                }
                let names = ["k"] + columns.indices.map { "v\($0)" }
                let assignments = [SQLName.quoted(SQLLayout.versionColumn) + " = t." + SQLName.quoted(SQLLayout.versionColumn) + " + 1"]
                    + columns.enumerated().map { "\($0.element.quoted) = v.v\($0.offset)" }
                _ = try connection.execute(
                    "UPDATE \(table.name) AS t SET \(assignments.joined(separator: ", ")) FROM (VALUES \(tuples.joined(separator: ", "))) "
                        + "AS v(\(names.joined(separator: ", "))) WHERE t.\(SQLName.quoted(SQLLayout.keyColumn)) = v.k", binds)
            }
        } catch let failure as DatabaseFailure where failure.sqlState == "23505" {
            _ = try connection.execute("ROLLBACK TO SAVEPOINT strata_batch", [])
            throw StrataError.constraintConflicts(try batchConflicts(table, changed: changed, settings: settings, on: connection))
        }
        _ = try connection.execute("RELEASE SAVEPOINT strata_batch", [])
        return changed.map(\.key)
    }

    /// The uniqueness conflicts a batch update's new values make: for each constraint of
    /// `table` with a set attribute, the changed rows claiming values a row left alone
    /// holds (in any table of the constraint's entity hierarchy), and changed rows claiming
    /// the same values.
    private func batchConflicts(
        _ table: SQLTable, changed: [(key: Int64, values: [AttributeValue?])], settings: [BatchSetting], on connection: any SQLConnection
    ) throws -> [ConstraintConflict] {
        let storage = table.storage
        let changedKeys = Set(changed.map(\.key))
        var conflicts: [ConstraintConflict] = []
        for (constraint, owner) in zip(storage.entity.uniquenessConstraints, storage.entity.uniquenessConstraintOwners) {
            guard constraint.contains(where: { name in settings.contains { $0.attribute.name == name } }) else { continue }
            let columns = constraint.compactMap { name in table.columns.first { $0.name == name } }
            guard columns.count == constraint.count else { continue }
            // Each changed row's claimed values: the set ones, the others as stored.
            let unset = columns.filter { column in !settings.contains { $0.column.name == column.name } }
            var stored: [Int64: [String: AttributeValue?]] = [:]
            if !unset.isEmpty {
                for chunk in Array(changedKeys).chunks(of: Self.maximumBinds) {
                    let sql = "SELECT \(SQLName.quoted(SQLLayout.keyColumn)), \(unset.map(\.quoted).joined(separator: ", ")) FROM \(table.name) "
                        + "WHERE \(SQLName.quoted(SQLLayout.keyColumn)) IN (\(Self.placeholders(from: 1, count: chunk.count)))"
                    for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                        guard let key = row[0].integer else { continue }
                        for (offset, column) in unset.enumerated() {
                            guard case .attribute(_, let type) = column.kind else { continue }
                            stored[key, default: [:]][column.name] = try? SQLColumn.attributeValue(row[offset + 1], of: type)
                        }
                    }
                }
            }
            var claims: [[AttributeValue]: [Int64]] = [:]
            for (key, values) in changed {
                var claim: [AttributeValue] = []
                for column in columns {
                    let value: AttributeValue?? = settings.firstIndex { $0.column.name == column.name }.map { values[$0] } ?? stored[key]?[column.name]
                    guard let present = value ?? nil else { break }
                    claim.append(present)
                }
                if claim.count == columns.count { claims[claim, default: []].append(key) }
            }
            // Every table holding the constraint (the declaring entity's hierarchy): across
            // several, claims wait on the advisory lock a save takes for the same values.
            let scope = layout.tables(for: owner, includesSubentities: true, in: model).filter { other in
                zip(other.storage.entity.uniquenessConstraints, other.storage.entity.uniquenessConstraintOwners).contains { $0 == constraint && $1 == owner }
            }
            for (claim, keys) in claims.sorted(by: { $0.value.min() ?? 0 < $1.value.min() ?? 0 }) {
                if scope.count > 1 {
                    _ = try connection.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [.text("strata-unique:\(identifier.uuidString)|\(owner)|\(constraint)|\(claim)")])
                }
                var holder: ManagedObjectID?
                for other in scope where holder == nil {
                    var binds: [SQLValue] = []
                    var conditions: [String] = []
                    for (name, value) in zip(constraint, claim) {
                        guard let slot = other.storage.attributeSlot(named: name), let column = other.attributeColumns[slot],
                              case .attribute(_, let type) = column.kind
                        else { continue }
                        binds.append(SQLColumn.sqlValue(value, of: type))
                        conditions.append("\(column.quoted) = $\(binds.count)")
                    }
                    let holders = try connection.execute(
                        "SELECT \(SQLName.quoted(SQLLayout.keyColumn)) FROM \(other.name) WHERE \(conditions.joined(separator: " AND "))", binds
                    ).rows.compactMap { $0.first?.integer }.filter { other !== table || !changedKeys.contains($0) }
                    holder = holders.first.flatMap { PrimaryKey(UInt64(bitPattern: $0)) }.map { objectID(entity: other.tableName, key: $0) }
                }
                guard keys.count > 1 || holder != nil else { continue }
                let ids = keys.compactMap { PrimaryKey(UInt64(bitPattern: $0)) }.map { objectID(entity: storage.name, key: $0) }
                conflicts.append(ConstraintConflict(
                    entityName: owner, constraint: constraint, values: Dictionary(uniqueKeysWithValues: zip(constraint, claim)), objectIDs: ids,
                    existingObjectID: holder))
            }
        }
        return conflicts
    }

    // MARK: Delete

    /// Deletes the rows of `requested` (or, when nil, those `fetch` matches), following
    /// delete rules to their end: cascades deleted, deny checked against everything
    /// deleted, nullify emptying the partners' to-one columns (a new version for each),
    /// join-table rows naming a deleted row removed.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with a
    ///   ``ValidationFailure/Reason/deleteDenied(count:)`` for every denying relationship
    ///   whose destinations are not all deleted too (nothing deleted);
    ///   ``StrataError/database(store:failure:)``.
    func batchDelete(
        _ requested: [ManagedObjectID]?, fetch: FetchRequest<ManagedObjectID>?, history: (author: String?, contextName: String?)?,
        retention: PersistentHistoryRetention
    ) throws -> BatchWrite {
        try batchTransaction { connection in
            var write = BatchWrite()
            let targets: [ManagedObjectID]
            if let requested {
                let locked = try lock(requested, on: connection)
                targets = requested.filter(locked.contains)
            } else {
                targets = try fetch.map { try lockedMatches($0, on: connection) } ?? []
            }
            let plan = try planDelete(targets, on: connection)
            let tombstones = history == nil ? [:] : try tombstones(of: plan.rows.map { StoreChanges.Deletion(objectID: $0, expectedVersion: nil) }, on: connection)
            var changes: [HistoryRecord.Change] = []
            // Partners first (their columns name rows about to go), then join-table rows, then the rows.
            var touched = Set<String>()
            for (row, relationship, from) in plan.nullified {
                guard let (table, key) = try? self.row(of: row), let slot = table.storage.relationshipSlot(named: relationship),
                      let column = table.toOneColumns[slot], let (_, fromKey) = try? self.row(of: from)
                else { continue }
                var assignments = ["\(column.quoted) = NULL", "\(SQLName.quoted(SQLLayout.versionColumn)) = \(SQLName.quoted(SQLLayout.versionColumn)) + 1"]
                var condition = "\(SQLName.quoted(SQLLayout.keyColumn)) = $1 AND \(column.quoted) = $2"
                var binds: [SQLValue] = [.int64(key), .int64(fromKey)]
                if case .toOne(_, nil, _) = column.kind, let number = entities[from.entityName]?.number {
                    assignments.append("\(column.quotedEntity) = NULL")
                    condition += " AND \(column.quotedEntity) = $3"
                    binds.append(.int16(Int16(bitPattern: number)))
                }
                let result = try connection.execute("UPDATE \(table.name) SET \(assignments.joined(separator: ", ")) WHERE \(condition)", binds)
                if result.affectedRows > 0, touched.insert("\(row)|\(relationship)").inserted { write.touched.append((row, relationship)) }
            }
            for (row, relationship) in plan.unlinked where touched.insert("\(row)|\(relationship)").inserted {
                write.touched.append((row, relationship))
            }
            var byTable: [String: [Int64]] = [:]
            for id in plan.rows {
                guard let (table, key) = try? row(of: id) else { continue }
                byTable[table.tableName, default: []].append(key)
            }
            for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
                guard let table = layout.tables[name] else { continue }
                for chunk in keys.chunks(of: Self.maximumBinds) {
                    try unlinkDeleted(table: table, keys: chunk, on: connection)
                    let sql = "DELETE FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) IN (\(Self.placeholders(from: 1, count: chunk.count))) "
                        + "RETURNING \(SQLName.quoted(SQLLayout.keyColumn))"
                    for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                        guard let key = row.first?.integer, let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else { continue }
                        let id = objectID(entity: name, key: primaryKey)
                        write.rows.append(id)
                        changes.append(HistoryRecord.Change(
                            kind: .delete, entity: table.storage.number, primaryKey: primaryKey.rawValue, tombstone: tombstones[id] ?? [:]))
                    }
                }
            }
            for (id, relationship) in write.touched {
                guard let storage = entities[id.entityName], let key = id.primaryKey else { continue }
                changes.append(HistoryRecord.Change(kind: .update, entity: storage.number, primaryKey: key.rawValue, updatedProperties: [relationship]))
            }
            write.historySequence = try appendHistory(changes, author: history?.author, contextName: history?.contextName, recording: history != nil, retention: retention, on: connection)
            return write
        }
    }

    /// What deleting `requested` does (``batchDelete(_:fetch:history:retention:)``): every row
    /// to delete (requested ones first, then what cascades reach; rows no longer stored
    /// skipped), the partners whose to-one (named) a nullify empties, and the rows whose
    /// to-many (named) loses a member.
    private func planDelete(_ requested: [ManagedObjectID], on connection: any SQLConnection) throws -> (
        rows: [ManagedObjectID], nullified: [(row: ManagedObjectID, relationship: String, from: ManagedObjectID)],
        unlinked: [(row: ManagedObjectID, relationship: String)]
    ) {
        var rows: [ManagedObjectID] = []
        var deleted = Set<ManagedObjectID>()
        var denied: [(row: ManagedObjectID, relationship: String, destinations: [ManagedObjectID])] = []
        var pending: [(row: ManagedObjectID, relationship: StoredRelationship, destinations: [ManagedObjectID])] = []
        var frontier = requested
        while !frontier.isEmpty {
            var batch: [ManagedObjectID] = []
            var seen = Set<ManagedObjectID>()
            for id in frontier where !deleted.contains(id) && seen.insert(id).inserted { batch.append(id) }
            frontier = []
            // Rows of entities without relationships need no reading: their DELETE says whether they were stored.
            let (plain, related) = batch.reduce(into: ([ManagedObjectID](), [ManagedObjectID]())) { parts, id in
                if entities[id.entityName]?.relationships.isEmpty ?? true { parts.0.append(id) } else { parts.1.append(id) }
            }
            for id in plain {
                deleted.insert(id)
                rows.append(id)
            }
            let snapshots = try snapshots(of: related, on: connection)
            var byEntity: [String: [ObjectSnapshot]] = [:]
            for snapshot in snapshots {
                deleted.insert(snapshot.objectID)
                rows.append(snapshot.objectID)
                byEntity[snapshot.objectID.entityName, default: []].append(snapshot)
            }
            for (entityName, group) in byEntity.sorted(by: { $0.key < $1.key }) {
                guard let storage = entities[entityName] else { continue }
                for (slot, relationship) in storage.relationships.enumerated() {
                    var destinations: [ManagedObjectID: [ManagedObjectID]] = [:]
                    if relationship.description.isToMany {
                        destinations = try self.destinations(of: group.map(\.objectID), relationship: relationship.description.name, on: connection)
                    } else {
                        for snapshot in group {
                            if slot < snapshot.relationships.count, case .toOne(let destination?) = snapshot.relationships[slot] {
                                destinations[snapshot.objectID] = [destination]
                            }
                        }
                    }
                    for snapshot in group {
                        guard let found = destinations[snapshot.objectID], !found.isEmpty else { continue }
                        switch relationship.description.deleteRule {
                        case .cascade:
                            frontier += found.filter { !deleted.contains($0) }
                            pending.append((snapshot.objectID, relationship, found))
                        case .deny:
                            denied.append((snapshot.objectID, relationship.description.name, found))
                            pending.append((snapshot.objectID, relationship, found))
                        case .nullify, .noAction:
                            pending.append((snapshot.objectID, relationship, found))
                        }
                    }
                }
            }
        }
        var failures: [ValidationFailure] = []
        for (row, name, destinations) in denied {
            let left = destinations.filter { !deleted.contains($0) }.count
            if left > 0 { failures.append(ValidationFailure(objectID: row, key: name, reason: .deleteDenied(count: left))) }
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
        var nullified: [(row: ManagedObjectID, relationship: String, from: ManagedObjectID)] = []
        var unlinked: [(row: ManagedObjectID, relationship: String)] = []
        var unlinkedSeen = Set<String>()
        for (row, relationship, destinations) in pending {
            for destination in destinations where !deleted.contains(destination) {
                let inverse = relationship.description.inverseName
                switch relationship.shape {
                case .oneToOne, .oneToMany:
                    // The destination's to-one names the row.
                    if relationship.description.deleteRule == .nullify { nullified.append((destination, inverse, row)) }
                case .manyToOne, .manyToMany:
                    // Its to-many loses the row (join-table rows go with it).
                    if unlinkedSeen.insert("\(destination)|\(inverse)").inserted { unlinked.append((destination, inverse)) }
                }
            }
        }
        return (rows, nullified, unlinked)
    }
}

// MARK: - Insert

extension SQLStore {
    /// One row a batch insert wrote: its ID, and whether it merged into a stored object
    /// (an upsert) instead of inserting one.
    struct BatchInsertedRow {
        let objectID: ManagedObjectID
        let upserted: Bool
    }

    /// Writes the rows `nextChunk` produces (new objects of one entity), in one transaction:
    /// each chunk as a save of new rows (keys from the entity's sequence, uniqueness
    /// checked; under a merging policy, objects claiming stored constrained values merge
    /// into those rows), then the other sides of their relationships made to agree. A
    /// deadlock victim runs again from the first chunk (the chunks made are kept for that).
    ///
    /// - Throws: ``StrataError/constraintConflicts(_:)`` under ``MergePolicy/error``;
    ///   ``StrataError/objectNotFound(_:)`` for a relationship to an object not stored;
    ///   what the producer throws; ``StrataError/database(store:failure:)``. Nothing is
    ///   written then.
    func batchInsert(
        _ nextChunk: () throws -> EncodedRows?, into store: PersistentStore, merging: SaveMerging?,
        history: (author: String?, contextName: String?)?, retention: PersistentHistoryRetention
    ) throws -> (rows: [BatchInsertedRow], ids: [ManagedObjectID], touched: [(id: ManagedObjectID, relationship: String)], historySequence: Int64?) {
        var made: [EncodedRows] = []
        var exhausted = false
        return try batchTransaction { connection in
            var rows: [BatchInsertedRow] = []
            var ids: [ManagedObjectID] = []   // one per object of the request, merged ones included
            var touched: [(id: ManagedObjectID, relationship: String)] = []
            var changes: [HistoryRecord.Change] = []
            var seen = Set<ManagedObjectID>()
            var index = 0
            while true {
                let chunk: EncodedRows
                if index < made.count {
                    chunk = made[index]
                } else if !exhausted, let next = try nextChunk() {
                    made.append(next)
                    chunk = next
                } else {
                    exhausted = true
                    break
                }
                index += 1
                var save = StoreSave(store: store)
                save.rows = chunk
                let outcome: WriteOutcome
                if let merging {
                    outcome = try writeMerging(save, merging: merging, on: connection)
                } else {
                    outcome = try write(save, on: connection, recordsHistory: false)
                }
                var written: [(id: ManagedObjectID, storage: EntityStorage, values: [RelationshipSnapshot])] = []
                for (position, row) in chunk.rows.enumerated() {
                    guard position < outcome.keys.count, let storage = entityStorage(numbered: row.entity),
                          let key = PrimaryKey(outcome.keys[position])
                    else { continue }
                    let id = objectID(entity: storage.name, key: key)
                    let upserted = row.objectID.flatMap { outcome.merge?.adopted[$0] } != nil
                    // Objects of the request merged into one row count once.
                    ids.append(id)
                    guard seen.insert(id).inserted else { continue }
                    rows.append(BatchInsertedRow(objectID: id, upserted: upserted))
                    changes.append(HistoryRecord.Change(
                        kind: upserted ? .update : .insert, entity: storage.number, primaryKey: key.rawValue,
                        updatedProperties: upserted ? storage.entity.attributes.filter { !$0.isTransient }.map(\.name) : []))
                    if let values = row.relationships { written.append((id, storage, values)) }
                }
                touched += try linkInverses(of: written, on: connection)
            }
            let inserted = Set(rows.map(\.objectID))
            var touchedSeen = Set<String>()
            touched = touched.filter { !inserted.contains($0.id) && touchedSeen.insert("\($0.id)|\($0.relationship)").inserted }
            for (id, relationship) in touched {
                guard let storage = entities[id.entityName], let key = id.primaryKey else { continue }
                changes.append(HistoryRecord.Change(kind: .update, entity: storage.number, primaryKey: key.rawValue, updatedProperties: [relationship]))
            }
            let sequence = try appendHistory(
                changes, author: history?.author, contextName: history?.contextName, recording: history != nil, retention: retention, on: connection)
            return (rows, ids, touched, sequence)
        }
    }

    /// After a batch insert wrote new rows with relationship `values` (their own foreign
    /// keys and join-table rows written), makes the other sides agree, as on LMDB: a
    /// one-to-one destination points back (its previous partner lets go), the members of
    /// a one-to-many move to the new row (leaving their previous owner's order), a
    /// many-to-many or ordered destination lists the new row last. Every destination must
    /// be stored.
    ///
    /// - Returns: the other rows whose relationships changed, each with the relationship.
    /// - Throws: ``StrataError/objectNotFound(_:)`` for a destination not stored.
    private func linkInverses(
        of rows: [(id: ManagedObjectID, storage: EntityStorage, values: [RelationshipSnapshot])], on connection: any SQLConnection
    ) throws -> [(id: ManagedObjectID, relationship: String)] {
        var touched: [(id: ManagedObjectID, relationship: String)] = []
        var mustExist: [ManagedObjectID] = []
        let version = SQLName.quoted(SQLLayout.versionColumn), primary = SQLName.quoted(SQLLayout.keyColumn)
        for (id, storage, values) in rows {
            guard let (_, key) = try? row(of: id) else { continue }
            for (slot, stored) in storage.relationships.enumerated() where slot < values.count {
                let relationship = stored.description
                let destinations: [ManagedObjectID]
                switch values[slot] {
                case .toOne(let destination): destinations = destination.map { [$0] } ?? []
                case .toMany(let members): destinations = members
                default: destinations = []
                }
                for destination in destinations {
                    guard let (table, destinationKey) = try? row(of: destination),
                          let inverseSlot = table.storage.relationshipSlot(named: relationship.inverseName)
                    else { throw StrataError.objectNotFound(destination) }
                    let inverse = table.storage.relationships[inverseSlot].description
                    if inverse.isToMany {
                        guard let link = table.linksBySlot[inverseSlot] else {
                            // A one-to-many read through the new row's own column.
                            mustExist.append(destination)
                            touched.append((destination, inverse.name))
                            continue
                        }
                        mustExist.append(destination)
                        _ = try connection.execute(
                            "INSERT INTO \(link.name) (owner, destination, destination_entity, position) "
                                + "SELECT $1, $2, $3, COALESCE(max(position) + 1, 0) FROM \(link.name) WHERE owner = $1 ON CONFLICT DO NOTHING",
                            [.int64(destinationKey), .int64(key), .int16(Int16(bitPattern: storage.number))])
                        touched.append((destination, inverse.name))
                        continue
                    }
                    guard let column = table.toOneColumns[inverseSlot] else { continue }
                    // The destination's to-one takes the new row: what it held lets go first.
                    let current = try connection.execute(
                        "SELECT \(column.sqlNames.map(SQLName.quoted).joined(separator: ", ")) FROM \(table.name) WHERE \(primary) = $1 FOR UPDATE",
                        [.int64(destinationKey)]).rows.first
                    guard let current else { throw StrataError.objectNotFound(destination) }
                    if let previousKey = current[0].integer, previousKey != key || current.count > 1 && current[1].integer != Int64(storage.number) {
                        let previousEntity: String? = if case .toOne(_, let single?, _) = column.kind { single } else {
                            current.count > 1 ? current[1].integer.flatMap { UInt16(exactly: $0) }.flatMap { entityStorage(numbered: $0)?.name } : nil
                        }
                        if let previousEntity, let previousTable = layout.tables[previousEntity],
                           let previousSlot = previousTable.storage.relationshipSlot(named: relationship.name),
                           let primaryKey = PrimaryKey(UInt64(bitPattern: previousKey)) {
                            let previous = objectID(entity: previousEntity, key: primaryKey)
                            if !relationship.isToMany, let partnerColumn = previousTable.toOneColumns[previousSlot] {
                                // One-to-one: the previous partner's to-one lets go.
                                _ = try connection.execute(
                                    "UPDATE \(previousTable.name) SET \(partnerColumn.sqlNames.map { "\(SQLName.quoted($0)) = NULL" }.joined(separator: ", ")), "
                                        + "\(version) = \(version) + 1 WHERE \(primary) = $1 AND \(partnerColumn.quoted) = $2",
                                    [.int64(previousKey), .int64(destinationKey)])
                                touched.append((previous, relationship.name))
                            } else if relationship.isToMany {
                                // One-to-many: the member leaves its previous owner (and its order).
                                if let ordering = previousTable.linksBySlot[previousSlot] {
                                    _ = try connection.execute(
                                        "DELETE FROM \(ordering.name) WHERE owner = $1 AND destination = $2 AND destination_entity = $3",
                                        [.int64(previousKey), .int64(destinationKey), .int16(Int16(bitPattern: table.storage.number))])
                                }
                                touched.append((previous, relationship.name))
                            }
                        }
                    }
                    var assignments = ["\(column.quoted) = $2", "\(version) = \(version) + 1"]
                    var binds: [SQLValue] = [.int64(destinationKey), .int64(key)]
                    if case .toOne(_, nil, _) = column.kind {
                        assignments.append("\(column.quotedEntity) = $3")
                        binds.append(.int16(Int16(bitPattern: storage.number)))
                    }
                    _ = try connection.execute("UPDATE \(table.name) SET \(assignments.joined(separator: ", ")) WHERE \(primary) = $1", binds)
                    touched.append((destination, inverse.name))
                }
            }
        }
        // Destinations no statement above wrote: one query per table says whether they are stored.
        var byTable: [String: [Int64]] = [:]
        for id in mustExist {
            guard let (table, key) = try? row(of: id) else { throw StrataError.objectNotFound(id) }
            byTable[table.tableName, default: []].append(key)
        }
        for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
            guard let table = layout.tables[name] else { continue }
            let wanted = Set(keys)
            var found = Set<Int64>()
            for chunk in Array(wanted).chunks(of: Self.maximumBinds) {
                let sql = "SELECT \(primary) FROM \(table.name) WHERE \(primary) IN (\(Self.placeholders(from: 1, count: chunk.count)))"
                for row in try connection.execute(sql, chunk.map { .int64($0) }).rows { if let key = row.first?.integer { found.insert(key) } }
            }
            if let missing = wanted.subtracting(found).sorted().first, let primaryKey = PrimaryKey(UInt64(bitPattern: missing)) {
                throw StrataError.objectNotFound(objectID(entity: name, key: primaryKey))
            }
        }
        return touched
    }
}
