import Foundation
internal import StrataLocks

/// A store in a SQL database server (PostgreSQL, through StrataPostgres's driver): the
/// same contexts, objects, fetches and saves as an LMDB store, on tables laid out by
/// ``SQLLayout``, so that several processes (instances of a server) share one store.
///
/// The coordinator drives it through the same operations as an LMDB ``StoreFile``: rows by
/// ID (faults), to-many destinations, fetches (``SQLStore/fetch(_:)``), saves
/// (``SQLStore/write(_:)``) and permanent IDs. Every operation runs on a connection of the
/// driver's pool; a save is one transaction.
final class SQLStore: Sendable {
    /// The format this code writes in `strata_metadata`.
    static let formatVersion = 1

    let driver: any SQLDriver
    /// The model the store was opened with.
    let model: ManagedObjectModel
    /// The store's UUID (recorded in the database: the same in every process).
    let identifier: UUID
    /// This opening of the store (one "instance" of the application): its history rows
    /// and notifications carry it, so that it can tell its own commits from others'.
    let instance = UUID()
    /// The store's entity and field numbers (assigned from the model, deterministically).
    let schema: StoreSchema
    /// How each entity is stored, by name.
    let entities: [String: EntityStorage]
    private let entitiesByNumber: [UInt16: EntityStorage]
    /// The tables.
    let layout: SQLLayout
    /// Whether the coordinator closed the store.
    private let closed = LockedValue(false)
    /// Blocks of primary keys reserved from each entity's sequence, by entity number.
    private let keyBlocks = LockedValue<[UInt16: KeyBlock]>([:])

    /// The remaining keys of one reserved block.
    private struct KeyBlock {
        var next: Int64
        var end: Int64
    }

    /// The lightweight migration the open ran, if it ran one: the versions and stages.
    let migration: (from: String, to: String, stages: [String])?

    /// Where the database is, for errors.
    var location: String { driver.location }

    /// Opens the store in `driver`'s schema, creating its tables when the schema holds no
    /// store yet, or migrating them (``SQLMigration``) when the store holds another
    /// version of the model and `settings` migrate. Two processes opening a store at once
    /// create or migrate it once: the creation holds a transaction-scoped advisory lock.
    ///
    /// - Throws: ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)`` when the
    ///   store was written with another model and `settings` do not migrate;
    ///   ``StrataError/migrationFailed(store:reason:conflicts:)`` for a migration that could
    ///   not be done (the store left as it was); ``StrataError/incompatibleStore(store:reason:)``
    ///   for a newer format, names PostgreSQL cannot hold, or tables that are not what the
    ///   model needs; ``StrataError/database(store:failure:)`` when the server fails.
    init(
        driver: any SQLDriver, model: ManagedObjectModel, entityNames: Set<String>, migration settings: MigrationSettings = MigrationSettings()
    ) throws(StrataError) {
        self.driver = driver
        self.model = model
        let location = driver.location
        let opened = try Self.run(location) {
            try driver.withConnection { connection in
                try Self.openOrCreate(
                    model: model, entityNames: entityNames, schemaName: driver.schema, settings: settings, on: connection, location: location)
            }
        }
        identifier = opened.identifier
        schema = opened.schema
        entities = opened.entities
        layout = opened.layout
        migration = opened.migration
        entitiesByNumber = Dictionary(uniqueKeysWithValues: opened.entities.values.map { ($0.number, $0) })
    }

    /// What opening the store found or made.
    private struct Opened {
        let identifier: UUID
        let schema: StoreSchema
        let entities: [String: EntityStorage]
        let layout: SQLLayout
        let migration: (from: String, to: String, stages: [String])?
    }

    /// How `model`'s entities are stored under `schema`'s numbers, and the tables of those
    /// among `entityNames`.
    static func makeLayout(
        model: ManagedObjectModel, schema: StoreSchema, entityNames: Set<String>, schemaName: String, location: String
    ) throws(StrataError) -> (entities: [String: EntityStorage], layout: SQLLayout) {
        var entities: [String: EntityStorage] = [:]
        for entity in model.entities {
            entities[entity.name] = try EntityStorage(entity, in: model, schema: schema, opener: nil)
        }
        let layout = try SQLLayout(model: model, entities: entities, entityNames: entityNames, schema: schemaName, location: location)
        return (entities, layout)
    }

