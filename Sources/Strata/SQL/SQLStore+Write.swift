import Foundation

/// Saves: one transaction per save, optimistic locking with the row version.
extension SQLStore {
    /// What a written save did.
    struct WriteOutcome {
        /// Each row's primary key, in the order of the save's rows.
        var keys: [UInt64] = []
        /// What settling the save's conflicts did (nil: there were none).
        var merge: MergeResult?
    }

    /// Writes `save` in one transaction: new rows inserted at version 1 (with keys from
    /// the entity's sequence, in blocks), changed rows updated only where the stored
    /// version is still the one the context read (`UPDATE ... WHERE _pk = $k AND _version
    /// = $v`), deleted rows removed only at the version read, checked rows compared, and
    /// join tables rewritten from the relationships the rows carry. A row whose version
    /// moved is a conflict: every conflict is collected, and the transaction rolled back.
    ///
    /// A save under a merging policy (<doc:MergePolicies>) that meets conflicts is written
    /// again in a new transaction that settles them (``writeMerging(_:merging:on:)``): the
    /// first attempt costs nothing when there is no conflict, the usual case.
    ///
    /// - Throws: ``StrataError/mergeConflicts(_:)`` with every conflict (nothing
    ///   written) under ``MergePolicy/error``, or when a ``ManagedObjectContext/detectConflicts(for:)``
    ///   check fails; ``StrataError/constraintConflicts(_:)`` for rows that claim values of
    ///   a uniqueness constraint another row holds; ``StrataError/unsupportedByStore(store:feature:)``
    ///   for new objects a merging policy would upsert onto others (not yet on this store);
    ///   what a custom policy throws (as it threw it, as on LMDB); ``StrataError/database(store:failure:)``
    ///   when the server fails (the transaction is rolled back; a connection lost during
    ///   the commit says so).
    func write(_ save: StoreSave) throws -> WriteOutcome {
        // A merging save that loses a race for constrained values (another instance's row
        // came first: the unique index's violation) tries again, and merges into that row.
        let merges = save.merging?.policy.merges ?? false
        do {
            return try retryingDeadlocks(alsoRetrying: merges ? Self.uniqueViolation : []) { () throws -> WriteOutcome in
                try withConnectionPassingErrors { connection in
                    if isOneStatement(save) {
                        // One UPDATE is atomic on its own: no BEGIN and COMMIT round trips.
                        do {
                            return try write(save, on: connection)
                        } catch let failure as DatabaseFailure where failure.kind == .connectionLost {
                            // The statement may have committed before the connection went.
                            throw DatabaseFailure(kind: failure.kind, sqlState: failure.sqlState, message: failure.message, commitOutcomeUnknown: true)
                        }
                    }
                    return try connection.transaction { try write(save, on: connection) }
                }
            }
        } catch let error as StrataError where error.code == .mergeConflicts {
            guard let merging = save.merging, merging.policy.merges else { throw error }
            return try retryingDeadlocks(alsoRetrying: Self.uniqueViolation) { () throws -> WriteOutcome in
                try withConnectionPassingErrors { connection in
                    try connection.transaction { try writeMerging(save, merging: merging, on: connection) }
                }
            }
        } catch let error as StrataError where error.code == .constraintConflicts {
            // New objects claiming stored (or each other's) constrained values: upserts.
            guard let merging = save.merging, merging.policy.merges else { throw error }
            return try retryingDeadlocks(alsoRetrying: Self.uniqueViolation) { () throws -> WriteOutcome in
                try withConnectionPassingErrors { connection in
                    try connection.transaction { try writeMerging(save, merging: merging, on: connection) }
                }
            }
        }
    }

