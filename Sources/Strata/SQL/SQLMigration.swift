import Foundation

/// A lightweight migration of a SQL store: the stages ``StoreMigration`` plans for any
/// store (declared in a ``MigrationPlan`` or inferred), run as DDL and set-based
/// statements inside the transaction that opens the store, so that the store is migrated
/// and its metadata says so, or (whatever fails: a value, a constraint, the server, a
/// kill) every table is left as it was.
///
/// Each stage compares the tables the source model lays out with the ones the target
/// lays out, matched by the numbers ``StoreSchema`` keeps across renames (the entity
/// number of a table, the field number of a column), and:
/// 1. drops the foreign keys that change, the tables (with their sequences and join
///    tables) of entities gone, and join tables no relationship continues;
/// 2. renames tables, sequences and join tables of renamed entities and relationships;
/// 3. creates the tables of new entities, and join tables of relationships that now need
///    one, built from the stored foreign keys where the relationship was a to-one (its
///    destination becomes its one member) or a one-to-many read through its inverse;
/// 4. per table: drops the columns of properties gone, renames columns, adds new ones,
///    converts types (a checked conversion reads every value first and fails naming the
///    row that does not convert exactly, as ``RecordRewrite`` does), and fills defaults
///    where a new or newly required attribute holds nil;
/// 5. rebuilds the indexes that change; a new uniqueness constraint first looks for rows
///    sharing values (across every table of the constraint's entity hierarchy) and fails
///    naming every conflict;
/// 6. adds the foreign keys that changed (checking every stored reference).
///
/// The model guard (``SQLLayout/guardFunctionStatement(hash:)``) is replaced first: from
/// the commit on, instances still running the old model are refused their writes.
struct SQLMigration {
    /// The planned stages.
    let migration: StoreMigration
    /// The store's UUID (conflicts name objects by ID).
    let identifier: UUID
    /// The schema (namespace), unquoted.
    let schemaName: String
    /// The concrete entities of the configuration the store is opened with: the last
    /// stage creates tables for those of them that are new.
    let entityNames: Set<String>
    /// Where the database is, for errors.
    let location: String

    /// Runs every stage on `connection`, inside the caller's transaction, calling
    /// `stageStarts` with each stage's index before it runs.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)``;
    ///   ``StrataError/database(store:failure:)`` when the connection is lost.
    func run(on connection: any SQLConnection, stageStarts: (Int) -> Void = { _ in }) throws(StrataError) {
        defer { migration.progress?.finish() }
        var rows = 0
        do {
            // Deferred foreign keys would leave trigger events pending after an UPDATE, and
            // PostgreSQL refuses to alter or index a table that has them.
            _ = try connection.execute("SET CONSTRAINTS ALL IMMEDIATE", [])
            // The model guard holds the new model from the start: this connection runs it
            // (so the migration's own writes pass), and instances of the old one are refused
            // once the migration commits.
            if let target = migration.steps.last?.target {
                _ = try connection.execute(SQLLayout.guardFunctionStatement(schema: SQLName.quoted(schemaName), hash: target.versionHash), [])
            }
            for (index, step) in migration.steps.enumerated() {
                stageStarts(index)
                var stage = try Stage(
                    step: step, number: index + 1, isLast: index == migration.steps.count - 1, migration: self, connection: connection)
                try stage.run { entity, done, total in
                    migration.progress?.report(MigrationProgress(
                        store: location, stage: index + 1, stageCount: migration.steps.count, entityName: entity, completedRows: done,
                        totalRows: total, isFinished: false))
                }
                rows = stage.rowsDone
            }
        } catch let failure as MigrationFailure {
            throw .migrationFailed(store: location, reason: failure.reason, conflicts: failure.conflicts)
        } catch let failure as DatabaseFailure where failure.kind == .connectionLost || failure.kind == .connectionFailed {
            throw .database(store: location, failure: failure)
        } catch let failure as DatabaseFailure {
            throw .migrationFailed(store: location, reason: "the server refused it: \(failure)")
        } catch let error as StrataError {
            throw error
        } catch {
            throw .migrationFailed(store: location, reason: "\(error)")
        }
        migration.progress?.report(MigrationProgress(
            store: location, stage: migration.steps.count, stageCount: migration.steps.count, entityName: nil, completedRows: rows,
            totalRows: rows, isFinished: true))
    }
}

