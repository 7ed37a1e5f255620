import Foundation
import StrataLMDB

/// One lightweight stage of a migration, planned against the state a store is in before
/// it: from the model the store holds (``StoredModel``, with its ``StoreSchema``) to a new
/// model. Planning reads nothing and writes nothing; ``run(in:storeIdentifier:counter:)``
/// does the whole stage inside a write transaction it is given, so a migration of any
/// number of stages commits at once or not at all.
///
/// What a stage does, entity by entity (see <doc:MigratingYourData>):
/// - rows are rewritten only when a field is dropped, converted or filled with a default
///   (``RecordRewrite``); a renamed entity's rows move to its new `rows:` database (LMDB
///   databases cannot be renamed) with their primary keys, versions and row references;
/// - an index is kept when its database name and its values are unchanged, else rebuilt
///   from the (rewritten) rows; a unique index likewise, and rows sharing values under a
///   new constraint fail the stage with every conflict, named;
/// - a to-many relationship's links are kept, copied under a new name, or, for a to-one
///   made to-many, built from the stored foreign keys;
/// - every database the new model does not use is dropped, primary-key sequences follow
///   renamed entities, and the metadata (model hash, schema, model description) is
///   written last.
struct MigrationStep: Sendable {
    /// The model the store holds before the stage, as it recorded it.
    let source: StoredModel
    /// ``source`` as a model (descriptions only): old databases are named from it.
    let sourceModel: ManagedObjectModel
    /// The store's numbers before the stage.
    let sourceSchema: StoreSchema
    /// The model after the stage.
    let target: ManagedObjectModel
    /// The store's numbers after the stage.
    let targetSchema: StoreSchema
    /// What changes, and what no lightweight stage can do.
    let diff: SchemaDiff
    /// What happens to each concrete entity of ``target``.
    let entities: [EntityPlan]
    /// What no lightweight stage can do, beyond ``diff``'s problems (names the stage
    /// cannot reuse in one transaction).
    let problems: [String]

    /// What happens to the rows, indexes and links of one concrete entity.
    struct EntityPlan: Sendable {
        /// The entity (of the target model).
        let entity: EntityDescription
        /// Its number (kept from the source when it existed).
        let number: UInt16
        /// The source entity whose rows become this entity's, when it had any (a concrete
        /// entity of the source model, under its old name).
        let sourceName: String?
        /// How each record changes; nil when records stay byte for byte.
        let rewrite: RecordRewrite?
        /// The indexes rebuilt from the rows: attribute, field number, key kind, database.
        let rebuiltIndexes: [(attribute: String, field: UInt32, kind: IndexKeyKind, database: String)]
        /// Links copied from an old database name to a new one (a renamed entity or
        /// relationship); `clearsPositions` when an ordered relationship became unordered.
        let copiedLinks: [(from: String, to: String, clearsPositions: Bool)]
        /// Links built from the foreign keys of a to-one made to-many: the old field, the
        /// new database, whether the new relationship is ordered.
        let builtLinks: [(field: UInt32, database: String, isOrdered: Bool)]
        /// Links databases of relationships new to the entity, emptied in case an old
        /// database had the name.
        let newLinks: [String]
        /// Links databases whose positions are dropped in place (ordered became unordered).
        let unorderedLinks: [String]
        /// The unique indexes rebuilt that this entity's rows contribute to.
        let rebuiltConstraints: [(attributes: [String], owner: String, fields: [UInt32], kinds: [IndexKeyKind], slots: [Int], database: String)]

        /// Whether the entity's rows move to a database of another name.
        var movesRows: Bool { sourceName.map { $0 != entity.name } ?? false }

        /// Whether the stage reads every row of the entity.
        var scansRows: Bool {
            sourceName != nil && (movesRows || rewrite != nil || !rebuiltIndexes.isEmpty || !builtLinks.isEmpty || !rebuiltConstraints.isEmpty)
        }
    }

