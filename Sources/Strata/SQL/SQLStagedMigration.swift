import Foundation
import Logging

/// A migration of a server store whose plan has custom stages: their code saves through
/// contexts, so the migration cannot be one transaction. As an LMDB store's runs on a copy
/// of its file (``StagedMigration``), this one runs on a copy of the store's tables in a
/// schema of its own, then swaps the schemas in one transaction:
///
/// 1. A session takes the store's creation lock (other instances that open the store wait)
///    and locks its tables in `SHARE` mode (instances still running write nothing until the
///    migration ends; what they tried then fails, nothing is lost), for the whole migration.
/// 2. The tables are copied into the work schema, laid out as the stored model lays them
///    out, with their keys' sequences, history and metadata.
/// 3. The stages run there: lightweight ones as when a store opens (as DDL, in one
///    transaction); a custom one as on LMDB — `willMigrate` through a context of the old
///    model, a copy of the work schema kept as `didMigrate`'s source, the stage's inferred
///    part as DDL, then `didMigrate` with both versions, and every required value checked.
/// 4. The session renames the store's schema away and the work schema into its place, and
///    commits: the switch is atomic. The old tables are dropped after.
///
/// A failure before the switch drops the copies and leaves the store as it was; copies a
/// crash left are dropped by the next staged migration.
enum SQLStagedMigration {
    /// Runs the custom stages (and the lightweight ones around them) of `options`'s plan
    /// from the version the store holds, when one of them is custom; does nothing for a
    /// store that needs none, a new store, or lightweight stages only (they run when the
    /// store opens).
    ///
    /// - Returns: whether it migrated the store.
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` (the store left as it
    ///   was); ``StrataError/database(store:failure:)``.
    static func runIfNeeded(
        type: PersistentStore.StoreType, model: ManagedObjectModel, options: PersistentStore.Options, logger: Logger
    ) async throws(StrataError) -> Bool {
        guard let opener = type.server, let plan = options.migrationPlan, plan.stages.contains(where: \.isCustom),
              options.shouldMigrateStoreAutomatically, !options.readOnly
        else { return false }
        let driver = try opener.makeDriver(logger: logger, settings: [])
        defer { driver.close() }
        let location = driver.location, schemaName = driver.schema
        let quoted = SQLName.quoted(schemaName)

        // 1. The session that holds the store for the whole migration.
        let session = try SQLStore.run(location) { try driver.openSession(name: "strata migration") }
        var switched = false
        defer { if !switched { session.close() } }
        let existing: StoreMetadata
        do {
            existing = try SQLStore.run(location) { () throws -> StoreMetadata? in
                _ = try session.execute("BEGIN", [])
                let table = quoted + "." + SQLName.quoted(SQLLayout.metadataTable)
                guard case .text? = try session.execute("SELECT to_regclass($1)::text", [.text(table)]).rows.first?.first else { return nil }
                _ = try session.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("strata:" + quoted)])
                var values: [String: String] = [:]
                for row in try session.execute("SELECT key, value FROM \(table)", []).rows {
                    if case .text(let key) = row[0], case .text(let value) = row[1] { values[key] = value }
                }
                guard !values.isEmpty else { return nil }
                return try SQLStore.metadata(from: values, model: model, settings: MigrationSettings(options), location: location).metadata
            } ?? StoreMetadata(identifier: UUID(), formatVersion: 0, modelVersionHash: model.versionHash, createdAt: Date(), schema: StoreSchema(entities: [:]))
        }
        // A new store (given this model's hash above), one of this model, or lightweight stages only: nothing here.
        guard let (start, stages) = try StagedMigration.stagesToRun(plan, from: existing.modelVersionHash, to: model, store: location)
        else { return false }
        defer { options.migrationProgress?.finish() }

        // The work schemas: names of their own, from the store's UUID.
        let tag = String(existing.identifier.uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20))
        let work = "strata_migrating_" + tag, source = "strata_source_" + tag
        let workType = PersistentStore.StoreType.server(named: type.rawValue, opener: opener.inSchema(work))
        let sourceType = PersistentStore.StoreType.server(named: type.rawValue, opener: opener.inSchema(source))
        func drop(_ schema: String) {
            _ = try? driver.withConnection { connection in try connection.execute("DROP SCHEMA IF EXISTS \(SQLName.quoted(schema)) CASCADE", []) }
        }
        do {
            try SQLStore.run(location) {
                // Writers of the store wait from here to the switch.
                let tables = try tableNames(in: schemaName, on: session)
                for name in tables { _ = try session.execute("LOCK TABLE \(quoted).\(SQLName.quoted(name)) IN SHARE MODE", []) }
            }
            drop(work)
            drop(source)
            try copy(schemaName, to: work, metadata: existing, driver: driver, location: location)
            // 3. The stages, on the copy.
            var index = 0
            while index < stages.count {
                if stages[index].isCustom {
                    try await runCustom(
                        stages[index], number: start + index + 1, work: workType, workSchema: work, sourceType: sourceType, sourceSchema: source,
                        driver: driver, location: location, options: options)
                    index += 1
                } else {
                    var end = index
                    while end < stages.count && !stages[end].isCustom { end += 1 }
                    var settings = PersistentStore.Options()
                    settings.migrationPlan = MigrationPlan(stages: Array(stages[index..<end]))
                    settings.shouldInferMappingModelAutomatically = false
                    settings.migrationProgress = options.migrationProgress.map { outer in MigrationProgressHandler { outer.report($0) } }
                    try await withStore(work: workType, model: stages[end - 1].destination, options: settings, location: location, stage: "lightweight stages") { _ in }
                    index = end
                }
            }
            // 4. The switch, in the session's transaction.
            try SQLStore.run(location) {
                let old = "strata_replaced_" + tag
                _ = try session.execute("DROP SCHEMA IF EXISTS \(SQLName.quoted(old)) CASCADE", [])
                _ = try session.execute("ALTER SCHEMA \(quoted) RENAME TO \(SQLName.quoted(old))", [])
                _ = try session.execute("ALTER SCHEMA \(SQLName.quoted(work)) RENAME TO \(quoted)", [])
                _ = try session.execute("COMMIT", [])
                switched = true
                session.close()
                _ = try? driver.withConnection { connection in try connection.execute("DROP SCHEMA IF EXISTS \(SQLName.quoted(old)) CASCADE", []) }
            }
        } catch {
            drop(work)
            drop(source)
            if error.code == .migrationFailed || error.code == .unsupportedByStore { throw error }
            throw .migrationFailed(store: location, reason: "\(error)")
        }
        drop(source)
        options.migrationProgress?.report(MigrationProgress(
            store: location, stage: stages.count, stageCount: stages.count, entityName: nil, completedRows: 0, totalRows: 0, isFinished: true))
        return true
    }

    /// The tables of `schema`.
    private static func tableNames(in schema: String, on connection: any SQLConnection) throws -> [String] {
        try connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name",
            [.text(schema)]
        ).rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } }
    }

    /// Copies the store in schema `from` (holding `metadata`) into a new schema `to`, laid
    /// out as its recorded model lays it out: tables, indexes, foreign keys and the model
    /// guard; rows, key sequences, history and metadata. One transaction.
    private static func copy(_ from: String, to: String, metadata: StoreMetadata, driver: any SQLDriver, location: String) throws(StrataError) {
        guard let stored = metadata.storedModel else {
            throw .migrationFailed(
                store: location, reason: "the store was written before stores recorded their model: open it once with the model it holds first")
        }
        let model: ManagedObjectModel
        do throws(MetadataDecodingError) {
            model = try stored.makeModel()
        } catch {
            throw .migrationFailed(store: location, reason: "the model the store recorded cannot be read: \(error.reason)")
        }
        try SQLStore.run(location) {
            try driver.withConnection { connection in
                try connection.transaction {
                    let source = SQLName.quoted(from), target = SQLName.quoted(to)
                    let existing = Set(try tableNames(in: from, on: connection))
                    let names = Set(model.entities.filter { !$0.isAbstract && existing.contains($0.name) }.map(\.name))
                    let layout = try SQLStore.makeLayout(model: model, schema: metadata.schema, entityNames: names, schemaName: to, location: location).layout
                    _ = try connection.execute("CREATE SCHEMA \(target)", [])
                    _ = try connection.execute("CREATE TABLE \(target).\(SQLName.quoted(SQLLayout.metadataTable)) (key text PRIMARY KEY, value text NOT NULL)", [])
                    for statement in SQLStore.historyCreationStatements(schema: target) { _ = try connection.execute(statement, []) }
                    for statement in layout.creationStatements(hash: metadata.modelVersionHash) { _ = try connection.execute(statement, []) }
                    /// Copies table `name`'s `columns` (quoted) from the store.
                    func rows(_ name: String, _ columns: String) throws {
                        _ = try connection.execute(
                            "INSERT INTO \(target).\(SQLName.quoted(name)) (\(columns)) SELECT \(columns) FROM \(source).\(SQLName.quoted(name))", [])
                    }
                    /// Sets sequence `name` where the store's stands.
                    func sequence(_ name: String) throws {
                        let from = "\(source).\(SQLName.quoted(name))"
                        _ = try connection.execute(
                            "SELECT setval($1::regclass, last_value, is_called) FROM \(from)", [.text("\(target).\(SQLName.quoted(name))")])
                    }
                    try rows(SQLLayout.metadataTable, "key, value")
                    try rows(SQLStore.historyTable, "sequence, instance, committed, record")
                    try sequence(SQLStore.historySequence)
                    for table in layout.tables.values.sorted(by: { $0.tableName < $1.tableName }) {
                        try rows(table.tableName, table.selectList)
                        try sequence(table.sequenceName)
                        for link in table.links where existing.contains(link.tableName) {
                            try rows(link.tableName, "owner, destination, destination_entity, position")
                        }
                    }
                }
            }
        }
    }

    /// Runs custom `stage` (number `number` of the plan) on the store in schema
    /// `workSchema`, as ``StagedMigration`` runs one on an LMDB copy.
    private static func runCustom(
        _ stage: MigrationStage, number: Int, work: PersistentStore.StoreType, workSchema: String, sourceType: PersistentStore.StoreType,
        sourceSchema: String, driver: any SQLDriver, location: String, options: PersistentStore.Options
    ) async throws(StrataError) {
        guard case .custom(let from, let to, let willMigrate, let didMigrate) = stage else { return }
        let name = "stage \(number) (\(stage))"
        var storeOptions = PersistentStore.Options()
        storeOptions.shouldMigrateStoreAutomatically = false

        // 1. willMigrate, on the store as it is.
        if let willMigrate {
            try await withStore(work: work, model: from, options: storeOptions, location: location, stage: name) { coordinator in
                try await willMigrate(ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "willMigrate"))
            }
        }
        // 2. A copy of the store before the inferred part: the source of didMigrate.
        let metadata = try workMetadata(workSchema, model: from, driver: driver, location: location)
        try copy(workSchema, to: sourceSchema, metadata: metadata, driver: driver, location: location)
        // 3. The inferred part, in one transaction.
        let part: (step: MigrationStep, fills: [(entity: String, attribute: String)], problems: [String])
        do throws(MetadataDecodingError) {
            part = try MigrationStep.customPart(from: metadata.storedModel ?? StoredModel(from), schema: metadata.schema, to: to)
        } catch {
            throw .migrationFailed(store: location, reason: "\(name) cannot read the model it begins at: \(error.reason)")
        }
        if !part.problems.isEmpty {
            throw .migrationFailed(store: location, reason: part.problems.map { "\(name) cannot do this: \($0)" }.joined(separator: "; "))
        }
        let migration = StoreMigration(
            steps: [part.step], names: [name], path: location,
            progress: options.migrationProgress.map { outer in MigrationProgressHandler { outer.report($0) } })
        try SQLStore.run(location) {
            try driver.withConnection { connection in
                try connection.transaction {
                    try SQLMigration(
                        migration: migration, identifier: metadata.identifier, schemaName: workSchema, entityNames: Set(to.entitiesByName.keys),
                        location: location
                    ).run(on: connection)
                    try SQLStore.record(
                        to, schema: part.step.targetSchema, in: SQLName.quoted(workSchema) + "." + SQLName.quoted(SQLLayout.metadataTable), on: connection)
                }
            }
        }
        // 4. didMigrate, with both versions (the source read-only); then every required value must be there.
        var readOnly = storeOptions
        readOnly.readOnly = true
        try await withStore(work: sourceType, model: from, options: readOnly, location: location, stage: name) { source in
            try await withStore(work: work, model: to, options: storeOptions, location: location, stage: name) { destination in
                let contexts = MigrationContexts(
                    source: ManagedObjectContext(.privateQueue, coordinator: source, name: "migration source"),
                    destination: ManagedObjectContext(.privateQueue, coordinator: destination, name: "migration destination"))
                if let didMigrate { try await didMigrate(contexts) }
                try await StagedMigration.checkFilled(part.fills, of: to, in: destination, store: location, stage: name)
            }
        }
        _ = try? driver.withConnection { connection in try connection.execute("DROP SCHEMA IF EXISTS \(SQLName.quoted(sourceSchema)) CASCADE", []) }
    }

    /// The metadata of the store in `schema`.
    private static func workMetadata(_ schema: String, model: ManagedObjectModel, driver: any SQLDriver, location: String) throws(StrataError) -> StoreMetadata {
        let values = try SQLStore.run(location) {
            try driver.withConnection { connection in
                var values: [String: String] = [:]
                for row in try connection.execute("SELECT key, value FROM \(SQLName.quoted(schema)).\(SQLName.quoted(SQLLayout.metadataTable))", []).rows {
                    if case .text(let key) = row[0], case .text(let value) = row[1] { values[key] = value }
                }
                return values
            }
        }
        return try SQLStore.metadata(from: values, model: model, settings: MigrationSettings(), location: location).metadata
    }

    /// Adds the store of `work` with `model` to a coordinator of its own, runs `body`, and
    /// closes it again; an error of `body` that is not a ``StrataError`` becomes
    /// ``StrataError/migrationFailed(store:reason:conflicts:)`` naming the stage.
    private static func withStore(
        work: PersistentStore.StoreType, model: ManagedObjectModel, options: PersistentStore.Options, location: String, stage: String,
        _ body: (PersistentStoreCoordinator) async throws -> Void
    ) async throws(StrataError) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        do {
            try await coordinator.addPersistentStore(type: work, options: options)
        } catch {
            throw .migrationFailed(store: location, reason: "\(stage): the store cannot be opened for the stage: \(error)")
        }
        do {
            try await body(coordinator)
        } catch let error as StrataError where error.code == .migrationFailed {
            try? await coordinator.close()
            throw error
        } catch {
            try? await coordinator.close()
            throw .migrationFailed(store: location, reason: "\(stage) threw: \(error)")
        }
        try? await coordinator.close()
    }
}