    /// The metadata keys of `strata_metadata`.
    enum MetadataKey {
        static let format = "format"
        static let identifier = "identifier"
        static let modelHash = "modelHash"
        static let modelVersion = "modelVersion"
        /// The ``StoreSchema`` (entity and field numbers), base64.
        static let schema = "schema"
        /// The ``StoredModel`` (JSON): what a migration starts from.
        static let model = "model"
    }

    /// Reads the store's metadata (migrating the store when it holds another model and
    /// `settings` say so), or creates the store.
    private static func openOrCreate(
        model: ManagedObjectModel, entityNames: Set<String>, schemaName: String, settings: MigrationSettings,
        on connection: any SQLConnection, location: String
    ) throws -> Opened {
        let quotedSchema = SQLName.quoted(schemaName)
        let metadata = quotedSchema + "." + SQLName.quoted(SQLLayout.metadataTable)
        _ = try connection.execute("CREATE SCHEMA IF NOT EXISTS \(quotedSchema)", [])
        return try connection.transaction {
            // One creator (or migrator) at a time per schema, in any process: the lock ends with the transaction.
            _ = try connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("strata:" + quotedSchema)])
            _ = try connection.execute("CREATE TABLE IF NOT EXISTS \(metadata) (key text PRIMARY KEY, value text NOT NULL)", [])
            for statement in historyCreationStatements(schema: quotedSchema) { _ = try connection.execute(statement, []) }
            var values: [String: String] = [:]
            for row in try connection.execute("SELECT key, value FROM \(metadata)", []).rows {
                if case .text(let key) = row[0], case .text(let value) = row[1] { values[key] = value }
            }
            /// Records `model` (its hash, version, description and `schema`) as the store's.
            func record(_ model: ManagedObjectModel, schema: StoreSchema) throws {
                try Self.record(model, schema: schema, in: metadata, on: connection)
            }

            if values.isEmpty {
                let identifier = UUID()
                let schema = StoreSchema(assigningNumbersFor: model)
                let (entities, layout) = try makeLayout(
                    model: model, schema: schema, entityNames: entityNames, schemaName: schemaName, location: location)
                for statement in layout.creationStatements(hash: model.versionHash) { _ = try connection.execute(statement, []) }
                _ = try connection.execute(
                    "INSERT INTO \(metadata) (key, value) VALUES ('\(MetadataKey.format)', $1), ('\(MetadataKey.identifier)', $2)",
                    [.text("\(formatVersion)"), .text(identifier.uuidString)])
                try record(model, schema: schema)
                return Opened(identifier: identifier, schema: schema, entities: entities, layout: layout, migration: nil)
            }
            let (existing, recordsAll) = try Self.metadata(from: values, model: model, settings: settings, location: location)
            let identifier = existing.identifier, hash = existing.modelVersionHash, storedModel = existing.storedModel
            var schema = existing.schema

