import Foundation
import StrataLMDB

/// Why a migration stage could not be written: a value that does not convert, rows that
/// break a new uniqueness constraint, a record that does not decode. Nothing is committed.
struct MigrationFailure: Error, Sendable {
    /// What went wrong, naming the entity, row and value.
    let reason: String
    /// The uniqueness conflicts found, when that is what went wrong.
    var conflicts: [ConstraintConflict] = []

    /// The failure of stored objects that break a new uniqueness constraint, naming every
    /// conflict: `Volume[title] = "A" held by Volume p1, Volume p4`.
    static func brokenConstraints(_ conflicts: [ConstraintConflict]) -> MigrationFailure {
        let described = conflicts.map { conflict in
            "\(conflict.entityName)[\(conflict.constraint.joined(separator: ", "))] = "
                + conflict.constraint.map { conflict.values[$0]?.messageText ?? "nil" }.joined(separator: ", ")
                + " held by " + conflict.objectIDs.map { "\($0.entityName) \($0.primaryKey.map { "\($0)" } ?? "?")" }.joined(separator: ", ")
        }
        return MigrationFailure(
            reason: "stored objects break a new uniqueness constraint (change them in a custom stage first): " + described.joined(separator: "; "),
            conflicts: conflicts)
    }
}

/// How far a migration has come: for ``MigrationStep/run(in:storeIdentifier:counter:)``.
struct MigrationCounter {
    /// Rows read so far.
    var rowsDone = 0
    /// Every row the migration reads.
    let rowsTotal: Int
    /// Called with (entity, rows done) every so many rows and at each entity's end.
    let report: (String, Int) -> Void
}

// MARK: - Running

extension MigrationStep {
    /// The rows a run reads: the source rows of every entity whose rows are scanned.
    func rowsToRead(in txn: borrowing WriteTransaction) throws -> Int {
        var total = 0
        for plan in entities where plan.scansRows {
            guard let name = plan.sourceName, let rows = try Self.existing(StoreLayout.rowsDatabase(entity: name), in: txn) else { continue }
            total += try txn.statistics(of: rows).entries
        }
        return total
    }

    /// Runs the stage in `txn`, leaving the store as `target` expects it, metadata included.
    ///
    /// - Throws: ``MigrationFailure``; LMDB errors (a full map reruns the caller's whole
    ///   write, as ``Environment/write(_:)`` does).
    func run(in txn: borrowing WriteTransaction, storeIdentifier: UUID, counter: inout MigrationCounter) throws {
        var uniqueEntries: [String: [(key: [UInt8], row: RowReference, entity: String)]] = [:]
        var constraintOf: [String: (attributes: [String], owner: String)] = [:]
        for plan in entities {
            for constraint in plan.rebuiltConstraints where uniqueEntries[constraint.database] == nil {
                uniqueEntries[constraint.database] = []
                constraintOf[constraint.database] = (constraint.attributes, constraint.owner)
            }
        }
        for plan in entities {
            try migrateEntity(plan, in: txn, uniqueEntries: &uniqueEntries, counter: &counter)
        }
        try writeUniqueIndexes(uniqueEntries, constraints: constraintOf, in: txn, storeIdentifier: storeIdentifier)
        try dropUnused(in: txn)
        try writeMetadata(in: txn)
    }

    /// The database `name` when it exists.
    static func existing(_ name: String, in txn: borrowing WriteTransaction) throws -> Database? {
        do {
            return try txn.openDatabase(named: name, create: false)
        } catch LMDBError.notFound {
            return nil
        }
    }

    /// Database `name`, created when missing and emptied when it holds anything.
    private static func fresh(_ name: String, in txn: borrowing WriteTransaction) throws -> Database {
        let database = try txn.openDatabase(named: name, create: true)
        if try txn.count(in: database) > 0 { try txn.removeAll(in: database) }
        return database
    }

