import Foundation
import StrataLMDB

/// What a store's options say about migrating it (``PersistentStore/Options``); the
/// default value (``init()``) migrates nothing.
struct MigrationSettings: Sendable {
    /// ``PersistentStore/Options/shouldMigrateStoreAutomatically``.
    var migratesAutomatically = false
    /// ``PersistentStore/Options/shouldInferMappingModelAutomatically``.
    var infersStages = true
    /// ``PersistentStore/Options/migrationPlan``.
    var plan: MigrationPlan?
    /// ``PersistentStore/Options/migrationProgress``.
    var progress: MigrationProgressHandler?

    init(_ options: PersistentStore.Options) {
        migratesAutomatically = options.shouldMigrateStoreAutomatically
        infersStages = options.shouldInferMappingModelAutomatically
        plan = options.migrationPlan
        progress = options.migrationProgress
    }

    /// Settings that migrate nothing: a store of another model is refused.
    init() {}

    /// Settings that migrate, inferring stages unless a plan is given.
    init(plan: MigrationPlan? = nil, infersStages: Bool = true, progress: MigrationProgressHandler? = nil) {
        migratesAutomatically = true
        self.infersStages = infersStages
        self.plan = plan
        self.progress = progress
    }
}

/// The stages that take a store from the model version it holds to the one it is opened
/// with, resolved from the options and the store's metadata and planned before anything
/// is written; ``run(in:)`` then runs them all in one LMDB write transaction.
struct StoreMigration {
    /// The stages, in order.
    let steps: [MigrationStep]
    /// The stages' names (`lightweight version 1 → version 2`), in order.
    let names: [String]
    /// The version the store holds, and the one it migrates to, as messages name them.
    let fromVersion: String, toVersion: String
    /// The store directory, for errors and progress.
    let path: String
    /// Where progress goes.
    let progress: MigrationProgressHandler?

    /// Resolves and plans the migration of a store holding `existing` to `model`.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` when the plan has
    ///   a gap or does not end at `model`, when no stage begins at the store's version
    ///   (an unknown version, or inference turned off), or when a change needs a custom
    ///   stage: every such change of every stage, at once.
    ///
    /// With `planningCustomStages` (a preview), a custom stage is planned as its inferred
    /// part (``MigrationStep/customPart(from:schema:to:)``); otherwise it is refused: custom
    /// stages run through contexts, in ``StagedMigration``.
    init(
        existing: StoreMetadata, model: ManagedObjectModel, settings: MigrationSettings, path: String,
        planningCustomStages: Bool = false
    ) throws(StrataError) {
        self.path = path
        progress = settings.progress
        fromVersion = existing.storedModel?.versionIdentifier.map { "version \($0)" } ?? "version hash \(existing.modelVersionHash)"
        toVersion = MigrationPlan.name(model)
        var chain: [(source: StoredModel, target: ManagedObjectModel, name: String, isCustom: Bool)] = []
        if let plan = settings.plan {
            if let problem = plan.problem { throw .migrationFailed(store: path, reason: problem) }
            if let last = plan.stages.last, last.destination.versionHash != model.versionHash {
                throw .migrationFailed(
                    store: path,
                    reason: "the migration plan ends at \(MigrationPlan.name(last.destination)), not at the model the store is "
                        + "opened with (\(MigrationPlan.name(model)))")
            }
            if let start = plan.stages.firstIndex(where: { $0.source.versionHash == existing.modelVersionHash }) {
                var source = existing.storedModel ?? StoredModel(plan.stages[start].source)
                for (index, stage) in plan.stages.enumerated().dropFirst(start) {
                    if stage.isCustom && !planningCustomStages {
                        throw .migrationFailed(
                            store: path,
                            reason: "stage \(index + 1) (\(stage)) is custom: its code runs through contexts, so add the store with "
                                + "the asynchronous addPersistentStore(type:configuration:at:options:) or a PersistentContainer")
                    }
                    chain.append((source, stage.destination, stage.description, stage.isCustom))
                    source = StoredModel(stage.destination)
                }
            }
        }
        if chain.isEmpty {
            guard let stored = existing.storedModel else {
                throw .migrationFailed(
                    store: path,
                    reason: "the store holds model version hash \(existing.modelVersionHash), which "
                        + (settings.plan == nil ? "no migration plan lists" : "the migration plan does not list")
                        + ", and it was written before stores recorded their model: declare a MigrationPlan whose first "
                        + "stage begins at the model it was written with")
            }
            guard settings.infersStages else {
                throw .migrationFailed(
                    store: path,
                    reason: "no stage of "
                        + (settings.plan == nil ? "a migration plan (there is none)" : "the migration plan")
                        + " begins at the store's \(stored.versionIdentifier.map { "version \($0)" } ?? "version hash \(stored.versionHash)"), "
                        + "and inferring stages is turned off (shouldInferMappingModelAutomatically)")
            }
            let from = stored.versionIdentifier.map { "version \($0)" } ?? "version hash \(stored.versionHash)"
            chain = [(stored, model, "inferred lightweight \(from) → \(MigrationPlan.name(model))", false)]
        }

        var steps: [MigrationStep] = []
        var problems: [String] = []
        var schema = existing.schema
        for (number, link) in chain.enumerated() {
            let step: MigrationStep
            do throws(MetadataDecodingError) {
                if link.isCustom {
                    let part = try MigrationStep.customPart(from: link.source, schema: schema, to: link.target)
                    step = part.step
                    problems += part.problems.map { "stage \(number + 1) (\(link.name)) cannot do this: \($0)" }
                } else {
                    step = try MigrationStep(from: link.source, schema: schema, to: link.target)
                    problems += step.allProblems.map { "stage \(number + 1) (\(link.name)) needs a custom stage: \($0)" }
                }
            } catch {
                throw .migrationFailed(store: path, reason: "stage \(number + 1) (\(link.name)) cannot read the model it begins at: \(error.reason)")
            }
            schema = step.targetSchema
            steps.append(step)
        }
        if !problems.isEmpty { throw .migrationFailed(store: path, reason: problems.joined(separator: "; ")) }
        self.steps = steps
        names = chain.map(\.name)
    }