/// One stage's work: the tables before and after, and the statements between them.
private struct Stage {
    let step: MigrationStep
    let number: Int
    let connection: any SQLConnection
    let migration: SQLMigration
    /// The tables the source model lays out that exist.
    let source: SQLLayout
    /// The tables after the stage.
    let target: SQLLayout
    /// Tables whose rows continue: source, target, plan.
    let pairs: [(source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan)]
    /// Tables of new entities.
    let created: [SQLTable]
    /// Source tables whose entities are gone.
    let removed: [SQLTable]
    /// The target name of each continuing source table, by source table name.
    let renamedTables: [String: String]
    /// Rows of the continuing tables counted so far (for progress).
    var rowsDone = 0

    init(step: MigrationStep, number: Int, isLast: Bool, migration: SQLMigration, connection: any SQLConnection) throws {
        self.step = step
        self.number = number
        self.migration = migration
        self.connection = connection
        let existing = Set(try connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", [.text(migration.schemaName)]
        ).rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } })
        let sourceNames = Set(step.sourceModel.entities.filter { !$0.isAbstract && existing.contains($0.name) }.map(\.name))
        let source = try SQLStore.makeLayout(
            model: step.sourceModel, schema: step.sourceSchema, entityNames: sourceNames, schemaName: migration.schemaName,
            location: migration.location
        ).layout
        self.source = source
        var targetNames: Set<String> = []
        for plan in step.entities {
            let continues = plan.sourceName.map { source.tables[$0] != nil } ?? false
            // A new entity gets its table when the configuration holds it (any entity, in a stage before the last).
            if continues || !isLast || migration.entityNames.contains(plan.entity.name) { targetNames.insert(plan.entity.name) }
        }
        let target = try SQLStore.makeLayout(
            model: step.target, schema: step.targetSchema, entityNames: targetNames, schemaName: migration.schemaName,
            location: migration.location
        ).layout
        self.target = target
        var pairs: [(source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan)] = []
        var created: [SQLTable] = []
        for plan in step.entities {
            guard let table = target.tables[plan.entity.name] else { continue }
            if let old = plan.sourceName, let previous = source.tables[old] {
                pairs.append((previous, table, plan))
            } else {
                created.append(table)
            }
        }
        self.pairs = pairs
        self.created = created
        let continued = Set(pairs.map(\.source.tableName))
        removed = source.tables.values.filter { !continued.contains($0.tableName) }.sorted { $0.tableName < $1.tableName }
        renamedTables = Dictionary(uniqueKeysWithValues: pairs.map { ($0.source.tableName, $0.target.tableName) })
    }

    @discardableResult
    private func execute(_ sql: String, _ binds: [SQLValue] = []) throws -> SQLResult { try connection.execute(sql, binds) }

    private func quoted(_ name: String) -> String { SQLName.quoted(name) }

    mutating func run(report: (String?, Int, Int) -> Void) throws {
        var counts: [Int] = []
        for pair in pairs {
            let result = try execute("SELECT count(*) FROM \(pair.source.name)")
            counts.append(Int(result.rows.first?.first?.integer ?? 0))
        }
        let total = counts.reduce(0, +)

        let keptKeys = try dropChangedForeignKeys()
        try dropRemovedTables()
        let links = try matchLinks()
        try renameTables(links.continued)
        for table in created.sorted(by: { $0.tableName < $1.tableName }) {
            for statement in target.creationStatements(of: table) { try execute(statement) }
        }
        for (link, pair, previous) in links.built {
            try execute(link.createStatement(owner: pair.target))
            try execute(target.guardTriggerStatement(on: link.name))
            try fill(link, of: pair, from: previous)
        }
        for (index, pair) in pairs.enumerated() {
            try migrateColumns(pair)
            rowsDone += counts[index]
            report(pair.target.tableName, rowsDone, total)
        }
        try rebuildIndexes()
        for table in target.tables.values.sorted(by: { $0.tableName < $1.tableName }) {
            for key in table.foreignKeys(layout: target) where !keptKeys.contains(key.name) {
                try execute(key.addStatement(on: table.name))
            }
        }
    }

    // MARK: Foreign keys and tables

    /// Drops the foreign keys of continuing tables that change (another destination, or
    /// gone); returns the names of those kept.
    private func dropChangedForeignKeys() throws -> Set<String> {
        var kept: Set<String> = []
        for pair in pairs {
            let wanted = Dictionary(pair.target.foreignKeys(layout: target).map { ($0.name, $0.destination) }) { first, _ in first }
            for key in pair.source.foreignKeys(layout: source) {
                if wanted[key.name] == key.destination {
                    kept.insert(key.name)
                } else {
                    try execute("ALTER TABLE \(pair.source.name) DROP CONSTRAINT IF EXISTS \(quoted(key.name))")
                }
            }
        }
        return kept
    }

    /// Drops the tables, sequences and join tables of entities the stage removes.
    private func dropRemovedTables() throws {
        for table in removed {
            for link in table.links { try execute("DROP TABLE IF EXISTS \(link.name) CASCADE") }
            try execute("DROP TABLE IF EXISTS \(table.name) CASCADE")
            try execute("DROP SEQUENCE IF EXISTS \(source.qualified(table.sequenceName))")
        }
    }

    /// The source relationship `relationship` continues in `entity` (by its renaming
    /// identifier, else its name).
    private func previous(of relationship: RelationshipDescription, in entity: EntityDescription) -> RelationshipDescription? {
        if let renamed = relationship.renamingIdentifier, let found = entity.relationship(named: renamed) { return found }
        return entity.relationship(named: relationship.name)
    }

    /// Which join tables continue (renamed or not) and which are new (with the source
    /// relationship they are built from); drops the join tables nothing continues.
    private func matchLinks() throws -> (
        continued: [(from: SQLLink, to: SQLLink)],
        built: [(link: SQLLink, pair: (source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan), previous: RelationshipDescription?)]
    ) {
        var continued: [(from: SQLLink, to: SQLLink)] = []
        var built: [(link: SQLLink, pair: (source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan), previous: RelationshipDescription?)] = []
        for pair in pairs {
            let sourceLinks = Dictionary(pair.source.links.map { ($0.relationship.name, $0) }) { first, _ in first }
            var used: Set<String> = []
            for link in pair.target.links {
                let previous = previous(of: link.relationship, in: pair.source.storage.entity)
                if let previous, previous.isToMany, let old = sourceLinks[previous.name] {
                    continued.append((old, link))
                    used.insert(old.tableName)
                } else {
                    built.append((link, pair, previous))
                }
            }
            for link in pair.source.links where !used.contains(link.tableName) {
                try execute("DROP TABLE IF EXISTS \(link.name) CASCADE")
            }
        }
        return (continued, built)
    }

    /// Renames the tables and sequences of renamed entities, and the join tables of
    /// renamed entities and relationships.
    private func renameTables(_ links: [(from: SQLLink, to: SQLLink)]) throws {
        for pair in pairs where pair.source.tableName != pair.target.tableName {
            try execute("ALTER TABLE \(pair.source.name) RENAME TO \(quoted(pair.target.tableName))")
            try execute("ALTER SEQUENCE \(source.qualified(pair.source.sequenceName)) RENAME TO \(quoted(pair.target.sequenceName))")
        }
        for (from, to) in links where from.tableName != to.tableName {
            try execute("ALTER TABLE \(from.name) RENAME TO \(quoted(to.tableName))")
        }
    }

    /// Fills a new join table of a continuing entity from what the source stored: a
    /// to-one's foreign keys (each destination becomes the one member), or the inverse
    /// to-one's foreign keys of a one-to-many (members in key order). Column names are
    /// still the source's here; tables are already renamed.
    private func fill(
        _ link: SQLLink, of pair: (source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan), from previous: RelationshipDescription?
    ) throws {
        guard let previous else { return }
        let insert = "INSERT INTO \(link.name) (owner, destination, destination_entity, position) "
        if !previous.isToMany {
            guard let column = pair.source.columns.first(where: { $0.name == previous.name }),
                  case .toOne(_, let destination, let destinationEntity) = column.kind
            else { return }
            let entity = destination == nil ? quoted(column.name + "._entity") : "\(destinationEntity ?? 0)::smallint"
            try execute(insert + "SELECT \(quoted(SQLLayout.keyColumn)), \(quoted(column.name)), \(entity), 0 FROM \(pair.target.name) "
                + "WHERE \(quoted(column.name)) IS NOT NULL")
            return
        }
        // A one-to-many read through its inverse's column: the members are the rows whose
        // inverse holds the owner.
        for table in source.tables(for: previous.destinationEntityName, includesSubentities: true, in: step.sourceModel) {
            guard let current = renamedTables[table.tableName].flatMap({ target.tables[$0] }),
                  let column = table.columns.first(where: { $0.name == previous.inverseName }),
                  case .toOne(_, let destination, _) = column.kind
            else { continue }
            let owner = quoted(column.name)
            var condition = "\(owner) IS NOT NULL"
            if destination == nil { condition += " AND \(quoted(column.name + "._entity")) = \(pair.source.storage.number)" }
            try execute(insert + "SELECT \(owner), \(quoted(SQLLayout.keyColumn)), \(current.storage.number)::smallint, "
                + "(row_number() OVER (PARTITION BY \(owner) ORDER BY \(quoted(SQLLayout.keyColumn))) - 1)::integer "
                + "FROM \(current.name) WHERE \(condition)")
        }
    }

    // MARK: Columns

    /// Drops, renames, adds, converts and fills the columns of one continuing table.
    private func migrateColumns(_ pair: (source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan)) throws {
        let table = pair.target.name
        let targetColumns = Dictionary(pair.target.columns.map { ($0.field, $0) }) { first, _ in first }
        let sourceFields = Set(pair.source.columns.map(\.field))
        var drops: [String] = []
        // Columns the source model no longer describes (a custom stage's inferred part drops
        // from the stored model what its code takes over) go first: a new column may take
        // the name.
        let described = Set([SQLLayout.keyColumn, SQLLayout.versionColumn] + pair.source.columns.flatMap(\.sqlNames))
        let physical = try execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            [.text(migration.schemaName), .text(pair.target.tableName)]
        ).rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } }
        for name in physical where !described.contains(name) {
            try execute("ALTER TABLE \(table) DROP COLUMN IF EXISTS \(quoted(name))")
        }
        var renames: [(from: String, to: String)] = []
        var conversions: [(column: SQLColumn, from: AttributeType, checked: AttributeType.Kind?)] = []
        for old in pair.source.columns {
            guard let new = targetColumns[old.field] else {
                drops += old.sqlNames
                continue
            }
            if old.name != new.name { renames.append((old.name, new.name)) }
            switch (old.kind, new.kind) {
            case (.attribute(_, let oldType), .attribute(_, let newType)):
                guard SQLColumn.sqlType(of: oldType) != SQLColumn.sqlType(of: newType) else { break }
                var checked: AttributeType.Kind?
                if case .convert(let kind)? = pair.plan.rewrite?.kept[new.field] { checked = kind }
                conversions.append((new, oldType, checked))
            case (.toOne(_, let oldDestination, let oldNumber), .toOne(_, let newDestination, let newNumber)):
                switch (oldDestination == nil, newDestination == nil) {
                case (true, true):
                    if old.name != new.name { renames.append((old.name + "._entity", new.name + "._entity")) }
                case (true, false):
                    // One destination table now: references into any other go (their rows went with their entity).
                    try execute("UPDATE \(table) SET \(quoted(old.name)) = NULL WHERE \(quoted(old.name)) IS NOT NULL "
                        + "AND \(quoted(old.name + "._entity")) <> \(newNumber ?? 0)")
                    drops.append(old.name + "._entity")
                case (false, true):
                    try execute("ALTER TABLE \(table) ADD COLUMN \(quoted(old.name + "._entity")) smallint")
                    try execute("UPDATE \(table) SET \(quoted(old.name + "._entity")) = \(oldNumber ?? 0) WHERE \(quoted(old.name)) IS NOT NULL")
                    if old.name != new.name { renames.append((old.name + "._entity", new.name + "._entity")) }
                case (false, false):
                    break
                }
            default:
                // Numbers are given per kind (``StoreSchema/migrated(to:from:)``): never the same field.
                throw MigrationFailure(reason: "field \(old.field) of \(pair.source.tableName) changes kind: the store's schema is damaged")
            }
        }
        for name in drops { try execute("ALTER TABLE \(table) DROP COLUMN IF EXISTS \(quoted(name))") }
        // Through temporary names: two columns may swap names.
        for (index, rename) in renames.enumerated() {
            try execute("ALTER TABLE \(table) RENAME COLUMN \(quoted(rename.from)) TO \(quoted("_strata_rename_\(index)"))")
        }
        for (index, rename) in renames.enumerated() {
            try execute("ALTER TABLE \(table) RENAME COLUMN \(quoted("_strata_rename_\(index)")) TO \(quoted(rename.to))")
        }
        for new in pair.target.columns where !sourceFields.contains(new.field) {
            switch new.kind {
            case .attribute(_, let type):
                try execute("ALTER TABLE \(table) ADD COLUMN \(quoted(new.name)) \(SQLColumn.sqlType(of: type))")
            case .toOne(_, let destination, _):
                try execute("ALTER TABLE \(table) ADD COLUMN \(quoted(new.name)) bigint")
                if destination == nil { try execute("ALTER TABLE \(table) ADD COLUMN \(quoted(new.name + "._entity")) smallint") }
            }
        }
        for conversion in conversions {
            guard case .attribute(_, let type) = conversion.column.kind else { continue }
            if let kind = conversion.checked { try check(conversion.column, of: pair, from: conversion.from, to: kind) }
            let sqlType = SQLColumn.sqlType(of: type)
            let column = quoted(conversion.column.name)
            try execute("ALTER TABLE \(table) ALTER COLUMN \(column) TYPE \(sqlType) USING \(column)::\(sqlType)")
        }
        for (field, value) in (pair.plan.rewrite?.fills ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let column = targetColumns[field], case .attribute(_, let type) = column.kind else { continue }
            try execute("UPDATE \(table) SET \(quoted(column.name)) = $1 WHERE \(quoted(column.name)) IS NULL", [SQLColumn.sqlValue(value, of: type)])
        }
    }

    /// Reads every value of `column` (its old type) and fails naming the first row whose
    /// value does not convert exactly to `kind` (``RecordRewrite/convert(_:to:)``).
    private func check(
        _ column: SQLColumn, of pair: (source: SQLTable, target: SQLTable, plan: MigrationStep.EntityPlan), from type: AttributeType,
        to kind: AttributeType.Kind
    ) throws {
        let name = quoted(column.name)
        let rows = try execute(
            "SELECT \(quoted(SQLLayout.keyColumn)), \(name) FROM \(pair.target.name) WHERE \(name) IS NOT NULL ORDER BY \(quoted(SQLLayout.keyColumn))"
        ).rows
        for row in rows {
            guard let key = row[0].integer, let value = try? SQLColumn.attributeValue(row[1], of: type) else { continue }
            if RecordRewrite.convert(value, to: kind) == nil {
                let primaryKey = PrimaryKey(UInt64(bitPattern: key)).map { "\($0)" } ?? "\(key)"
                throw MigrationFailure(
                    reason: "row \(primaryKey) of entity \(pair.source.tableName): \(pair.target.tableName).\(column.name) holds "
                        + "\(value.messageText), which does not convert exactly to \(kind)")
            }
        }
    }

    // MARK: Indexes

    /// Drops the indexes that change and creates the new ones; a new unique index is
    /// created only after its constraint's rows are checked for shared values.
    private func rebuildIndexes() throws {
        var wanted: [String: [SQLIndex]] = [:]
        for pair in pairs {
            let kept = Set(pair.source.indexes)
            let targetIndexes = pair.target.indexes
            // An index is the same when its name, uniqueness and fields are (renamed columns follow).
            let same = { (index: SQLIndex, other: SQLIndex) in
                index.name == other.name && index.isUnique == other.isUnique && index.fields == other.fields
            }
            for index in kept where !targetIndexes.contains(where: { same($0, index) }) {
                try execute("DROP INDEX IF EXISTS \(target.qualified(index.name))")
            }
            wanted[pair.target.tableName] = targetIndexes.filter { index in !kept.contains(where: { same($0, index) }) }
        }
        // Constraints whose unique index is new on some table: checked across the hierarchy.
        var checked: Set<[String]> = []
        for pair in pairs {
            let entity = pair.target.storage.entity
            for (position, (constraint, owner)) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners).enumerated() {
                guard wanted[pair.target.tableName]?.contains(where: { $0.name == pair.target.indexName("u\(position)") }) == true,
                      checked.insert([owner] + constraint).inserted
                else { continue }
                try checkUnique(constraint, owner: owner)
            }
        }
        for pair in pairs {
            for index in wanted[pair.target.tableName] ?? [] { try execute(index.createStatement(on: pair.target.name)) }
        }
    }

    /// Fails naming every set of rows that share values of `constraint` (declared by
    /// `owner`) across the tables of the entities that inherit it; a row holding nil in
    /// one of the attributes shares nothing (as in a unique index).
    private func checkUnique(_ constraint: [String], owner: String) throws {
        var tables: [SQLTable] = []
        for table in target.tables.values.sorted(by: { $0.tableName < $1.tableName }) {
            let entity = table.storage.entity
            if zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners).contains(where: { $0 == constraint && $1 == owner }) {
                tables.append(table)
            }
        }
        guard let first = tables.first else { return }
        let columns = constraint.map(quoted).joined(separator: ", ")
        let present = constraint.map { "\(quoted($0)) IS NOT NULL" }.joined(separator: " AND ")
        let union = tables.map { table in
            "SELECT \(quoted(SQLLayout.keyColumn)) AS key, \(table.storage.number)::smallint AS entity, \(columns) FROM \(table.name) WHERE \(present)"
        }.joined(separator: " UNION ALL ")
        let rows = try execute(
            "WITH rows AS (\(union)) SELECT key, entity, \(columns) FROM rows WHERE (\(columns)) IN "
                + "(SELECT \(columns) FROM rows GROUP BY \(columns) HAVING count(*) > 1) ORDER BY \(columns), entity, key"
        ).rows
        let types = constraint.map { name -> AttributeType in
            first.columns.first { $0.name == name }.flatMap { column in
                if case .attribute(_, let type) = column.kind { type } else { nil }
            } ?? .string
        }
        var conflicts: [ConstraintConflict] = []
        var start = 0
        while start < rows.count {
            var end = start + 1
            while end < rows.count && rows[end][2...] == rows[start][2...] { end += 1 }
            var values: [String: AttributeValue] = [:]
            for (offset, name) in constraint.enumerated() {
                values[name] = try? SQLColumn.attributeValue(rows[start][2 + offset], of: types[offset])
            }
            let ids = rows[start..<end].compactMap { row -> ManagedObjectID? in
                guard let key = row[0].integer, let entity = row[1].integer, let table = target.tablesByNumber[UInt16(truncatingIfNeeded: entity)],
                      let primaryKey = PrimaryKey(UInt64(bitPattern: key))
                else { return nil }
                return ManagedObjectID(store: migration.identifier, entityName: table.tableName, primaryKey: primaryKey)
            }
            conflicts.append(ConstraintConflict(entityName: owner, constraint: constraint, values: values, objectIDs: ids, existingObjectID: nil))
            start = end
        }
        if !conflicts.isEmpty { throw MigrationFailure.brokenConstraints(conflicts) }
    }
}