    /// Rewrites, moves and indexes one entity's rows, and carries its links over.
    private func migrateEntity(
        _ plan: EntityPlan, in txn: borrowing WriteTransaction,
        uniqueEntries: inout [String: [(key: [UInt8], row: RowReference, entity: String)]], counter: inout MigrationCounter
    ) throws {
        let name = plan.entity.name
        // Links read from old databases first: a new database may reuse an old name.
        var copied: [(database: String, entries: [([UInt8], [UInt8])])] = []
        for link in plan.copiedLinks {
            guard let old = try Self.existing(link.from, in: txn) else {
                copied.append((link.to, []))
                continue
            }
            var entries: [([UInt8], [UInt8])] = []
            _ = try txn.scan(old) { key, value in
                entries.append((Array(key), link.clearsPositions ? [] : Array(value)))
                return .continue
            }
            copied.append((link.to, entries))
        }

        // An entity without stored rows starts empty, even where an old database has its name
        // (the entity a custom stage dropped to rebuild it).
        if plan.sourceName == nil, try Self.existing(StoreLayout.rowsDatabase(entity: name), in: txn) != nil {
            _ = try Self.fresh(StoreLayout.rowsDatabase(entity: name), in: txn)
        }
        var indexKeys = [[[UInt8]]](repeating: [], count: plan.rebuiltIndexes.count)
        var built = [[([UInt8], [UInt8])]](repeating: [], count: plan.builtLinks.count)
        if plan.scansRows, let sourceName = plan.sourceName, let source = try Self.existing(StoreLayout.rowsDatabase(entity: sourceName), in: txn) {
            let target = plan.movesRows ? try Self.fresh(StoreLayout.rowsDatabase(entity: name), in: txn) : source
            let constraints = plan.rebuiltConstraints
            var done = 0
            try txn.withCursor(on: source) { cursor in
                var entry = try cursor.first()
                while let (keyBytes, value) = entry {
                    guard let key = PrimaryKey(encoded: keyBytes) else {
                        throw MigrationFailure(reason: "entity \(sourceName) has a row whose key is not a primary key (\(keyBytes.count) bytes)")
                    }
                    // Links from the foreign keys the rewrite is about to drop.
                    if !plan.builtLinks.isEmpty {
                        let record = try Self.decode(value, entity: sourceName, key: key)
                        let owner = RowReference(entityNumber: plan.number, primaryKey: key)
                        for (position, link) in plan.builtLinks.enumerated() {
                            guard let destination = record.fields[link.field]?.foreignKey else { continue }
                            built[position].append((LinkLayout.key(owner: owner, destination: destination), LinkLayout.value(position: link.isOrdered ? 0 : nil)))
                        }
                    }
                    let rewritten: [UInt8]?
                    if let rewrite = plan.rewrite {
                        do throws(RecordRewrite.Failure) {
                            rewritten = try rewrite.rewrite(value)
                        } catch {
                            throw MigrationFailure(reason: "row \(key) of entity \(sourceName): \(error.reason)")
                        }
                    } else {
                        rewritten = nil
                    }
                    if !plan.rebuiltIndexes.isEmpty || !constraints.isEmpty {
                        let record = try rewritten.map { bytes in try bytes.withUnsafeBytes { try Self.decode($0, entity: name, key: key) } }
                            ?? Self.decode(value, entity: name, key: key)
                        for (position, index) in plan.rebuiltIndexes.enumerated() {
                            if let indexKey = IndexLayout.key(record.fields[index.field], kind: index.kind, primaryKey: key) {
                                indexKeys[position].append(indexKey)
                            }
                        }
                        for constraint in constraints {
                            let stored = StoredConstraintKey(fields: constraint.fields, kinds: constraint.kinds)
                            if let uniqueKey = stored.key(of: record) {
                                uniqueEntries[constraint.database, default: []].append(
                                    (uniqueKey, RowReference(entityNumber: plan.number, primaryKey: key), name))
                            }
                        }
                    }
                    if plan.movesRows {
                        if let rewritten {
                            try rewritten.withUnsafeBytes { try txn.put($0, forKey: keyBytes, in: target, flags: .append) }
                        } else {
                            try txn.put(value, forKey: keyBytes, in: target, flags: .append)
                        }
                    } else if let rewritten {
                        // The key is copied: it points into the page, which the replacement rewrites.
                        let ownKey = Array(keyBytes)
                        try ownKey.withUnsafeBytes { key in try rewritten.withUnsafeBytes { try cursor.replaceCurrent(key: key, with: $0) } }
                    }
                    done += 1
                    if done % 65_536 == 0 { counter.report(name, counter.rowsDone + done) }
                    entry = try cursor.next()
                }
            }
            counter.rowsDone += done
            counter.report(name, counter.rowsDone)
        }

        for (position, index) in plan.rebuiltIndexes.enumerated() {
            let database = try Self.fresh(index.database, in: txn)
            indexKeys[position].sort { $0.lexicographicallyPrecedes($1) }
            for key in indexKeys[position] { try txn.put([UInt8](), forKey: key, in: database, flags: .append) }
        }
        for link in plan.newLinks { _ = try Self.fresh(link, in: txn) }
        for (database, entries) in copied {
            let links = try Self.fresh(database, in: txn)
            for (key, value) in entries { try txn.put(value, forKey: key, in: links, flags: .append) }
        }
        for (position, link) in plan.builtLinks.enumerated() {
            let links = try Self.fresh(link.database, in: txn)
            built[position].sort { $0.0.lexicographicallyPrecedes($1.0) }
            for (key, value) in built[position] { try txn.put(value, forKey: key, in: links, flags: .append) }
        }
        for name in plan.unorderedLinks {
            guard let links = try Self.existing(name, in: txn) else { continue }
            var keys: [[UInt8]] = []
            _ = try txn.scan(links) { key, _ in
                keys.append(Array(key))
                return .continue
            }
            for key in keys { try txn.put([UInt8](), forKey: key, in: links) }
        }
    }