            var migrated: (from: String, to: String, stages: [String])?
            var migrator: StoreMigration?
            if hash != model.versionHash && settings.migratesAutomatically {
                // Custom stages ran before (SQLStagedMigration, from the asynchronous
                // addPersistentStore); one still ahead is refused by the planning.
                migrator = try StoreMigration(existing: existing, model: model, settings: settings, path: location)
            } else if hash == model.versionHash {
                if !recordsAll {
                    try record(model, schema: schema)   // a store written before stores recorded both
                } else if settings.migratesAutomatically {
                    migrator = try StoreMigration.refreshing(existing: existing, model: model, settings: settings, path: location)
                }
            } else {
                var changes: [String] = []
                if let storedModel {
                    let diff = SchemaDiff(from: storedModel, to: model)
                    changes = diff.changes.map(\.description) + diff.problems.map { "needs a custom stage: " + $0 }
                }
                throw StrataError.modelMismatch(store: location, storeHash: hash, modelHash: model.versionHash, changes: changes)
            }
            if let migrator {
                try SQLMigration(migration: migrator, identifier: identifier, schemaName: schemaName, entityNames: entityNames, location: location)
                    .run(on: connection)
                schema = migrator.metadata(after: existing).schema
                try record(model, schema: schema)
                migrated = (migrator.fromVersion, migrator.toVersion, migrator.names)
            }
            if let problem = schema.problem(storing: model) {
                throw StrataError.incompatibleStore(store: location, reason: "its metadata is damaged: \(problem)")
            }
            let (entities, layout) = try makeLayout(model: model, schema: schema, entityNames: entityNames, schemaName: schemaName, location: location)
            try checkTables(layout: layout, on: connection, location: location)
            try installGuard(layout: layout, hash: model.versionHash, schemaName: schemaName, on: connection)
            return Opened(identifier: identifier, schema: schema, entities: entities, layout: layout, migration: migrated)
        }
    }

    /// Records `model` (its hash, version, description and `schema`) in the metadata table
    /// `metadata` (qualified, quoted).
    static func record(_ model: ManagedObjectModel, schema: StoreSchema, in metadata: String, on connection: any SQLConnection) throws {
        let entries: [(String, String)] = [
            (MetadataKey.modelHash, model.versionHash), (MetadataKey.modelVersion, model.versionIdentifier ?? ""),
            (MetadataKey.schema, Data(schema.encoded()).base64EncodedString()),
            (MetadataKey.model, String(decoding: StoredModel(model).encoded(), as: UTF8.self)),
        ]
        for (key, value) in entries {
            _ = try connection.execute(
                "INSERT INTO \(metadata) (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                [.text(key), .text(value)])
        }
    }

    /// The store `values` (the rows of `strata_metadata`) describe, read for opening it with
    /// `model`; and whether it recorded both its model and its numbers (stores written before
    /// they did get them at their next open).
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` for metadata that is not a
    ///   Strata store's, of a newer format, or damaged.
    static func metadata(
        from values: [String: String], model: ManagedObjectModel, settings: MigrationSettings, location: String
    ) throws(StrataError) -> (metadata: StoreMetadata, recordsAll: Bool) {
        guard let format = values[MetadataKey.format].flatMap(Int.init),
              let identifier = values[MetadataKey.identifier].flatMap(UUID.init(uuidString:)),
              let hash = values[MetadataKey.modelHash]
        else {
            throw StrataError.incompatibleStore(store: location, reason: "its strata_metadata table is not a Strata store's: \(values.keys.sorted())")
        }
        guard format <= formatVersion else {
            throw StrataError.incompatibleStore(store: location, reason: "it was written in format \(format), newer than this version of Strata's \(formatVersion)")
        }
        var storedModel: StoredModel?
        if let text = values[MetadataKey.model] {
            do throws(MetadataDecodingError) {
                storedModel = try StoredModel(decoding: Array(text.utf8))
            } catch {
                throw StrataError.incompatibleStore(store: location, reason: "the model it recorded cannot be read: \(error.reason)")
            }
        }
        let schema: StoreSchema
        if let text = values[MetadataKey.schema] {
            guard let bytes = Data(base64Encoded: text) else {
                throw StrataError.incompatibleStore(store: location, reason: "the schema it recorded is not base64")
            }
            let decoded = bytes.withUnsafeBytes { raw in
                Result { () throws(MetadataDecodingError) -> StoreSchema in try StoreSchema(decoding: raw) }
            }
            switch decoded {
            case .success(let recorded): schema = recorded
            case .failure(let error):
                throw StrataError.incompatibleStore(store: location, reason: "the schema it recorded cannot be read: \(error.reason)")
            }
        } else {
            // A store written before stores recorded their numbers: they were assigned
            // from the model it was created with, deterministically.
            let created = hash == model.versionHash ? model : try storedModel.map { stored throws(StrataError) in
                do throws(MetadataDecodingError) { return try stored.makeModel() } catch {
                    throw StrataError.incompatibleStore(store: location, reason: "the model it recorded cannot be read: \(error.reason)")
                }
            }
            let planned = settings.plan?.stages.first { $0.source.versionHash == hash }?.source
            schema = StoreSchema(assigningNumbersFor: created ?? planned ?? model)
        }
        let existing = StoreMetadata(
            identifier: identifier, formatVersion: format, modelVersionHash: hash, createdAt: Date(), schema: schema, storedModel: storedModel)
        return (existing, storedModel != nil && values[MetadataKey.schema] != nil)
    }

    /// Makes sure the model guard holds `hash` and every table has its trigger (a store
    /// created before the guard existed gets it here; a store of this model has it already,
    /// and then this only reads the catalog).
    private static func installGuard(layout: SQLLayout, hash: String, schemaName: String, on connection: any SQLConnection) throws {
        let source = try connection.execute(
            "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2",
            [.text(schemaName), .text(SQLLayout.guardName)]).rows.first?.first
        if case .text(let text)? = source, text.contains("'\(hash)'") {
            // The guard of this model.
        } else {
            _ = try connection.execute(layout.guardFunctionStatement(hash: hash), [])
        }
        let guarded = Set(try connection.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                + "WHERE n.nspname = $1 AND t.tgname = $2", [.text(schemaName), .text(SQLLayout.guardName)]
        ).rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } })
        for table in layout.tables.values.sorted(by: { $0.tableName < $1.tableName }) {
            for (name, qualified) in [(table.tableName, table.name)] + table.links.map({ ($0.tableName, $0.name) }) where !guarded.contains(name) {
                _ = try connection.execute(layout.guardTriggerStatement(on: qualified), [])
            }
        }
    }

    /// Checks that every table and column the model needs exists with its type.
    private static func checkTables(layout: SQLLayout, on connection: any SQLConnection, location: String) throws {
        let schemaName = String(layout.schema.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
        var found: [String: [String: String]] = [:]
        let rows = try connection.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1", [.text(schemaName)]).rows
        for row in rows {
            guard case .text(let table) = row[0], case .text(let column) = row[1], case .text(let type) = row[2] else { continue }
            found[table, default: [:]][column] = type
        }
        for table in layout.tables.values.sorted(by: { $0.tableName < $1.tableName }) {
            guard let columns = found[table.tableName] else {
                throw StrataError.incompatibleStore(store: location, reason: "table \(table.tableName) is missing (the schema was changed underneath the store)")
            }
            var expected: [(String, String)] = [(SQLLayout.keyColumn, "bigint"), (SQLLayout.versionColumn, "bigint")]
            for column in table.columns {
                switch column.kind {
                case .attribute(_, let type): expected.append((column.name, SQLColumn.sqlType(of: type)))
                case .toOne(_, let destination, _):
                    expected.append((column.name, "bigint"))
                    if destination == nil { expected.append((column.name + "._entity", "smallint")) }
                }
            }
            for (name, type) in expected {
                // information_schema spells timestamptz in full.
                let spelled = type == "timestamptz" ? "timestamp with time zone" : type
                guard let actual = columns[name] else {
                    throw StrataError.incompatibleStore(store: location, reason: "column \(table.tableName).\(name) is missing (the schema was changed underneath the store)")
                }
                guard actual == spelled else {
                    throw StrataError.incompatibleStore(store: location, reason: "column \(table.tableName).\(name) is \(actual), not \(spelled) (the schema was changed underneath the store)")
                }
            }
        }
    }

    // MARK: The catalog

    /// How `entityName` is stored.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``.
    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage {
        guard let storage = entities[entityName] else { throw .unknownEntity(entityName) }
        return storage
    }

    /// The storage of entity `number`, or nil.
    func entityStorage(numbered number: UInt16) -> EntityStorage? { entitiesByNumber[number] }

    /// The permanent ID of row `key` of `entityName`.
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID {
        ManagedObjectID(store: identifier, entityName: entityName, primaryKey: key)
    }

    /// The table and primary key of the row `id` names.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for a temporary ID, an ID of
    ///   another store or of an abstract entity.
    func row(of id: ManagedObjectID) throws(StrataError) -> (table: SQLTable, key: Int64) {
        guard let key = id.primaryKey, let store = id.storeIdentifier else {
            throw .invalidObjectState(id, reason: "it has a temporary ID; the store needs a permanent one")
        }
        guard store == identifier else {
            throw .invalidObjectState(id, reason: "it belongs to store \(store), not to store \(identifier) at \(location)")
        }
        guard let table = layout.tables[id.entityName] else {
            throw .invalidObjectState(id, reason: "entity \(id.entityName) has no table in this store (abstract, or not in its configuration)")
        }
        return (table, Int64(bitPattern: key.rawValue))
    }

    // MARK: Primary keys

    /// A new primary key for a row of `table` (``makeKeys(_:for:on:)`` of one).
    func makeKey(for table: SQLTable, on connection: any SQLConnection) throws -> Int64 {
        try makeKeys(1, for: table, on: connection)[0]
    }

    /// `count` new primary keys for rows of `table`: from the block this process reserved,
    /// then from as many new blocks as needed, reserved in one statement (each `nextval`
    /// of the entity's sequence, which counts in steps of ``SQLLayout/keyBlockSize``, is a
    /// block of its own). A sequence is not transactional: a rolled-back save leaves a
    /// gap, never a key used twice, in this process or any other.
    func makeKeys(_ count: Int, for table: SQLTable, on connection: any SQLConnection) throws -> [Int64] {
        let number = table.storage.number
        var keys = keyBlocks.withLock { blocks -> [Int64] in
            guard var block = blocks[number], block.next < block.end else { return [] }
            let taken = Array(block.next..<min(block.end, block.next + Int64(count)))
            block.next += Int64(taken.count)
            blocks[number] = block
            return taken
        }
        let missing = count - keys.count
        guard missing > 0 else { return keys }
        let blocks = (missing + Int(SQLLayout.keyBlockSize) - 1) / Int(SQLLayout.keyBlockSize)
        let result = try connection.execute(
            "SELECT nextval($1::regclass) FROM generate_series(1, $2)", [.text(layout.qualified(table.sequenceName)), .int32(Int32(clamping: blocks))])
        let starts = result.rows.compactMap { $0.first?.integer }
        guard starts.count == blocks else {
            throw DatabaseFailure(kind: .schemaChanged, message: "sequence \(table.sequenceName) returned \(starts.count) values, not \(blocks)")
        }
        for start in starts {
            let block = start..<(start + SQLLayout.keyBlockSize)
            let needed = count - keys.count
            if needed >= block.count {
                keys += block
            } else {
                keys += block.prefix(needed)
                // The rest of the last block serves the next keys (a block another thread
                // reserved meanwhile is replaced: its rest is a gap, never a reuse).
                keyBlocks.withLock { $0[number] = KeyBlock(next: start + Int64(needed), end: block.upperBound) }
            }
        }
        return keys
    }

    /// A permanent ID for a new object of `entityName` (``makeKey(for:on:)``).
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``; ``StrataError/invalidObjectState(_:reason:)``
    ///   for an abstract entity; ``StrataError/database(store:failure:)``.
    func makePermanentID(for entityName: String) throws(StrataError) -> ManagedObjectID {
        guard let storage = entities[entityName] else { throw .unknownEntity(entityName) }
        guard let table = layout.tables[entityName] else {
            throw .invalidObjectState(
                ManagedObjectID(temporaryFor: entityName), reason: "entity \(entityName) is abstract (or not in the store's configuration): it has no rows")
        }
        let key = try withConnection { connection in try makeKey(for: table, on: connection) }
        guard let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else {
            throw .database(store: location, failure: DatabaseFailure(kind: .schemaChanged, message: "sequence \(table.sequenceName) returned 0"))
        }
        return objectID(entity: storage.name, key: primaryKey)
    }

    // MARK: Errors

    /// Runs `body`, turning a driver's ``DatabaseFailure`` into ``StrataError/database(store:failure:)``.
    static func run<R>(_ location: String, _ body: () throws -> R) throws(StrataError) -> R {
        do {
            return try body()
        } catch let error as StrataError {
            throw error
        } catch let failure as DatabaseFailure {
            throw .database(store: location, failure: failure)
        } catch {
            throw .database(store: location, failure: DatabaseFailure(kind: .serverError, message: "\(error)"))
        }
    }

    /// Runs `body` with a connection, errors as ``run(_:_:)`` makes them.
    ///
    /// - Throws: ``StrataError/coordinatorClosed`` once the coordinator closed the store.
    func withConnection<R>(_ body: (any SQLConnection) throws -> R) throws(StrataError) -> R {
        if closed.withLock({ $0 }) { throw .coordinatorClosed }
        let driver = driver
        do {
            return try Self.run(location) { try driver.withConnection(body) }
        } catch {
            throw mismatch(error)
        }
    }

    /// ``withConnection(_:)`` for work whose own errors must reach the caller as they were
    /// thrown (what a custom merge policy throws fails the save with that error, as on
    /// LMDB); a driver's ``DatabaseFailure`` still becomes ``StrataError/database(store:failure:)``.
    func withConnectionPassingErrors<R>(_ body: (any SQLConnection) throws -> R) throws -> R {
        if closed.withLock({ $0 }) { throw StrataError.coordinatorClosed }
        do {
            return try driver.withConnection(body)
        } catch let error as StrataError {
            throw mismatch(error)
        } catch let failure as DatabaseFailure {
            throw mismatch(.database(store: location, failure: failure))
        }
    }

    /// ``withConnectionPassingErrors(_:)`` on `pinned`'s connection when there is one: a
    /// fetch's in-memory test fails with the evaluator's own error, as on LMDB.
    func withConnectionPassingErrors<R>(in pinned: SQLSnapshot?, _ body: (any SQLConnection) throws -> R) throws -> R {
        guard let pinned else { return try withConnectionPassingErrors(body) }
        if closed.withLock({ $0 }) { throw StrataError.coordinatorClosed }
        do {
            return try pinned.run(body)
        } catch let error as StrataError {
            throw mismatch(error)
        } catch let failure as DatabaseFailure {
            throw mismatch(.database(store: location, failure: failure))
        }
    }

    /// `error`, or ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)`` when it
    /// says the store holds another model than this instance's: the model guard refused a
    /// write, or a statement named a table or column the store no longer has and the
    /// store's metadata names another model (another instance migrated the store).
    func mismatch(_ error: StrataError) -> StrataError {
        guard let failure = error.databaseFailure else { return error }
        if failure.sqlState == SQLLayout.guardState {
            let storeHash = failure.message.split(separator: " ").last.map(String.init) ?? ""
            return .modelMismatch(store: location, storeHash: storeHash, modelHash: model.versionHash)
        }
        guard failure.kind == .schemaChanged, !closed.withLock({ $0 }) else { return error }
        let metadata = layout.qualified(SQLLayout.metadataTable)
        let stored = try? driver.withConnection { connection in
            try connection.execute("SELECT value FROM \(metadata) WHERE key = $1", [.text(MetadataKey.modelHash)]).rows.first?.first
        }
        guard case .text(let storeHash)? = stored, storeHash != model.versionHash else { return error }
        return .modelMismatch(store: location, storeHash: storeHash, modelHash: model.versionHash)
    }

    /// Runs `body` on `snapshot`'s connection (a pinned query generation's transaction), or
    /// on a connection of the pool when it is nil; errors as ``run(_:_:)`` makes them.
    ///
    /// - Throws: ``StrataError/coordinatorClosed`` once the coordinator closed the store.
    func withConnection<R>(in pinned: SQLSnapshot?, _ body: (any SQLConnection) throws -> R) throws(StrataError) -> R {
        guard let pinned else { return try withConnection(body) }
        if closed.withLock({ $0 }) { throw .coordinatorClosed }
        do {
            return try Self.run(location) { try pinned.run(body) }
        } catch {
            throw mismatch(error)
        }
    }

    /// A snapshot of the store's newest committed state, held open for a pinned query
    /// generation (``SQLSnapshot``).
    func makeSnapshot(idleTimeout: Duration?) throws(StrataError) -> SQLSnapshot {
        if closed.withLock({ $0 }) { throw .coordinatorClosed }
        return try SQLSnapshot(driver: driver, location: location, idleTimeout: idleTimeout)
    }

    /// Closes the driver's connections.
    func close() {
        closed.withLock { $0 = true }
        driver.close()
    }
}