    /// Plans the stage from `source` (the store's model description and numbers) to `target`.
    ///
    /// - Throws: ``MetadataDecodingError`` when `source` does not describe a valid model.
    init(from source: StoredModel, schema: StoreSchema, to target: ManagedObjectModel) throws(MetadataDecodingError) {
        self.source = source
        sourceModel = try source.makeModel()
        sourceSchema = schema
        self.target = target
        diff = SchemaDiff(from: source, to: target)
        targetSchema = schema.migrated(to: target, from: source)
        var plans: [EntityPlan] = []
        var problems: [String] = []
        var rowSources: [String: String] = [:]   // old rows database name → new entity name
        for entity in target.entities.sorted(by: { $0.name < $1.name }) where !entity.isAbstract {
            let plan = Self.plan(entity, sourceModel: sourceModel, source: source, sourceSchema: schema, target: target, targetSchema: targetSchema)
            if let old = plan.sourceName { rowSources[old] = entity.name }
            plans.append(plan)
        }
        // A renamed entity's rows are copied into the rows database of its new name: that
        // name must not be one whose rows another entity still has to read.
        for plan in plans where plan.movesRows {
            if let reader = rowSources[plan.entity.name], reader != plan.entity.name {
                problems.append(
                    "entity \(plan.sourceName ?? "") is renamed to \(plan.entity.name), whose stored rows become entity \(reader)'s: "
                        + "swap names over two model versions")
            }
        }
        entities = plans
        self.problems = problems
    }

    /// Every problem: what needs a custom stage.
    var allProblems: [String] { diff.problems + problems }

    /// The inferred part of a custom stage from `source` to `target`: what a lightweight
    /// stage would refuse is dropped from the stored model first (``SchemaDiff/Repair``),
    /// so its data goes and its new namesake starts empty; and the required attributes
    /// without a default that the stage's code must fill (entity, attribute).
    ///
    /// - Throws: ``MetadataDecodingError`` when `source` does not describe a valid model;
    ///   `problems` lists what even a custom stage cannot do (an entity renamed to a name
    ///   another entity's rows still need).
    static func customPart(
        from source: StoredModel, schema: StoreSchema, to target: ManagedObjectModel
    ) throws(MetadataDecodingError) -> (step: MigrationStep, fills: [(entity: String, attribute: String)], problems: [String]) {
        let diff = SchemaDiff(from: source, to: target)
        let step = try MigrationStep(from: source.pruned(by: diff.repairs), schema: schema, to: target)
        var fills: [(entity: String, attribute: String)] = []
        var problems = step.problems
        for (text, repair) in zip(step.diff.problems, step.diff.repairs) {
            if case .fill(let entity, let attribute) = repair { fills.append((entity, attribute)) } else { problems.append(text) }
        }
        // Sub-entities inherit what their ancestors must fill.
        var inherited: [(entity: String, attribute: String)] = []
        for entity in target.entities {
            for fill in fills where entity.name != fill.entity && entity.ancestorNames.contains(fill.entity) {
                inherited.append((entity.name, fill.attribute))
            }
        }
        return (step, fills + inherited, problems)
    }

