import Foundation
import Synchronization
import StrataLMDB

/// One Strata store on disk: an LMDB environment laid out as DESIGN.md's "Store layout
/// (LMDB)" says, opened against a ``ManagedObjectModel``.
///
/// The coordinator drives it through two closure-scoped entry points:
/// ``write(_:)`` lends a ``StoreWriter`` for one LMDB write transaction, and
/// ``read(in:_:)`` (in a fresh transaction, or a pinned ``ReadSnapshot``) lends a
/// ``StoreReader`` for one read transaction.
///
/// ## Databases
///
/// | database                    | key                                        | value |
/// |-----------------------------|--------------------------------------------|-------|
/// | `strata.metadata`           | see ``StoreMetadata``                      | |
/// | `strata.history`            | (written by the coordinator)               | |
/// | `rows:<Entity>`             | primary key, 8 bytes big-endian            | a ``Record``: version, stored attributes, to-one foreign keys |
/// | `index:<Entity>.<attribute>`| ``IndexKeyEncoding`` of the value (nil too), truncated to 503 bytes, then the primary key | empty |
/// | `links:<Entity>.<relation>` | owner ``RowReference`` + destination ``RowReference`` | empty, or the 8-byte position when ordered |
///
/// Rows, indexes and links exist per concrete (non-abstract) entity, inherited
/// properties included: a `Checklist` that inherits `Note.title` has its own
/// `rows:Checklist` and `index:Checklist.title`. A to-one relationship is a field of
/// the row holding the destination's 10-byte ``RowReference`` (as binary data).
///
/// ## Relationships
///
/// - One-to-many (`Note.folder` ↔ `Folder.notes`): the to-one side is authoritative.
///   Writing a note stores its foreign key and moves its link in `links:Folder.notes`.
///   The folder's `.toMany` snapshot only orders the existing links (when ordered).
/// - Many-to-many: each side writes its own links database from its own snapshot.
/// - One-to-one: a foreign key in both rows, each written from its own snapshot.
final class StoreFile: Sendable {
    /// The store directory.
    let path: String
    /// The model the store was opened with (its version hash equals the store's).
    let model: ManagedObjectModel
    /// What the store records about itself.
    let metadata: StoreMetadata
    /// The LMDB environment.
    let environment: Environment
    /// Whether the store was opened read-only.
    let isReadOnly: Bool

    /// The metadata database.
    let metadataDatabase: Database
    /// The persistent-history database.
    let historyDatabase: Database
    /// How each entity is stored, by entity name.
    let entities: [String: EntityStorage]
    /// How each entity is stored, by entity number (a dense table: the schema numbers
    /// entities from 1 up; a number it never gave is nil).
    private let entitiesByNumber: [EntityStorage?]
    /// Whether any entity has a uniqueness constraint (saves skip the unique indexes otherwise).
    let hasUniquenessConstraints: Bool
    /// The last transaction id whose model hash ``checkModelUnchanged(_:)`` read.
    let checkedTransaction = Atomic<Int>(0)
    /// The lightweight migration the open ran, if it ran one: the versions and stages.
    let migration: (from: String, to: String, stages: [String])?

    /// The store's UUID.
    var identifier: UUID { metadata.identifier }
    /// The store's entity and field numbers.
    var schema: StoreSchema { metadata.schema }

