import Foundation
import StrataLMDB

/// A migration whose plan has custom stages: their code saves through contexts, so the
/// migration cannot be one LMDB transaction. It runs on a copy of the store in
/// `migration-in-progress/` inside the store directory and replaces the store's
/// `data.mdb` with the copy's in one `rename(2)` when every stage succeeded. A crash or
/// an error before the rename leaves the store as it was, and the copy is discarded by
/// the next open (``removeLeftovers(in:)``); after the rename the store is migrated.
///
/// The store must be closed everywhere while it runs: it holds the write lock LMDB's
/// processes take on `lock.mdb` (an `fcntl` lock on its first byte; every process with
/// the store open holds a read lock there), so another process that opens the store
/// meanwhile waits until the migration ends, and a migration that finds the store open
/// elsewhere fails with ``StrataError/migrationFailed(store:reason:conflicts:)``.
enum StagedMigration {
    /// The directory, inside the store's, where the copy is migrated.
    static let workDirectoryName = "migration-in-progress"

    /// Removes what an interrupted staged migration left in the store `directory`: its
    /// copy, never the store. Called by a store that opened its environment, so no
    /// migration of it can be running (it would hold the lock the open waited for).
    static func removeLeftovers(in directory: URL) {
        let work = directory.appendingPathComponent(workDirectoryName, isDirectory: true)
        if FileManager.default.fileExists(atPath: work.path) { try? FileManager.default.removeItem(at: work) }
    }