    /// The plan of one concrete entity of the target model.
    private static func plan(
        _ entity: EntityDescription, sourceModel: ManagedObjectModel, source: StoredModel, sourceSchema: StoreSchema,
        target: ManagedObjectModel, targetSchema: StoreSchema
    ) -> EntityPlan {
        let oldName = sourceSchema.storedName(of: entity)
        let oldEntity = sourceModel.entitiesByName[oldName]
        let sourceName = oldEntity.flatMap { $0.isAbstract ? nil : oldName }
        let numbers = targetSchema.entities[entity.name] ?? StoreSchema.Entity(number: 0, fields: [:])
        let rewrite = sourceName == nil
            ? nil : RecordRewrite.plan(entity: entity.name, from: sourceSchema, stored: source, to: targetSchema, model: target)

        /// The old attribute a new one continues (renamed or not), when the old entity stored it.
        func previousAttribute(_ attribute: AttributeDescription) -> AttributeDescription? {
            guard let oldEntity else { return nil }
            if let renaming = attribute.renamingIdentifier, let found = oldEntity.attribute(named: renaming), !found.isTransient { return found }
            return oldEntity.attribute(named: attribute.name).flatMap { $0.isTransient ? nil : $0 }
        }
        /// Whether the stage leaves the stored values of `field` as they were.
        func valuesUnchanged(_ field: UInt32) -> Bool {
            guard let rewrite else { return true }
            return rewrite.kept[field] == .keep && rewrite.fills[field] == nil
        }

        var rebuiltIndexes: [(attribute: String, field: UInt32, kind: IndexKeyKind, database: String)] = []
        for attribute in entity.attributes where attribute.isIndexed && !attribute.isTransient {
            guard let field = numbers.fields[attribute.name], let kind = attribute.type.indexKeyKind else { continue }
            let database = StoreLayout.indexDatabase(entity: entity.name, attribute: attribute.name)
            if let sourceName, let previous = previousAttribute(attribute), previous.isIndexed,
               StoreLayout.indexDatabase(entity: sourceName, attribute: previous.name) == database,
               previous.type.indexKeyKind == kind, valuesUnchanged(field) {
                continue   // the same database holding the same keys
            }
            rebuiltIndexes.append((attribute.name, field, kind, database))
        }

        var copiedLinks: [(from: String, to: String, clearsPositions: Bool)] = []
        var builtLinks: [(field: UInt32, database: String, isOrdered: Bool)] = []
        var newLinks: [String] = []
        var unorderedLinks: [String] = []
        for relationship in entity.relationships where relationship.isToMany {
            let database = StoreLayout.linksDatabase(entity: entity.name, relationship: relationship.name)
            let previous = oldEntity.flatMap { old in
                relationship.renamingIdentifier.flatMap { old.relationship(named: $0) } ?? old.relationship(named: relationship.name)
            }
            guard let sourceName, let previous else {
                newLinks.append(database)
                continue
            }
            if previous.isToMany {
                let old = StoreLayout.linksDatabase(entity: sourceName, relationship: previous.name)
                let clears = previous.isOrdered && !relationship.isOrdered
                if old != database {
                    copiedLinks.append((old, database, clears))
                } else if clears {
                    unorderedLinks.append(database)
                }
            } else if let field = sourceSchema.fieldNumber(entity: sourceName, property: previous.name) {
                builtLinks.append((field, database, relationship.isOrdered))
            } else {
                newLinks.append(database)
            }
        }

        var rebuiltConstraints: [(attributes: [String], owner: String, fields: [UInt32], kinds: [IndexKeyKind], slots: [Int], database: String)] = []
        for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
            let database = StoreLayout.uniqueDatabase(entity: owner, attributes: constraint)
            let attributes = constraint.compactMap { entity.attribute(named: $0) }
            let fields = constraint.compactMap { numbers.fields[$0] }
            let kinds = attributes.compactMap(\.type.indexKeyKind)
            let slots = constraint.compactMap { name in entity.attributes.firstIndex { $0.name == name } }
            guard fields.count == constraint.count, kinds.count == constraint.count, slots.count == constraint.count else { continue }
            // Kept when the old owner declared the same constraint under the same names, the
            // database is the same, and no constrained value of these rows changes.
            let oldOwner = target.entitiesByName[owner].map { sourceSchema.storedName(of: $0) } ?? owner
            let previousNames = attributes.map { attribute in previousAttribute(attribute)?.name ?? "" }
            let oldDeclared = sourceModel.entitiesByName[oldOwner]?.declaredUniquenessConstraints ?? []
            let kept = sourceName != nil && oldOwner == owner && previousNames == constraint && oldDeclared.contains(constraint)
                && fields.allSatisfy(valuesUnchanged)
            if !kept { rebuiltConstraints.append((constraint, owner, fields, kinds, slots, database)) }
        }

