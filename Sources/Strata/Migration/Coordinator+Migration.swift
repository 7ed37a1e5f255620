import Foundation
import StrataLMDB

extension PersistentStoreCoordinator {
    /// What opening the store at `url` with this coordinator's model and `options` would do
    /// to migrate it, worked out without writing anything: the stages, the changes of
    /// each, the rows rewritten, the indexes and links built, the databases dropped
    /// (`strata migrate PATH --dry-run` prints it). A store of this model gives a preview
    /// with no stages.
    ///
    /// The store is opened read-only for the preview, so it must not be open in this
    /// process (LMDB allows one environment per store per process). The preview plans
    /// whatever ``PersistentStore/Options/shouldMigrateStoreAutomatically`` says.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` for what the
    ///   migration itself would refuse before writing (a bad plan, an unknown version, a
    ///   change that needs a custom stage: every one); ``StrataError/incompatibleStore(store:reason:)``
    ///   when there is no store at `url`; ``StrataError/storage(_:)``.
    public nonisolated func migrationPreview(
        forStoreAt url: URL, options: PersistentStore.Options = .init()
    ) throws(StrataError) -> MigrationPreview {
        let path = url.path
        var configuration = options.configuration
        configuration.readOnly = true
        configuration.createIfMissing = false
        configuration.maxDatabases = max(configuration.maxDatabases, 2 * StoreFile.databaseCount(for: managedObjectModel) + 64)
        let environment: Environment
        do {
            environment = try StoreFile.storage { try Environment(path: path, configuration: configuration) }
        } catch let error where error.storageError.map({ [.noSuchFile, .notADirectory].contains($0) }) ?? false {
            throw .incompatibleStore(store: path, reason: "there is no store there")
        }
        guard let existing = try StoreFile.existingMetadata(in: environment, path: path) else {
            throw .incompatibleStore(store: path, reason: "it holds no Strata store")
        }
        let model = managedObjectModel
        var settings = MigrationSettings(options)
        settings.migratesAutomatically = true
        settings.progress = nil
        let migration: StoreMigration
        if existing.modelVersionHash != model.versionHash {
            migration = try StoreMigration(existing: existing, model: model, settings: settings, path: path, planningCustomStages: true)
        } else if let refresh = try StoreMigration.refreshing(existing: existing, model: model, settings: settings, path: path) {
            migration = refresh
        } else {
            return MigrationPreview(store: path, fromVersion: MigrationPlan.name(model), toVersion: MigrationPlan.name(model), stages: [])
        }
        let counts = try StoreFile.storage { () throws -> [String: Int] in
            // Databases opened first: a handle opened after a read transaction began is not valid in it.
            var databases: [String: Database] = [:]
            for name in existing.schema.entities.keys {
                do {
                    databases[name] = try environment.openDatabase(named: StoreLayout.rowsDatabase(entity: name))
                } catch LMDBError.notFound {
                    continue   // an abstract entity: no rows
                }
            }
            return try environment.read { txn in try databases.mapValues { try txn.statistics(of: $0).entries } }
        }
        return migration.preview(rowCounts: counts)
    }
}

extension PersistentStoreCoordinator {
    /// What adding the server store of `type` (`.postgres(configuration)`, from StrataPostgres)
    /// with this coordinator's model and `options` would do to migrate it: the stages and
    /// their changes, as for an LMDB store, and the SQL statements each stage runs
    /// (``MigrationPreview/Stage/statements``, with their bound values). A store of this
    /// model gives a preview with no stages.
    ///
    /// The preview runs the migration in a transaction it rolls back: it writes nothing,
    /// and what the migration would refuse (a value that does not convert, stored objects
    /// breaking a new constraint) is found now, as the same error. It takes the locks the
    /// migration takes, for as long as the migration would run; other instances' writes
    /// to the tables it alters wait meanwhile. It runs on the calling thread.
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` for an LMDB store type
    ///   (preview it by its directory, ``migrationPreview(forStoreAt:options:)``) or a
    ///   schema that holds no store; ``StrataError/migrationFailed(store:reason:conflicts:)``;
    ///   ``StrataError/unsupportedByStore(store:feature:)`` for a plan with custom stages;
    ///   ``StrataError/unknownConfiguration(_:)``; ``StrataError/database(store:failure:)``.
    public nonisolated func migrationPreview(
        ofType type: PersistentStore.StoreType, configuration: String? = nil, options: PersistentStore.Options = .init()
    ) throws(StrataError) -> MigrationPreview {
        guard let opener = type.server else {
            throw .incompatibleStore(
                store: type.rawValue, reason: "an LMDB store is previewed by its directory: migrationPreview(forStoreAt:options:)")
        }
        let entityNames = try managedObjectModel.entityNames(inConfiguration: configuration)
        let driver = try opener.makeDriver(logger: logger, settings: [(SQLLayout.guardSetting, managedObjectModel.versionHash)])
        defer { driver.close() }
        return try SQLStore.migrationPreview(driver: driver, model: managedObjectModel, options: MigrationSettings(options), entityNames: entityNames)
    }
}

extension ManagedObjectModel {
    /// The model as a store records it (JSON): entities, stored attributes with their
    /// types, optionality, defaults and indexes, relationships, uniqueness constraints,
    /// renaming identifiers and the version identifier. Transient attributes and
    /// validation rules are left out; a transformable attribute keeps its type's name.
    ///
    /// `strata migrate PATH --model FILE` reads models in this form, so that a store can
    /// be migrated (or its migration previewed) outside the app. Equal models give equal
    /// bytes.
    public var jsonRepresentation: Data { Data(StoredModel(self).encoded()) }

    /// The model `jsonRepresentation` describes (a transformable attribute becomes binary
    /// data, its stored bytes).
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` naming `source` when the
    ///   bytes are not a model description or describe an invalid model.
    package static func decoding(jsonRepresentation data: Data, source: String) throws(StrataError) -> ManagedObjectModel {
        do throws(MetadataDecodingError) {
            return try StoredModel(decoding: Array(data)).makeModel()
        } catch {
            throw .incompatibleStore(store: source, reason: "it is not a model description: \(error.reason)")
        }
    }
}