    /// Whether `save` is written by one statement: it changes one stored row (no new row,
    /// deletion or check), whose entity has no uniqueness constraint, without rewriting a
    /// join table, and records no history and sends no notification. The most common save
    /// of a server (change one object) then costs one round trip, as a hand-written
    /// `UPDATE` does, instead of three.
    private func isOneStatement(_ save: StoreSave) -> Bool {
        guard save.rows.count == 1, save.deleted.isEmpty, save.checked.isEmpty, save.history == nil, !driver.notifiesOnCommit,
              let row = save.rows.rows.first, !row.isInsert,
              let storage = entityStorage(numbered: row.entity), storage.entity.uniquenessConstraints.isEmpty,
              let table = layout.tables[storage.name]
        else { return false }
        return table.links.allSatisfy { link in
            guard let relationships = row.relationships, link.slot < relationships.count, case .toMany = relationships[link.slot] else { return true }
            return false
        }
    }

    /// Runs `attempt` (one whole transaction) again when the server chose it as the victim
    /// of a deadlock (`40P01`) or a serialization failure (`40001`): it rolled back, so
    /// running it again is safe. At most 5 attempts, then the failure stands.
    ///
    /// A merging save also retries on `alsoRetrying`: a unique index's violation (`23505`)
    /// means another instance committed a row claiming the same values after the save
    /// looked, which the next attempt merges into (an upsert).
    private func retryingDeadlocks<R>(alsoRetrying extra: Set<String> = [], _ attempt: () throws -> R) throws -> R {
        var attempts = 1
        while true {
            do {
                return try attempt()
            } catch let error as StrataError where attempts < 5 && (Self.retriedStates.union(extra)).contains(error.databaseFailure?.sqlState ?? "") {
                attempts += 1
            }
        }
    }

    /// Deadlock victim, serialization failure.
    private static let retriedStates: Set<String> = ["40P01", "40001"]
    /// A unique index's violation.
    private static let uniqueViolation: Set<String> = ["23505"]