    /// Opens the store in `directory`, or creates it there.
    ///
    /// A new store gets a UUID, and its metadata (``StoreMetadata``) is written in one
    /// write transaction before any other database is created. An existing store must
    /// have been written by this store format or an older one, and with a model of the
    /// same version hash: otherwise nothing at all is written.
    ///
    /// `configuration.maxDatabases` is raised to what the model needs. With `readOnly`,
    /// the directory and the store must exist. With `verifyingPages`, every page the
    /// store's trees reach is checked first (`Environment.verifyPages()`).
    ///
    /// - Throws: ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)`` when the model
    ///   differs; ``StrataError/incompatibleStore(store:reason:)`` for a newer format,
    ///   damaged metadata or an LMDB environment holding other data;
    ///   ``StrataError/corruptStore(store:reason:)`` when `data.mdb` is truncated, is
    ///   not an LMDB file or has damaged meta pages (or, `verifyingPages`, damaged pages);
    ///   ``StrataError/incompatibleStore(store:reason:)`` for another LMDB data version, a
    ///   location that is a file or cannot be created, or a missing read-only store;
    ///   ``StrataError/storage(_:)`` for an LMDB failure.
    init(
        directory: URL, model: ManagedObjectModel, readOnly: Bool = false,
        configuration: Environment.Configuration = .init(), verifyingPages: Bool = false,
        migration: MigrationSettings = MigrationSettings()
    ) throws(StrataError) {
        let path = directory.path
        var configuration = configuration
        if readOnly {
            configuration.readOnly = true
            configuration.createIfMissing = false
        }
        // Room for a migration's old and new databases at once.
        configuration.maxDatabases = max(configuration.maxDatabases, 2 * Self.databaseCount(for: model) + 64)
        let environment: Environment
        do {
            environment = try StoreFile.storage { try Environment(path: path, configuration: configuration) }
        } catch {
            switch error.storageError {
            case let failure? where [.versionMismatch, .notADirectory, .noSuchFile, .permissionDenied].contains(failure):
                // A location that is a file, cannot be made or is missing (read-only): as
                // PersistentContainer reports it.
                throw .incompatibleStore(store: path, reason: failure.message)
            case let failure? where failure == .alreadyOpen:
                guard let terminal = Environment.terminalErrorOfOpenEnvironment(atPath: path) else { throw error }
                throw .storage(LMDBError(code: failure.code, message: Self.stillOpenAfterTerminal(path: path, terminal: terminal)))
            default:
                throw Self.damage(error, at: path)
            }
        }
        // An open environment means no staged migration of this store is running (it holds
        // the lock the open waits for): what one left behind is an interrupted one's.
        if !configuration.readOnly { StagedMigration.removeLeftovers(in: directory) }
        // From here on, damage LMDB meets while opening the databases is a corrupt store too.
        do {
            if verifyingPages { try StoreFile.storage { try environment.verifyPages() } }
            (metadata, metadataDatabase, historyDatabase, entities, self.migration) = try Self.open(
                environment, model: model, readOnly: configuration.readOnly, path: path, migration: migration)
        } catch {
            throw Self.damage(error, at: path)
        }
        self.path = path
        self.model = model
        self.environment = environment
        self.isReadOnly = configuration.readOnly
        let names = metadata.schema.entityNames
        var byNumber = [EntityStorage?](repeating: nil, count: Int(names.keys.max() ?? 0) + 1)
        for (number, name) in names { byNumber[Int(number)] = entities[name] }
        entitiesByNumber = byNumber
        hasUniquenessConstraints = entities.values.contains { !$0.constraints.isEmpty }
    }

    /// What to do when the store at `path` cannot be opened again because its previous
    /// environment, terminal after `terminal`, is still open.
    static func stillOpenAfterTerminal(path: String, terminal: LMDBError) -> String {
        "\(path) is still open in this process in a terminal state (LMDBError.\(terminal.name)); it can be added again once "
            + "it closes: remove its PersistentStore from its coordinator (remove(_:)) and let go of every reference to "
            + "that store, contexts pinned to its query generations included; the store closes with the last one "
            + "(see PersistentStore.terminalError)"
    }

    /// `error`, or ``StrataError/corruptStore(store:reason:)`` for the LMDB errors of a
    /// damaged file met while opening it.
    private static func damage(_ error: StrataError, at path: String) -> StrataError {
        guard let lmdb = error.storageError, [.corrupted, .invalid, .pageNotFound].contains(lmdb) else { return error }
        return .corruptStore(store: path, reason: lmdb.message)
    }