    /// The record `bytes` holds, or a failure naming the row.
    private static func decode(_ bytes: UnsafeRawBufferPointer, entity: String, key: PrimaryKey) throws(MigrationFailure) -> Record {
        do throws(RecordDecodingError) {
            return try RecordCodec.decode(bytes)
        } catch {
            throw MigrationFailure(reason: "row \(key) of entity \(entity) does not decode: \(error.reason)")
        }
    }

    /// Writes the rebuilt unique indexes, or fails listing every set of rows that share values.
    private func writeUniqueIndexes(
        _ entries: [String: [(key: [UInt8], row: RowReference, entity: String)]],
        constraints: [String: (attributes: [String], owner: String)], in txn: borrowing WriteTransaction, storeIdentifier: UUID
    ) throws {
        var conflicts: [ConstraintConflict] = []
        var sortedEntries: [String: [(key: [UInt8], row: RowReference, entity: String)]] = [:]
        for (database, list) in entries {
            let sorted = list.sorted { $0.key.lexicographicallyPrecedes($1.key) }
            sortedEntries[database] = sorted
            guard let constraint = constraints[database] else { continue }
            var start = 0
            while start < sorted.count {
                var end = start + 1
                while end < sorted.count && sorted[end].key == sorted[start].key { end += 1 }
                if end - start > 1 {
                    let rows = sorted[start..<end]
                    let ids = rows.map { ManagedObjectID(store: storeIdentifier, entityName: $0.entity, primaryKey: $0.row.primaryKey) }
                    conflicts.append(ConstraintConflict(
                        entityName: constraint.owner, constraint: constraint.attributes,
                        values: try values(of: constraint.attributes, row: rows.first!, in: txn), objectIDs: ids, existingObjectID: nil))
                }
                start = end
            }
        }
        if !conflicts.isEmpty { throw MigrationFailure.brokenConstraints(conflicts) }
        for (database, list) in sortedEntries {
            let unique = try Self.fresh(database, in: txn)
            for entry in list { try txn.put(entry.row.encoded, forKey: entry.key, in: unique, flags: .append) }
        }
    }