    /// Writes `save` on `connection`, in its transaction; with `recordsHistory`, its
    /// history (and notification) too.
    func write(_ save: StoreSave, on connection: any SQLConnection, recordsHistory: Bool = true) throws -> WriteOutcome {
        var outcome = WriteOutcome()
        var conflicts: [MergeConflict] = []
        // Keys first: a row's relationships may name rows the same save inserts.
        var keys: [Int64] = []
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        keys.reserveCapacity(save.rows.count)
        // The new rows' keys, reserved per table in one statement at most.
        var needed: [String: (table: SQLTable, count: Int)] = [:]
        for row in save.rows.rows where row.key == 0 {
            guard let table = layout.tablesByNumber[row.entity] else {
                throw StrataError.unknownEntity("number \(row.entity)")
            }
            needed[table.tableName, default: (table, 0)].count += 1
        }
        var reserved: [String: ArraySlice<Int64>] = [:]
        for (name, need) in needed { reserved[name] = try makeKeys(need.count, for: need.table, on: connection)[...] }
        // The values history keeps of deleted rows, read before they go.
        let tombstones = !recordsHistory || save.history == nil || save.deleted.isEmpty ? [:] : try tombstones(of: save.deleted, on: connection)
        for row in save.rows.rows {
            guard let table = layout.tablesByNumber[row.entity], case let storage = table.storage else {
                throw StrataError.unknownEntity("number \(row.entity)")
            }
            let key: Int64
            if row.key != 0 {
                key = Int64(bitPattern: row.key)
            } else {
                guard let next = reserved[table.tableName]?.popFirst() else { throw StrataError.unknownEntity(storage.name) }
                key = next
            }
            keys.append(key)
            if let id = row.objectID, id.isTemporaryID, let primaryKey = PrimaryKey(UInt64(bitPattern: key)) {
                permanent[id] = objectID(entity: storage.name, key: primaryKey)
            }
        }
        try checkUniqueness(of: save, keys: keys, permanent: permanent, on: connection)
        var inserts: [String: (columns: [String], rows: [[SQLValue]])] = [:]
        var insertOrder: [SQLTable] = []
        // Changed rows in one order for every save (entity, then key): two saves that change
        // the same rows lock them in the same order, so they wait for each other instead
        // of deadlocking. New rows keep the save's order.
        let order = save.rows.rows.indices.sorted { a, b in
            let x = save.rows.rows[a], y = save.rows.rows[b]
            if x.isInsert != y.isInsert { return x.isInsert }
            if x.isInsert { return a < b }
            return (x.entity, keys[a]) < (y.entity, keys[b])
        }
        try save.rows.bytes.withUnsafeBytes { bytes in
            for index in order {
                let row = save.rows.rows[index]
                guard let table = layout.tablesByNumber[row.entity], case let storage = table.storage else { continue }
                let record = try decodeRecord(UnsafeRawBufferPointer(rebasing: bytes[row.record]), of: storage, key: keys[index])
                var columns: [String] = []
                var values: [SQLValue] = []
                for column in table.columns {
                    switch column.kind {
                    case .attribute(_, let type):
                        columns.append(column.quoted)
                        values.append(SQLColumn.sqlValue(record.fields[column.field], of: type))
                    case .toOne(let slot, let destination, _):
                        let target: ManagedObjectID?
                        switch row.relationships?[slot] {
                        case .toOne(let id)?:
                            target = id.map { permanent[$0] ?? $0 }
                        default:
                            if !row.isInsert { continue }   // not known to the save: the stored value stays
                            target = nil
                        }
                        let targetKey = target?.primaryKey.map { SQLValue.int64(Int64(bitPattern: $0.rawValue)) } ?? .null
                        columns.append(column.quoted)
                        values.append(targetKey)
                        if destination == nil {
                            columns.append(column.quotedEntity)
                            let number = target.flatMap { entities[$0.entityName]?.number }
                            values.append(number.map { .int16(Int16(bitPattern: $0)) } ?? .null)
                        }
                    }
                }
                let key = keys[index]
                if row.isInsert {
                    // New rows go in one multi-row INSERT per table (below).
                    if inserts[table.tableName] == nil { insertOrder.append(table) }
                    inserts[table.tableName, default: (columns, [])].rows.append([.int64(key), .int64(1)] + values)
                } else {
                    let base = Int64(bitPattern: row.baseVersion)
                    var assignments = ["\(SQLName.quoted(SQLLayout.versionColumn)) = $1"]
                    for (offset, name) in columns.enumerated() { assignments.append("\(name) = $\(offset + 2)") }
                    let sql = "UPDATE \(table.name) SET \(assignments.joined(separator: ", ")) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $\(columns.count + 2) "
                        + "AND \(SQLName.quoted(SQLLayout.versionColumn)) = $\(columns.count + 3)"
                    let result = try connection.execute(sql, [.int64(base + 1)] + values + [.int64(key), .int64(base)])
                    if result.affectedRows == 0 {
                        let id = objectID(entity: storage.name, key: PrimaryKey(UInt64(bitPattern: key))!)
                        conflicts.append(try conflict(on: id, table: table, key: key, expected: row.baseVersion, on: connection))
                        continue
                    }
                }
                try writeLinks(of: row, table: table, key: key, isNew: row.isInsert, permanent: permanent, on: connection)
            }
        }
        for table in insertOrder {
            guard let (columns, rows) = inserts[table.tableName] else { continue }
            try insert(rows, columns: columns, into: table, on: connection)
        }
        for deletion in save.deleted.sorted(by: { ($0.objectID.entityName, $0.objectID.primaryKey?.rawValue ?? 0) < ($1.objectID.entityName, $1.objectID.primaryKey?.rawValue ?? 0) }) {
            let (table, key) = try row(of: deletion.objectID)
            var sql = "DELETE FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1"
            var binds: [SQLValue] = [.int64(key)]
            if let expected = deletion.expectedVersion {
                sql += " AND \(SQLName.quoted(SQLLayout.versionColumn)) = $2"
                binds.append(.int64(Int64(bitPattern: expected)))
            }
            let result = try connection.execute(sql, binds)
            if result.affectedRows == 0 {
                conflicts.append(try conflict(on: deletion.objectID, table: table, key: key, expected: deletion.expectedVersion ?? 0, on: connection))
                continue
            }
            try unlinkDeleted(table: table, key: key, on: connection)
        }
        for check in save.checked {
            guard let (table, key) = try? row(of: check.objectID), let expected = check.expectedVersion else { continue }
            let stored = try connection.execute(
                "SELECT \(SQLName.quoted(SQLLayout.versionColumn)) FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1 FOR SHARE",
                [.int64(key)]).rows.first?.first?.integer
            if stored.map({ UInt64(bitPattern: $0) }) != expected {
                conflicts.append(try conflict(on: check.objectID, table: table, key: key, expected: expected, on: connection))
            }
        }
        if !conflicts.isEmpty { throw StrataError.mergeConflicts(conflicts) }
        outcome.keys = keys.map { UInt64(bitPattern: $0) }
        if recordsHistory { try recordHistory(of: save, keys: outcome.keys, tombstones: tombstones, on: connection) }
        return outcome
    }