    /// A migration of `steps` planned elsewhere (a custom stage's inferred part), named
    /// `names` in messages.
    init(steps: [MigrationStep], names: [String], path: String, progress: MigrationProgressHandler?) {
        self.steps = steps
        self.names = names
        self.path = path
        self.progress = progress
        fromVersion = steps.first.map { step in step.source.versionIdentifier.map { "version \($0)" } ?? "version hash \(step.source.versionHash)" } ?? ""
        toVersion = steps.last.map { MigrationPlan.name($0.target) } ?? ""
    }

    /// The migration of a store whose model has the same version hash as `model` but
    /// differs in what the hash leaves out (optionality, defaults, renaming and version
    /// identifiers, delete rules): one inferred stage, which rewrites rows only where an
    /// attribute became required (nils take the default) and records the new description.
    /// Nil when the store's recorded model is `model`'s, or it recorded none (then
    /// ``StoreFile`` records it).
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)`` when an attribute
    ///   became required without a default.
    static func refreshing(
        existing: StoreMetadata, model: ManagedObjectModel, settings: MigrationSettings, path: String
    ) throws(StrataError) -> StoreMigration? {
        guard let stored = existing.storedModel, stored != StoredModel(model) else { return nil }
        let step: MigrationStep
        do throws(MetadataDecodingError) {
            step = try MigrationStep(from: stored, schema: existing.schema, to: model)
        } catch {
            throw .migrationFailed(store: path, reason: "the model the store recorded cannot be read: \(error.reason)")
        }
        let name = "lightweight \(stored.versionIdentifier.map { "version \($0)" } ?? "(unnamed version)") → \(MigrationPlan.name(model)) "
            + "(same version hash)"
        if !step.allProblems.isEmpty {
            throw .migrationFailed(store: path, reason: step.allProblems.map { "\(name) needs a custom stage: \($0)" }.joined(separator: "; "))
        }
        return StoreMigration(steps: [step], names: [name], path: path, progress: settings.progress)
    }

    /// What the migration will do to a store whose entities hold `rowCounts` rows.
    func preview(rowCounts: [String: Int]) -> MigrationPreview {
        var counts = rowCounts
        var stages: [MigrationPreview.Stage] = []
        for (step, name) in zip(steps, names) {
            stages.append(step.preview(name: name, rowCounts: counts))
            counts = step.rowCounts(after: counts)
        }
        return MigrationPreview(store: path, fromVersion: fromVersion, toVersion: toVersion, stages: stages)
    }

    /// The store's metadata after the migration.
    func metadata(after existing: StoreMetadata) -> StoreMetadata {
        var metadata = existing
        if let last = steps.last {
            metadata.modelVersionHash = last.target.versionHash
            metadata.schema = last.targetSchema
            metadata.storedModel = StoredModel(last.target)
        }
        return metadata
    }

    /// Runs every stage in one write transaction of `environment`: the store is migrated
    /// or, whatever fails (a value, a constraint, a full disk, a kill), left as it was.
    ///
    /// - Throws: ``StrataError/migrationFailed(store:reason:conflicts:)``.
    func run(in environment: Environment, storeIdentifier: UUID) throws(StrataError) {
        defer { progress?.finish() }
        var completed = 0
        do {
            try environment.write { txn in
                for (index, step) in steps.enumerated() {
                    CrashPoint.migrationStage.reach()
                    let total = try step.rowsToRead(in: txn)
                    var counter = MigrationCounter(rowsTotal: total) { entity, done in
                        CrashPoint.midMigration.reach()
                        progress?.report(MigrationProgress(
                            store: path, stage: index + 1, stageCount: steps.count, entityName: entity, completedRows: done,
                            totalRows: total, isFinished: false))
                    }
                    try step.run(in: txn, storeIdentifier: storeIdentifier, counter: &counter)
                    completed = counter.rowsDone
                }
                CrashPoint.beforeMigrationCommit.reach()
            }
        } catch let failure as MigrationFailure {
            throw .migrationFailed(store: path, reason: failure.reason, conflicts: failure.conflicts)
        } catch let error as LMDBError {
            throw .migrationFailed(store: path, reason: "writing the migration failed (\(error))")
        } catch let error as StrataError {
            throw error
        } catch {
            throw .migrationFailed(store: path, reason: "\(error)")
        }
        CrashPoint.afterMigrationCommit.reach()
        progress?.report(MigrationProgress(
            store: path, stage: steps.count, stageCount: steps.count, entityName: nil, completedRows: completed, totalRows: completed,
            isFinished: true))
    }
}