// MARK: - Preview

extension SQLStore {
    /// What opening the store in `driver`'s schema with `model` would do to migrate it:
    /// the migration run in a transaction that is rolled back, its statements recorded
    /// stage by stage (``MigrationPreview/Stage/statements``). What the migration would
    /// refuse — a value that does not convert, objects breaking a new constraint, a plan
    /// that does not fit — is found now, as the same error. It takes the locks the
    /// migration takes (and its time), and writes nothing.
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` when the schema holds no
    ///   store; ``StrataError/migrationFailed(store:reason:conflicts:)``;
    ///   ``StrataError/unsupportedByStore(store:feature:)`` for custom stages;
    ///   ``StrataError/database(store:failure:)``.
    static func migrationPreview(
        driver: any SQLDriver, model: ManagedObjectModel, options settings: MigrationSettings, entityNames: Set<String>
    ) throws(StrataError) -> MigrationPreview {
        let location = driver.location, schemaName = driver.schema
        let quotedSchema = SQLName.quoted(schemaName)
        return try run(location) {
            try driver.withConnection { connection in
                _ = try connection.execute("BEGIN", [])
                defer { _ = try? connection.execute("ROLLBACK", []) }
                let table = quotedSchema + "." + SQLName.quoted(SQLLayout.metadataTable)
                guard case .text? = try connection.execute("SELECT to_regclass($1)::text", [.text(table)]).rows.first?.first else {
                    throw StrataError.incompatibleStore(store: location, reason: "it holds no Strata store")
                }
                _ = try connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("strata:" + quotedSchema)])
                var values: [String: String] = [:]
                for row in try connection.execute("SELECT key, value FROM \(table)", []).rows {
                    if case .text(let key) = row[0], case .text(let value) = row[1] { values[key] = value }
                }
                guard !values.isEmpty else { throw StrataError.incompatibleStore(store: location, reason: "it holds no Strata store") }
                var settings = settings
                settings.migratesAutomatically = true
                settings.progress = nil
                let (existing, _) = try metadata(from: values, model: model, settings: settings, location: location)
                let migration: StoreMigration
                if existing.modelVersionHash != model.versionHash {
                    if settings.plan?.stages.contains(where: \.isCustom) == true {
                        throw StrataError.unsupportedByStore(
                            store: location, feature: "a preview of a plan with custom stages (their code runs through contexts, on copies of the store's tables)")
                    }
                    migration = try StoreMigration(existing: existing, model: model, settings: settings, path: location)
                } else if let refresh = try StoreMigration.refreshing(existing: existing, model: model, settings: settings, path: location) {
                    migration = refresh
                } else {
                    return MigrationPreview(store: location, fromVersion: MigrationPlan.name(model), toVersion: MigrationPlan.name(model), stages: [])
                }
                // Rows by entity before the migration, for what each stage rewrites.
                var counts: [String: Int] = [:]
                for name in existing.schema.entities.keys.sorted() {
                    let qualified = quotedSchema + "." + SQLName.quoted(name)
                    guard case .text? = try connection.execute("SELECT to_regclass($1)::text", [.text(qualified)]).rows.first?.first else { continue }
                    counts[name] = Int(try connection.execute("SELECT count(*) FROM \(qualified)", []).rows.first?.first?.integer ?? 0)
                }
                let recorder = RecordingConnection(connection)
                try SQLMigration(migration: migration, identifier: existing.identifier, schemaName: schemaName, entityNames: entityNames, location: location)
                    .run(on: recorder) { recorder.stage = $0 }
                let planned = migration.preview(rowCounts: counts)
                let stages = planned.stages.enumerated().map { index, stage in
                    var stage = MigrationPreview.Stage(
                        name: stage.name, changes: stage.changes, rewrittenRows: stage.rewrittenRows, rebuiltIndexes: stage.rebuiltIndexes,
                        rebuiltConstraints: stage.rebuiltConstraints, builtLinks: stage.builtLinks, droppedDatabases: [])
                    stage.statements = recorder.statements[index] ?? []
                    return stage
                }
                return MigrationPreview(store: location, fromVersion: planned.fromVersion, toVersion: planned.toVersion, stages: stages)
            }
        }
    }
}

/// A connection that runs every statement on another and records those that change
/// something (not reads, not session settings), by stage, with their bound values: what a
/// migration preview shows.
private final class RecordingConnection: SQLConnection {
    private let base: any SQLConnection
    /// The stage the statements belong to.
    var stage = 0
    /// The statements recorded, by stage.
    private(set) var statements: [Int: [String]] = [:]

    init(_ base: any SQLConnection) {
        self.base = base
    }

    func execute(_ sql: String, _ binds: [SQLValue]) throws -> SQLResult {
        if !sql.hasPrefix("SELECT"), !sql.hasPrefix("SET ") {
            let values = binds.enumerated().map { "$\($0.offset + 1) = \(Self.text($0.element))" }
            statements[stage, default: []].append(sql + (values.isEmpty ? "" : " -- " + values.joined(separator: ", ")))
        }
        return try base.execute(sql, binds)
    }

    /// A bound value as a preview shows it.
    private static func text(_ value: SQLValue) -> String {
        switch value {
        case .null: "NULL"
        case .bool(let b): "\(b)"
        case .int16(let n): "\(n)"
        case .int32(let n): "\(n)"
        case .int64(let n): "\(n)"
        case .float(let f): "\(f)"
        case .double(let d): "\(d)"
        case .text(let s): "'\(s)'"
        case .bytes(let bytes): "\(bytes.count) bytes"
        case .timestamp(let date): "\(date)"
        case .uuid(let uuid): uuid.uuidString
        case .numeric(let text): text
        }
    }
}