    /// Decodes a row's record as the saving context encoded it.
    private func decodeRecord(_ bytes: UnsafeRawBufferPointer, of storage: EntityStorage, key: Int64) throws(StrataError) -> Record {
        do throws(RecordDecodingError) {
            return try RecordCodec.decode(bytes)
        } catch {
            throw .corruptRecord(entity: storage.name, primaryKey: UInt64(bitPattern: key), reason: error.reason)
        }
    }

    /// The conflict on a row whose version is not `expected`: its stored state, or none
    /// when it was deleted.
    private func conflict(on id: ManagedObjectID, table: SQLTable, key: Int64, expected: UInt64, on connection: any SQLConnection) throws -> MergeConflict {
        let stored = try connection.execute(
            "SELECT \(table.selectList) FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1", [.int64(key)]
        ).rows.first.map { row throws(StrataError) in try snapshot(of: row, table: table) }
        return MergeConflict(
            objectID: id, persistedSnapshot: stored.map { PropertySnapshot($0, entity: table.storage.entity) },
            oldVersion: expected, newVersion: stored?.version)
    }

    /// Inserts `rows` (`_pk`, `_version`, then `columns`) into `table`, as few statements as
    /// the bind limit allows.
    private func insert(_ rows: [[SQLValue]], columns: [String], into table: SQLTable, on connection: any SQLConnection) throws {
        let names = [SQLName.quoted(SQLLayout.keyColumn), SQLName.quoted(SQLLayout.versionColumn)] + columns
        let perStatement = max(1, Self.maximumBinds / names.count)
        for chunk in rows.chunks(of: perStatement) {
            var tuples: [String] = []
            tuples.reserveCapacity(chunk.count)
            var binds: [SQLValue] = []
            binds.reserveCapacity(chunk.count * names.count)
            for row in chunk {
                tuples.append("(" + Self.placeholders(from: binds.count + 1, count: row.count) + ")")
                binds += row
            }
            _ = try connection.execute("INSERT INTO \(table.name) (\(names.joined(separator: ", "))) VALUES \(tuples.joined(separator: ", "))", binds)
        }
    }