    /// Reads (or, new, writes) the metadata of the store in `environment` and opens its databases.
    private static func open(
        _ environment: Environment, model: ManagedObjectModel, readOnly: Bool, path: String, migration: MigrationSettings
    ) throws(StrataError) -> (StoreMetadata, Database, Database, [String: EntityStorage], (from: String, to: String, stages: [String])?) {
        var metadata: StoreMetadata
        var migrated: (from: String, to: String, stages: [String])?
        if var existing = try StoreFile.existingMetadata(in: environment, path: path) {
            if existing.modelVersionHash != model.versionHash && migration.migratesAutomatically && !readOnly {
                // Planned in full before anything is written, then one write transaction.
                let migrator = try StoreMigration(existing: existing, model: model, settings: migration, path: path)
                try migrator.run(in: environment, storeIdentifier: existing.identifier)
                existing = migrator.metadata(after: existing)
                migrated = (migrator.fromVersion, migrator.toVersion, migrator.names)
            } else if existing.modelVersionHash == model.versionHash && !readOnly {
                // The same stored structure: what the hash leaves out may still differ.
                if existing.storedModel == nil {
                    existing.storedModel = StoredModel(model)   // a store written before stores recorded their model
                    try StoreFile.storage {
                        let database = try environment.openDatabase(named: StoreLayout.metadataDatabase)
                        try environment.write { txn in
                            try txn.put(StoredModel(model).encoded(), forKey: Array(StoreMetadata.Key.modelDescription.utf8), in: database)
                        }
                    }
                } else if migration.migratesAutomatically,
                          let refresh = try StoreMigration.refreshing(existing: existing, model: model, settings: migration, path: path) {
                    try refresh.run(in: environment, storeIdentifier: existing.identifier)
                    existing = refresh.metadata(after: existing)
                }
            }
            // Check before creating anything: a mismatched store is left byte for byte as it was.
            guard existing.modelVersionHash == model.versionHash else {
                // What differs, when the store recorded its model: the plan a migration will follow.
                var changes: [String] = []
                if let stored = existing.storedModel {
                    let diff = SchemaDiff(from: stored, to: model)
                    changes = diff.changes.map(\.description) + diff.problems.map { "needs a custom stage: " + $0 }
                }
                throw .modelMismatch(store: path, storeHash: existing.modelVersionHash, modelHash: model.versionHash, changes: changes)
            }
            if let problem = existing.schema.problem(storing: model) {
                throw .incompatibleStore(store: path, reason: "its metadata is damaged: \(problem)")
            }
            metadata = existing
        } else {
            guard !readOnly else {
                throw .incompatibleStore(store: path, reason: "it holds no Strata store, and opening read-only creates none")
            }
            metadata = StoreMetadata(
                identifier: UUID(), formatVersion: StoreLayout.formatVersion, modelVersionHash: model.versionHash,
                createdAt: Date(), schema: StoreSchema(assigningNumbersFor: model), storedModel: StoredModel(model))
            if let problem = metadata.schema.problem(storing: model) {
                throw .incompatibleStore(store: path, reason: problem)
            }
            try StoreFile.storage {
                let database = try environment.openDatabase(named: StoreLayout.metadataDatabase, flags: .create)
                try environment.write { txn in
                    for (key, value) in metadata.entries {
                        try txn.put(value, forKey: Array(key.utf8), in: database, flags: .noOverwrite)
                    }
                }
            }
        }

        let opener = DatabaseOpener(environment: environment, path: path, readOnly: readOnly)
        let metadataDatabase = try opener.open(StoreLayout.metadataDatabase)
        let historyDatabase = try opener.open(StoreLayout.historyDatabase)
        var entities: [String: EntityStorage] = [:]
        for entity in model.entities {
            entities[entity.name] = try EntityStorage(entity, in: model, schema: metadata.schema, opener: opener)
        }
        return (metadata, metadataDatabase, historyDatabase, entities, migrated)
    }

    /// The number of databases a store of `model` uses.
    static func databaseCount(for model: ManagedObjectModel) -> Int {
        model.entities.filter { !$0.isAbstract }.reduce(2) { count, entity in
            count + 1 + entity.attributes.filter { $0.isIndexed && !$0.isTransient }.count
                + entity.relationships.filter(\.isToMany).count
        } + model.entities.reduce(0) { $0 + $1.declaredUniquenessConstraints.count }
    }