    /// The constrained values of a conflicting row, by attribute name.
    private func values(
        of attributes: [String], row: (key: [UInt8], row: RowReference, entity: String), in txn: borrowing WriteTransaction
    ) throws -> [String: AttributeValue] {
        guard let rows = try Self.existing(StoreLayout.rowsDatabase(entity: row.entity), in: txn),
              let fields = targetSchema.entities[row.entity]?.fields,
              let bytes = try txn.value(forKey: row.row.primaryKey.encoded, in: rows)
        else { return [:] }
        let record = try bytes.withUnsafeBytes { try Self.decode($0, entity: row.entity, key: row.row.primaryKey) }
        var values: [String: AttributeValue] = [:]
        for attribute in attributes {
            if let field = fields[attribute], let value = record.fields[field] { values[attribute] = value }
        }
        return values
    }

    /// Drops every database the target model does not use.
    private func dropUnused(in txn: borrowing WriteTransaction) throws {
        let wanted = Self.databaseNames(of: target)
        let main = try txn.openDatabase(named: nil, create: false)
        var unused: [String] = []
        _ = try txn.scan(main) { key, value in
            if value.count == 48, !key.contains(0), let name = String(validating: key, as: UTF8.self), !wanted.contains(name) {
                unused.append(name)
            }
            return .continue
        }
        for name in unused {
            if let database = try Self.existing(name, in: txn) { try txn.dropDatabase(database) }
        }
    }

    /// Moves the primary-key sequences of renamed entities, drops those of removed ones,
    /// and records the target model: its hash, numbers and description.
    private func writeMetadata(in txn: borrowing WriteTransaction) throws {
        let metadata = try txn.openDatabase(named: StoreLayout.metadataDatabase, create: false)
        var sequences: [String: [UInt8]] = [:]
        for plan in entities {
            guard let old = plan.sourceName,
                  let value = try txn.value(forKey: Array(StoreMetadata.Key.sequence(entity: old).utf8), in: metadata)
            else { continue }
            sequences[plan.entity.name] = value
        }
        var stale: [[UInt8]] = []
        _ = try txn.scan(metadata, range: .prefix(Array("seq:".utf8))) { key, _ in
            stale.append(Array(key))
            return .continue
        }
        for key in stale { try txn.delete(forKey: key, in: metadata) }
        for (entity, value) in sequences { try txn.put(value, forKey: Array(StoreMetadata.Key.sequence(entity: entity).utf8), in: metadata) }
        try txn.put(Array(target.versionHash.utf8), forKey: Array(StoreMetadata.Key.modelVersionHash.utf8), in: metadata)
        try txn.put(targetSchema.encoded(), forKey: Array(StoreMetadata.Key.schema.utf8), in: metadata)
        try txn.put(StoredModel(target).encoded(), forKey: Array(StoreMetadata.Key.modelDescription.utf8), in: metadata)
    }
}

/// The unique-index key of a record's constrained values (``StoredConstraint``'s
/// encoding, without a database): what a migration builds unique indexes from.
struct StoredConstraintKey {
    let fields: [UInt32]
    let kinds: [IndexKeyKind]

    /// The key, or nil when a constrained value is nil (the row is not constrained).
    func key(of record: Record) -> [UInt8]? {
        var bytes: [UInt8] = []
        for (field, kind) in zip(fields, kinds) {
            guard let value = record.fields[field], IndexKeyEncoding.append(value, as: kind, to: &bytes) else { return nil }
        }
        return StoredConstraint.fitted(bytes)
    }
}