    /// Rewrites the join tables of a row's many-to-many and ordered to-many
    /// relationships from the contents it carries (a relationship it did not load is
    /// left alone; a new row has no links to remove).
    private func writeLinks(
        of row: EncodedRow, table: SQLTable, key: Int64, isNew: Bool, permanent: [ManagedObjectID: ManagedObjectID], on connection: any SQLConnection
    ) throws {
        guard let relationships = row.relationships else { return }
        for link in table.links {
            guard link.slot < relationships.count, case .toMany(let members) = relationships[link.slot] else { continue }
            if !isNew { _ = try connection.execute("DELETE FROM \(link.name) WHERE owner = $1", [.int64(key)]) }
            var seen = Set<ManagedObjectID>()
            var values: [String] = []
            var binds: [SQLValue] = [.int64(key)]
            for member in members {
                let id = permanent[member] ?? member
                guard seen.insert(id).inserted, let primaryKey = id.primaryKey, let storage = entities[id.entityName] else { continue }
                binds += [.int64(Int64(bitPattern: primaryKey.rawValue)), .int16(Int16(bitPattern: storage.number)), .int32(Int32(values.count))]
                values.append("($1, $\(binds.count - 2), $\(binds.count - 1), $\(binds.count))")
                if binds.count > Self.maximumBinds {
                    try insertLinks(values, binds, into: link, on: connection)
                    values = []
                    binds = [.int64(key)]
                }
            }
            if !values.isEmpty { try insertLinks(values, binds, into: link, on: connection) }
        }
    }

    private func insertLinks(_ values: [String], _ binds: [SQLValue], into link: SQLLink, on connection: any SQLConnection) throws {
        _ = try connection.execute(
            "INSERT INTO \(link.name) (owner, destination, destination_entity, position) VALUES \(values.joined(separator: ", "))", binds)
    }

    /// Removes a deleted row from the join tables of other entities that list it (its own
    /// rows go with it: `ON DELETE CASCADE`).
    private func unlinkDeleted(table: SQLTable, key: Int64, on connection: any SQLConnection) throws {
        try unlinkDeleted(table: table, keys: [key], on: connection)
    }

    /// Removes the join-table rows of other entities that name rows `keys` of `table`
    /// (the rows' own join-table rows go with them: their foreign key cascades).
    func unlinkDeleted(table: SQLTable, keys: ArraySlice<Int64>, on connection: any SQLConnection) throws {
        guard !keys.isEmpty else { return }
        for stored in table.storage.relationships {
            let relationship = stored.description
            for destination in layout.tables(for: relationship.destinationEntityName, includesSubentities: true, in: model) {
                guard let inverseSlot = destination.storage.relationshipSlot(named: relationship.inverseName),
                      let link = destination.linksBySlot[inverseSlot]
                else { continue }
                _ = try connection.execute(
                    "DELETE FROM \(link.name) WHERE destination_entity = $1 AND destination IN (\(Self.placeholders(from: 2, count: keys.count)))",
                    [.int16(Int16(bitPattern: table.storage.number))] + keys.map { .int64($0) })
            }
        }
    }

    /// Checks the uniqueness constraints of the save's new and changed rows against each
    /// other and against stored rows (the unique indexes stop a row that races past this
    /// check, as a ``DatabaseFailure``).
    private func checkUniqueness(
        of save: StoreSave, keys: [Int64], permanent: [ManagedObjectID: ManagedObjectID], on connection: any SQLConnection
    ) throws {
        let conflicts = try uniquenessConflicts(of: save, keys: keys, on: connection)
        if !conflicts.isEmpty { throw StrataError.constraintConflicts(conflicts.map(\.conflict)) }
    }