    /// Runs the custom stages (and the lightweight ones around them) of `options`'s plan
    /// from the version the store at `url` holds, when any is custom; does nothing for a
    /// store that needs none, a new store, or a plan of lightweight stages only (those run
    /// in one transaction when the store opens).
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` (the store left
    ///   as it was): another process has the store open, a stage's code threw, a required
    ///   attribute left without a value, an inferred part refused; the errors of opening
    ///   the store.
    /// - Returns: whether it migrated the store.
    @discardableResult
    static func runIfNeeded(at url: URL, model: ManagedObjectModel, options: PersistentStore.Options) async throws(StrataError) -> Bool {
        guard let plan = options.migrationPlan, plan.stages.contains(where: \.isCustom), options.shouldMigrateStoreAutomatically,
              !options.readOnly, FileManager.default.fileExists(atPath: url.appendingPathComponent("data.mdb").path)
        else { return false }
        let path = url.path
        let existing = try metadata(at: url, options: options)
        guard let existing, let (start, stages) = try stagesToRun(plan, from: existing.modelVersionHash, to: model, store: path) else { return false }

        defer { options.migrationProgress?.finish() }
        let lock = try exclusiveLock(of: url)
        defer { close(lock) }
        let work = url.appendingPathComponent(workDirectoryName, isDirectory: true)
        do {
            try? FileManager.default.removeItem(at: work)
            try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: url.appendingPathComponent("data.mdb"), to: work.appendingPathComponent("data.mdb"))
        } catch {
            try? FileManager.default.removeItem(at: work)
            throw .migrationFailed(store: path, reason: "the store cannot be copied to migrate it: \(error.localizedDescription)")
        }
        do {
            var index = 0
            while index < stages.count {
                CrashPoint.migrationStage.reach()
                if stages[index].isCustom {
                    try await runCustom(stages[index], number: start + index + 1, work: work, store: path, options: options)
                    index += 1
                } else {
                    var end = index
                    while end < stages.count && !stages[end].isCustom { end += 1 }
                    try runLightweight(Array(stages[index..<end]), work: work, store: path, options: options)
                    index = end
                }
            }
            try replace(url.appendingPathComponent("data.mdb"), with: work.appendingPathComponent("data.mdb"), store: path)
        } catch {
            try? FileManager.default.removeItem(at: work)
            throw error
        }
        CrashPoint.afterMigrationSwitch.reach()
        try? FileManager.default.removeItem(at: work)
        options.migrationProgress?.report(MigrationProgress(
            store: path, stage: stages.count, stageCount: stages.count, entityName: nil, completedRows: 0, totalRows: 0, isFinished: true))
        return true
    }

    /// The metadata of the store at `url`, read through an environment opened read-only
    /// and closed again before this returns (so that no lock of this process stays on
    /// its lock file); nil when it holds no store.
    private static func metadata(at url: URL, options: PersistentStore.Options) throws(StrataError) -> StoreMetadata? {
        var configuration = options.configuration
        configuration.readOnly = true
        configuration.createIfMissing = false
        let environment = try StoreFile.storage { try Environment(path: url.path, configuration: configuration) }
        return try withExtendedLifetime(environment) { () throws(StrataError) -> StoreMetadata? in
            try StoreFile.existingMetadata(in: environment, path: url.path)
        }
    }

    /// Takes the write lock on the first byte of the store's `lock.mdb`, which every
    /// process with the store open holds a read lock on: returns its descriptor (closing it
    /// releases the lock).
    private static func exclusiveLock(of url: URL) throws(StrataError) -> Int32 {
        let lockPath = url.appendingPathComponent("lock.mdb").path
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw .migrationFailed(store: url.path, reason: "its lock file cannot be opened: \(String(cString: strerror(errno)))")
        }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        guard fcntl(descriptor, F_SETLK, &lock) == 0 else {
            close(descriptor)
            throw .migrationFailed(
                store: url.path,
                reason: "another process has the store open: a migration with custom stages needs it to itself (close the store "
                    + "in every other process, then open it again)")
        }
        return descriptor
    }

    /// Runs lightweight `stages` on the copy at `work`, in one write transaction.
    private static func runLightweight(
        _ stages: [MigrationStage], work: URL, store: String, options: PersistentStore.Options
    ) throws(StrataError) {
        let environment = try openWork(work, options: options)
        guard let existing = try StoreFile.existingMetadata(in: environment, path: store) else {
            throw .migrationFailed(store: store, reason: "the copy being migrated holds no store")
        }
        var settings = MigrationSettings(plan: MigrationPlan(stages: stages), infersStages: false)
        settings.progress = options.migrationProgress.map { outer in MigrationProgressHandler { outer.report($0) } }
        let migration = try StoreMigration(existing: existing, model: stages[stages.count - 1].destination, settings: settings, path: store)
        try migration.run(in: environment, storeIdentifier: existing.identifier)
    }

    /// The copy's environment, writable.
    private static func openWork(_ work: URL, options: PersistentStore.Options) throws(StrataError) -> Environment {
        var configuration = options.configuration
        configuration.readOnly = false
        configuration.durability = .noSync   // the copy is flushed once, before it replaces the store
        configuration.maxDatabases = max(configuration.maxDatabases, 512)
        return try StoreFile.storage { try Environment(path: work.path, configuration: configuration) }
    }

    /// Runs custom `stage` (number `number` of the plan) on the copy at `work`.
    private static func runCustom(
        _ stage: MigrationStage, number: Int, work: URL, store: String, options: PersistentStore.Options
    ) async throws(StrataError) {
        guard case .custom(let from, let to, let willMigrate, let didMigrate) = stage else { return }
        let name = "stage \(number) (\(stage))"
        var storeOptions = PersistentStore.Options()
        storeOptions.shouldMigrateStoreAutomatically = false
        storeOptions.durability = .noSync
        storeOptions.mapSize = options.mapSize
        storeOptions.maximumMapSize = options.maximumMapSize

        // 1. willMigrate, on the store as it is.
        if let willMigrate {
            try await withStore(at: work, model: from, options: storeOptions, store: store, stage: name) { coordinator in
                try await willMigrate(ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "willMigrate"))
            }
        }
        // 2. A copy of the store before the inferred part: the source of didMigrate.
        let before = work.appendingPathComponent("source", isDirectory: true)
        do {
            try? FileManager.default.removeItem(at: before)
            try FileManager.default.createDirectory(at: before, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: work.appendingPathComponent("data.mdb"), to: before.appendingPathComponent("data.mdb"))
        } catch {
            throw .migrationFailed(store: store, reason: "\(name): the store before the stage cannot be kept: \(error.localizedDescription)")
        }
        defer { try? FileManager.default.removeItem(at: before) }
        // 3. The inferred part, in one transaction.
        let fills: [(entity: String, attribute: String)]
        do {
            let environment = try openWork(work, options: options)
            guard let existing = try StoreFile.existingMetadata(in: environment, path: store) else {
                throw StrataError.migrationFailed(store: store, reason: "the copy being migrated holds no store")
            }
            let part: (step: MigrationStep, fills: [(entity: String, attribute: String)], problems: [String])
            do throws(MetadataDecodingError) {
                part = try MigrationStep.customPart(from: existing.storedModel ?? StoredModel(from), schema: existing.schema, to: to)
            } catch {
                throw StrataError.migrationFailed(store: store, reason: "\(name) cannot read the model it begins at: \(error.reason)")
            }
            if !part.problems.isEmpty {
                throw StrataError.migrationFailed(store: store, reason: part.problems.map { "\(name) cannot do this: \($0)" }.joined(separator: "; "))
            }
            let migration = StoreMigration(
                steps: [part.step], names: [name], path: store,
                progress: options.migrationProgress.map { outer in MigrationProgressHandler { outer.report($0) } })
            try migration.run(in: environment, storeIdentifier: existing.identifier)
            fills = part.fills
        } catch let error as StrataError {
            throw error
        } catch {
            throw .migrationFailed(store: store, reason: "\(name): \(error)")
        }
        // 4. didMigrate, with both versions; then every required value must be there.
        var readOnly = storeOptions
        readOnly.readOnly = true
        try await withStore(at: before, model: from, options: readOnly, store: store, stage: name) { source in
            try await withStore(at: work, model: to, options: storeOptions, store: store, stage: name) { destination in
                let contexts = MigrationContexts(
                    source: ManagedObjectContext(.privateQueue, coordinator: source, name: "migration source"),
                    destination: ManagedObjectContext(.privateQueue, coordinator: destination, name: "migration destination"))
                if let didMigrate { try await didMigrate(contexts) }
                try await checkFilled(fills, of: to, in: destination, store: store, stage: name)
            }
        }
    }

    /// The stages of `plan` a staged migration runs for a store holding the model of
    /// `storeHash` to reach `model`: from the stage that begins there, when one of them is
    /// custom; nil when the store holds `model` already, or only lightweight stages are
    /// left (they run in one transaction when the store opens). Shared by the LMDB and the
    /// server staged migrations.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` for a plan with a
    ///   gap, or one that does not end at `model`.
    static func stagesToRun(
        _ plan: MigrationPlan, from storeHash: String, to model: ManagedObjectModel, store: String
    ) throws(StrataError) -> (start: Int, stages: [MigrationStage])? {
        guard storeHash != model.versionHash else { return nil }
        if let problem = plan.problem { throw .migrationFailed(store: store, reason: problem) }
        guard let start = plan.stages.firstIndex(where: { $0.source.versionHash == storeHash }),
              plan.stages[start...].contains(where: \.isCustom)
        else { return nil }   // lightweight from here: one transaction at open
        let stages = Array(plan.stages[start...])
        if let last = stages.last, last.destination.versionHash != model.versionHash {
            throw .migrationFailed(
                store: store,
                reason: "the migration plan ends at \(MigrationPlan.name(last.destination)), not at the model the store is opened with "
                    + "(\(MigrationPlan.name(model)))")
        }
        return (start, stages)
    }