    /// The metadata of the store in `environment`, or nil when it holds no store yet.
    ///
    /// Reads only: opening the metadata database without creating it, and one read
    /// transaction.
    static func existingMetadata(in environment: Environment, path: String) throws(StrataError) -> StoreMetadata? {
        try storage {
            let database: Database?
            do {
                database = try environment.openDatabase(named: StoreLayout.metadataDatabase)
            } catch LMDBError.notFound {
                database = nil
            }
            let main = try environment.mainDatabase
            return try environment.read { txn -> StoreMetadata? in
                var others: [String] = []
                try txn.scan(main) { key, _ in
                    let name = String(decoding: key, as: UTF8.self)
                    if name != StoreLayout.metadataDatabase { others.append(name) }
                    return others.count < 3 ? .continue : .stop
                }
                guard let database, try txn.count(in: database) > 0 else {
                    // Created but never written (a crash between the two), or nothing at all.
                    guard others.isEmpty else {
                        throw StrataError.incompatibleStore(
                            store: path,
                            reason: "the LMDB environment holds other data (\(others.joined(separator: ", "))) but no Strata metadata")
                    }
                    return nil
                }
                do {
                    return try StoreMetadata.decode { key in try txn.value(forKey: Array(key.utf8), in: database) }
                } catch let error as MetadataDecodingError {
                    throw StrataError.incompatibleStore(
                        store: path, reason: error.isNewerFormat ? error.reason : "its metadata is damaged: \(error.reason)")
                }
            }
        }
    }

    /// Runs `body`, which throws only LMDB and Strata errors, turning an ``LMDBError``
    /// into ``StrataError/storage(_:)``.
    static func storage<R>(_ body: () throws -> R) throws(StrataError) -> R {
        do {
            return try body()
        } catch let error as StrataError {
            throw error
        } catch let error as LMDBError {
            throw .storage(error)
        } catch {
            // Unreachable for the bodies this is used with; keep the error visible anyway.
            throw .storage(LMDBError(code: LMDBError.invalidArgument.code, message: "\(error)"))
        }
    }

    /// Runs `body`, turning an ``LMDBError`` into ``StrataError/storage(_:)`` and letting
    /// every other error (a caller's own, a ``StoreWriteError``) through unchanged.
    static func translatingStorageErrors<R>(_ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let error as LMDBError {
            throw StrataError.storage(error)
        }
    }

    // MARK: Identifiers

    /// How `entityName` is stored.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``.
    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage {
        guard let storage = entities[entityName] else { throw .unknownEntity(entityName) }
        return storage
    }

    /// The entity storage and primary key of the row `id` names.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for a temporary ID, an ID
    ///   of another store or of an abstract entity; ``StrataError/unknownEntity(_:)``.
    func row(of id: ManagedObjectID) throws(StrataError) -> (storage: EntityStorage, key: PrimaryKey) {
        guard let key = id.primaryKey, let store = id.storeIdentifier else {
            throw .invalidObjectState(id, reason: "it has a temporary ID; the store needs a permanent one")
        }
        guard store == identifier else {
            throw .invalidObjectState(id, reason: "it belongs to store \(store), not to store \(identifier) at \(path)")
        }
        let storage = try entityStorage(named: id.entityName)
        guard storage.rows != nil else {
            throw .invalidObjectState(id, reason: "entity \(id.entityName) is abstract, so it has no rows")
        }
        return (storage, key)
    }

    /// The row reference `id` stands for; see ``row(of:)``.
    func reference(to id: ManagedObjectID) throws(StrataError) -> RowReference {
        let (storage, key) = try row(of: id)
        return RowReference(entityNumber: storage.number, primaryKey: key)
    }

    /// The storage of the entity a reference names, or nil when the number is unknown.
    func entityStorage(numbered number: UInt16) -> EntityStorage? {
        Int(number) < entitiesByNumber.count ? entitiesByNumber[Int(number)] : nil
    }

    /// The permanent ID of row `key` of `entityName`.
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID {
        ManagedObjectID(store: identifier, entityName: entityName, primaryKey: key)
    }
}

/// Opens (or, writable, creates) the databases of a store.
struct DatabaseOpener {
    /// The store's environment.
    let environment: Environment
    /// The store directory, for errors.
    let path: String
    /// Whether to open only (a read-only store), never create.
    let readOnly: Bool

    /// Opens database `name`.
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` when a read-only store
    ///   lacks it, ``StrataError/storage(_:)``.
    func open(_ name: String) throws(StrataError) -> Database {
        do {
            return try StoreFile.storage { try environment.openDatabase(named: name, flags: readOnly ? [] : .create) }
        } catch StrataError.storage(.notFound) where readOnly {
            throw .incompatibleStore(store: path, reason: "database \(name) is missing; open the store writable once to create it")
        }
    }
}