    /// The uniqueness conflicts of the save's new and changed rows (`keys`: each row's
    /// primary key, 0 for a new row without one yet): values one constraint's rows claim
    /// twice, or that a stored row holds, each with its claimants (row indexes) and the
    /// stored holder, which `locking` locks (`FOR UPDATE`) until the transaction ends.
    func uniquenessConflicts(
        of save: StoreSave, keys: [Int64], on connection: any SQLConnection, locking: Bool = false
    ) throws -> [(conflict: ConstraintConflict, claimants: [Int], existing: ManagedObjectID?)] {
        var conflicts: [(conflict: ConstraintConflict, claimants: [Int], existing: ManagedObjectID?)] = []
        var claimed: [String: [Int]] = [:]   // "owner|constraint|values" → row indexes
        var claims: [(owner: String, constraint: [String], values: [AttributeValue], tag: String)] = []
        try save.rows.bytes.withUnsafeBytes { bytes in
            for (index, row) in save.rows.rows.enumerated() {
                guard let table = layout.tablesByNumber[row.entity], !table.storage.entity.uniquenessConstraints.isEmpty else { continue }
                let storage = table.storage
                let record = try decodeRecord(UnsafeRawBufferPointer(rebasing: bytes[row.record]), of: storage, key: keys[index])
                for (constraint, owner) in zip(storage.entity.uniquenessConstraints, storage.entity.uniquenessConstraintOwners) {
                    var values: [AttributeValue] = []
                    for name in constraint {
                        guard let slot = storage.attributeSlot(named: name), let column = table.attributeColumns[slot],
                              let value = record.fields[column.field]
                        else { break }
                        values.append(value)
                    }
                    guard values.count == constraint.count else { continue }   // a nil value claims nothing
                    // The constraint's scope is the entity that declares it, sub-entities included.
                    let tag = "\(owner)|\(constraint)|\(values)"
                    if claimed[tag] == nil { claims.append((owner, constraint, values, tag)) }
                    claimed[tag, default: []].append(index)
                }
            }
        }
        for claim in claims {
            let rows = claimed[claim.tag] ?? []
            let ids = rows.compactMap { index -> ManagedObjectID? in
                if let id = save.rows.rows[index].objectID { return id }
                guard let table = layout.tablesByNumber[save.rows.rows[index].entity] else { return nil }
                return PrimaryKey(UInt64(bitPattern: keys[index])).map { objectID(entity: table.storage.name, key: $0) }
            }
            // The tables of the entities holding the constraint: one per concrete entity of
            // the hierarchy. Across several, no unique index spans them: claims of the same
            // values wait for each other on a transaction-scoped advisory lock instead, so
            // that the check below sees what the other committed.
            let tables = layout.tables(for: claim.owner, includesSubentities: true, in: model).filter { table in
                zip(table.storage.entity.uniquenessConstraints, table.storage.entity.uniquenessConstraintOwners)
                    .contains { $0 == claim.constraint && $1 == claim.owner }
            }
            if tables.count > 1 {
                _ = try connection.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [.text("strata-unique:\(identifier.uuidString)|\(claim.tag)")])
            }
            var holder: ManagedObjectID?
            for table in tables {
                var binds: [SQLValue] = []
                var conditions: [String] = []
                for (name, value) in zip(claim.constraint, claim.values) {
                    guard let slot = table.storage.attributeSlot(named: name), let column = table.attributeColumns[slot] else { continue }
                    binds.append(SQLColumn.sqlValue(value, of: table.storage.attributes[slot].type))
                    conditions.append("\(column.quoted) = $\(binds.count)")
                }
                // The save's own rows of this table are not holders (they are being rewritten).
                let mine = rows.filter { save.rows.rows[$0].entity == table.storage.number && keys[$0] != 0 }.map { keys[$0] }
                if !mine.isEmpty {
                    binds += mine.map { .int64($0) }
                    conditions.append("\(SQLName.quoted(SQLLayout.keyColumn)) NOT IN (\(Self.placeholders(from: binds.count - mine.count + 1, count: mine.count)))")
                }
                let found = try connection.execute(
                    "SELECT \(SQLName.quoted(SQLLayout.keyColumn)) FROM \(table.name) WHERE \(conditions.joined(separator: " AND ")) LIMIT 1"
                        + (locking ? " FOR UPDATE" : ""), binds
                ).rows.first?.first?.integer.flatMap { PrimaryKey(UInt64(bitPattern: $0)) }
                if let found {
                    holder = objectID(entity: table.storage.name, key: found)
                    break
                }
            }
            guard holder != nil || rows.count > 1 else { continue }
            conflicts.append((
                ConstraintConflict(
                    entityName: claim.owner, constraint: claim.constraint,
                    values: Dictionary(uniqueKeysWithValues: zip(claim.constraint, claim.values)), objectIDs: ids, existingObjectID: holder),
                rows, holder))
        }
        return conflicts
    }
}