    /// Checks, after a custom stage's code ran, that every object of `model` (the stage's
    /// destination) holds a value for each required attribute in `fills` (those the stage's
    /// inferred part could not fill), through a context of `destination`.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` counting the objects
    ///   left without one.
    static func checkFilled(
        _ fills: [(entity: String, attribute: String)], of model: ManagedObjectModel, in destination: PersistentStoreCoordinator,
        store: String, stage name: String
    ) async throws {
        let missing = try await ManagedObjectContext(.privateQueue, coordinator: destination, name: "migration check").perform { context in
            var missing: [String] = []
            for fill in fills where model.entitiesByName[fill.entity]?.isAbstract == false {
                var request = FetchRequest<ManagedObject>(entityName: fill.entity)
                request.predicate = try FetchPredicate(format: "%K == nil", fill.attribute)
                request.includesSubentities = false
                let count = try context.count(for: request)
                if count > 0 { missing.append("\(count) \(fill.entity) object(s) hold no \(fill.attribute)") }
            }
            return missing
        }
        if !missing.isEmpty {
            throw StrataError.migrationFailed(store: store, reason: "\(name) left required attributes without a value: " + missing.joined(separator: "; "))
        }
    }

    /// Opens the store at `url` with `model` on a coordinator of its own, runs `body`, and
    /// removes the store again; an error of `body` that is not a ``StrataError`` becomes
    /// ``StrataError/migrationFailed(store:reason:conflicts:)`` naming the stage.
    private static func withStore(
        at url: URL, model: ManagedObjectModel, options: PersistentStore.Options, store: String, stage: String,
        _ body: (PersistentStoreCoordinator) async throws -> Void
    ) async throws(StrataError) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let added: PersistentStore
        do {
            added = try await coordinator.addPersistentStore(at: url, options: options)
        } catch {
            throw .migrationFailed(store: store, reason: "\(stage): the store cannot be opened for the stage: \(error)")
        }
        do {
            try await body(coordinator)
        } catch let error as StrataError where error.code == .migrationFailed {
            try? await coordinator.remove(added)
            throw error
        } catch {
            try? await coordinator.remove(added)
            throw .migrationFailed(store: store, reason: "\(stage) threw: \(error)")
        }
        try? await coordinator.remove(added)
    }

    /// Flushes `copy` and renames it over `original`: the switch, atomic.
    private static func replace(_ original: URL, with copy: URL, store: String) throws(StrataError) {
        for path in [copy.path] {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0, fsync(descriptor) == 0 else {
                if descriptor >= 0 { close(descriptor) }
                throw .migrationFailed(store: store, reason: "the migrated copy cannot be flushed: \(String(cString: strerror(errno)))")
            }
            close(descriptor)
        }
        CrashPoint.beforeMigrationSwitch.reach()
        guard rename(copy.path, original.path) == 0 else {
            throw .migrationFailed(store: store, reason: "the migrated copy cannot replace the store: \(String(cString: strerror(errno)))")
        }
        let directory = open(original.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }
}
