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

    /// Where the database is, for errors.
    var location: String { driver.location }

    /// Opens the store in `driver`'s schema, creating its tables when the schema holds no
    /// store yet. Two processes opening a new store at once create it once: the creation
    /// holds a transaction-scoped advisory lock.
    ///
    /// - Throws: ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)`` when the
    ///   store was written with another model; ``StrataError/incompatibleStore(store:reason:)``
    ///   for a newer format, names PostgreSQL cannot hold, or tables that are not what the
    ///   model needs; ``StrataError/database(store:failure:)`` when the server fails.
    init(driver: any SQLDriver, model: ManagedObjectModel, entityNames: Set<String>) throws(StrataError) {
        self.driver = driver
        self.model = model
        let schema = StoreSchema(assigningNumbersFor: model)
        self.schema = schema
        var entities: [String: EntityStorage] = [:]
        for entity in model.entities {
            entities[entity.name] = try EntityStorage(entity, in: model, schema: schema, opener: nil)
        }
        self.entities = entities
        entitiesByNumber = Dictionary(uniqueKeysWithValues: entities.values.map { ($0.number, $0) })
        let layout = try SQLLayout(model: model, entities: entities, entityNames: entityNames, schema: driver.schema, location: driver.location)
        self.layout = layout
        let location = driver.location
        identifier = try Self.run(location) {
            try driver.withConnection { connection in
                try Self.openOrCreate(layout: layout, model: model, on: connection, location: location)
            }
        }
    }

    /// Reads the store's metadata, or creates the store; returns its identifier.
    private static func openOrCreate(layout: SQLLayout, model: ManagedObjectModel, on connection: any SQLConnection, location: String) throws -> UUID {
        let metadata = layout.qualified(SQLLayout.metadataTable)
        _ = try connection.execute("CREATE SCHEMA IF NOT EXISTS \(layout.schema)", [])
        return try connection.transaction {
            // One creator at a time per schema (any process): the lock ends with the transaction.
            _ = try connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("strata:" + layout.schema)])
            _ = try connection.execute("CREATE TABLE IF NOT EXISTS \(metadata) (key text PRIMARY KEY, value text NOT NULL)", [])
            for statement in historyCreationStatements(layout: layout) { _ = try connection.execute(statement, []) }
            var values: [String: String] = [:]
            for row in try connection.execute("SELECT key, value FROM \(metadata)", []).rows {
                if case .text(let key) = row[0], case .text(let value) = row[1] { values[key] = value }
            }
            if values.isEmpty {
                let identifier = UUID()
                for statement in layout.creationStatements() { _ = try connection.execute(statement, []) }
                _ = try connection.execute(
                    "INSERT INTO \(metadata) (key, value) VALUES ('format', $1), ('identifier', $2), ('modelHash', $3), ('modelVersion', $4)",
                    [.text("\(formatVersion)"), .text(identifier.uuidString), .text(model.versionHash), .text(model.versionIdentifier ?? "")])
                return identifier
            }
            guard let format = values["format"].flatMap(Int.init), let identifier = values["identifier"].flatMap(UUID.init(uuidString:)),
                  let hash = values["modelHash"]
            else {
                throw StrataError.incompatibleStore(store: location, reason: "its strata_metadata table is not a Strata store's: \(values.keys.sorted())")
            }
            guard format <= formatVersion else {
                throw StrataError.incompatibleStore(store: location, reason: "it was written in format \(format), newer than this version of Strata's \(formatVersion)")
            }
            guard hash == model.versionHash else {
                throw StrataError.modelMismatch(store: location, storeHash: hash, modelHash: model.versionHash)
            }
            try checkTables(layout: layout, on: connection, location: location)
            return identifier
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
        return try Self.run(location) { try driver.withConnection(body) }
    }

    /// Runs `body` on `snapshot`'s connection (a pinned query generation's transaction), or
    /// on a connection of the pool when it is nil; errors as ``run(_:_:)`` makes them.
    ///
    /// - Throws: ``StrataError/coordinatorClosed`` once the coordinator closed the store.
    func withConnection<R>(in pinned: SQLSnapshot?, _ body: (any SQLConnection) throws -> R) throws(StrataError) -> R {
        guard let pinned else { return try withConnection(body) }
        if closed.withLock({ $0 }) { throw .coordinatorClosed }
        return try Self.run(location) { try pinned.run(body) }
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