        return EntityPlan(
            entity: entity, number: numbers.number, sourceName: sourceName, rewrite: rewrite, rebuiltIndexes: rebuiltIndexes,
            copiedLinks: copiedLinks, builtLinks: builtLinks, newLinks: newLinks, unorderedLinks: unorderedLinks,
            rebuiltConstraints: rebuiltConstraints)
    }

    /// The names of every database a store of `model` uses.
    static func databaseNames(of model: ManagedObjectModel) -> Set<String> {
        var names: Set<String> = [StoreLayout.metadataDatabase, StoreLayout.historyDatabase]
        for entity in model.entities where !entity.isAbstract {
            names.insert(StoreLayout.rowsDatabase(entity: entity.name))
            for attribute in entity.attributes where attribute.isIndexed && !attribute.isTransient {
                names.insert(StoreLayout.indexDatabase(entity: entity.name, attribute: attribute.name))
            }
            for relationship in entity.relationships where relationship.isToMany {
                names.insert(StoreLayout.linksDatabase(entity: entity.name, relationship: relationship.name))
            }
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                names.insert(StoreLayout.uniqueDatabase(entity: owner, attributes: constraint))
            }
        }
        return names
    }
}

/// Why a migration stage could not be written: a value that does not convert, rows that
/// break a new uniqueness constraint, a record that does not decode. Nothing is committed.
struct MigrationFailure: Error, Sendable {
    /// What went wrong, naming the entity, row and value.
    let reason: String
    /// The uniqueness conflicts found, when that is what went wrong.
    var conflicts: [ConstraintConflict] = []
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
        if !conflicts.isEmpty {
            let described = conflicts.map { conflict in
                "\(conflict.entityName)[\(conflict.constraint.joined(separator: ", "))] = "
                    + conflict.constraint.map { conflict.values[$0]?.messageText ?? "nil" }.joined(separator: ", ")
                    + " held by " + conflict.objectIDs.map { "\($0.entityName) \($0.primaryKey.map { "\($0)" } ?? "?")" }.joined(separator: ", ")
            }
            throw MigrationFailure(
                reason: "stored objects break a new uniqueness constraint (change them in a custom stage first): "
                    + described.joined(separator: "; "),
                conflicts: conflicts)
        }
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

// MARK: - Preview

extension MigrationStep {
    /// What the stage will do to a store whose entities hold `rowCounts` rows (by the
    /// entity names before the stage), as a ``MigrationPreview/Stage``.
    func preview(name: String, rowCounts: [String: Int]) -> MigrationPreview.Stage {
        var rewritten: [String: Int] = [:]
        var indexes: [String] = [], constraints: Set<String> = [], links: [String] = []
        for plan in entities {
            let rows = plan.sourceName.flatMap { rowCounts[$0] } ?? 0
            if plan.sourceName != nil && (plan.rewrite != nil || plan.movesRows) { rewritten[plan.entity.name] = rows }
            indexes += plan.rebuiltIndexes.map { "\(plan.entity.name).\($0.attribute)" }
            for constraint in plan.rebuiltConstraints {
                constraints.insert("\(constraint.owner)[\(constraint.attributes.joined(separator: ", "))]")
            }
            links += plan.builtLinks.map { "\($0.database.dropFirst("links:".count)) (from foreign keys)" }
            links += plan.copiedLinks.map { "\($0.to.dropFirst("links:".count)) (copied from \($0.from.dropFirst("links:".count)))" }
        }
        let dropped = Self.databaseNames(of: sourceModel).subtracting(Self.databaseNames(of: target)).sorted()
        return MigrationPreview.Stage(
            name: name, changes: diff.changes.map(\.description) + diff.problems.map { "left to the stage's code: " + $0 },
            rewrittenRows: rewritten, rebuiltIndexes: indexes.sorted(),
            rebuiltConstraints: constraints.sorted(), builtLinks: links.sorted(), droppedDatabases: dropped)
    }

    /// `rowCounts` (by the entity names before the stage) after it: by the names after it.
    func rowCounts(after rowCounts: [String: Int]) -> [String: Int] {
        var counts: [String: Int] = [:]
        for plan in entities { counts[plan.entity.name] = plan.sourceName.flatMap { rowCounts[$0] } ?? 0 }
        return counts
    }
}
