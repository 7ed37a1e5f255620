import Foundation

/// The versions of a model an app has shipped, oldest first, and the stage that takes a
/// store from each version to the next (Core Data's staged migration, SwiftData's
/// `SchemaMigrationPlan`).
///
/// Give it to a store with ``PersistentStore/Options/migrationPlan`` (or
/// ``PersistentStoreDescription/migrationPlan``). When a store holds any version of the
/// plan but the last, opening it runs every stage from that version on, and the store
/// ends at the plan's last version, which must be the model the store is opened with:
///
/// ```swift
/// let plan = MigrationPlan(stages: [
///     .lightweight(from: modelV1, to: modelV2),
///     .lightweight(from: modelV2, to: modelV3),
/// ])
/// var options = PersistentStore.Options()
/// options.migrationPlan = plan
/// try coordinator.addPersistentStore(at: url, options: options)   // coordinator of modelV3
/// ```
///
/// Lightweight stages need no plan: with ``PersistentStore/Options/shouldInferMappingModelAutomatically``
/// a store is migrated from the model it recorded when it was written. A plan is for the
/// stages that need one, and for stores written before stores recorded their model. See
/// <doc:MigratingYourData>.
///
/// Two plans are equal when their stages are: the same versions (by version hash), in the
/// same order.
public struct MigrationPlan: Sendable, Hashable {
    /// The stages, in order: each begins at the version the one before it ends at.
    public let stages: [MigrationStage]

    /// A plan of `stages`, in order.
    ///
    /// A plan whose stages do not follow on (a stage that does not begin where the one
    /// before it ended: a gap) is refused when a store is opened with it, with
    /// ``StrataError/migrationFailed(store:reason:conflicts:)``, before anything is read.
    public init(stages: [MigrationStage]) {
        self.stages = stages
    }

    /// A plan of lightweight stages between consecutive `models`, oldest first.
    public init(models: [ManagedObjectModel]) {
        stages = zip(models, models.dropFirst()).map { MigrationStage.lightweight(from: $0, to: $1) }
    }

    /// The model versions the plan knows, oldest first: where the first stage begins, then
    /// where each stage ends.
    public var models: [ManagedObjectModel] {
        guard let first = stages.first else { return [] }
        return [first.source] + stages.map(\.destination)
    }

    /// Why the plan cannot be followed (a gap, an empty plan, a stage that changes
    /// nothing), or nil.
    var problem: String? {
        guard !stages.isEmpty else { return "the migration plan has no stages" }
        for (index, stage) in stages.enumerated() {
            if stage.source.versionHash == stage.destination.versionHash {
                return "stage \(index + 1) (\(stage)) begins and ends at the same model version"
            }
            if index > 0, stages[index - 1].destination.versionHash != stage.source.versionHash {
                return "the migration plan has a gap: stage \(index) ends at \(Self.name(stages[index - 1].destination)) "
                    + "but stage \(index + 1) begins at \(Self.name(stage.source))"
            }
        }
        return nil
    }

    /// A model version as messages name it: `version 3`, or `version hash …` for a model
    /// without a version identifier.
    package static func describe(_ model: ManagedObjectModel) -> String { name(model) }

    /// A model version as messages name it: its identifier, else its hash.
    static func name(_ model: ManagedObjectModel) -> String {
        model.versionIdentifier.map { "version \($0)" } ?? "version hash \(model.versionHash)"
    }
}

/// One stage of a ``MigrationPlan``: how a store moves from one model version to the next.
public enum MigrationStage: Sendable, Hashable, CustomStringConvertible {
    /// A stage Strata infers from the two models: attributes, relationships and entities
    /// added, removed or renamed (through a ``AttributeDescription/renamingIdentifier``),
    /// optional made required with a default, indexes and uniqueness constraints added or
    /// removed, numeric types widened or converted where every stored value converts
    /// exactly. Anything else is refused, all of it at once, before anything is written
    /// (see <doc:MigratingYourData>).
    case lightweight(from: ManagedObjectModel, to: ManagedObjectModel)

    /// A stage whose code moves the data, for what no lightweight stage can do: an entity
    /// split in two or two merged, a string parsed into a number, a new required value
    /// computed from others, duplicates removed before a uniqueness constraint.
    ///
    /// 1. `willMigrate`, when given, runs first with a context of `from` over the store as
    ///    it is: what it saves is kept (fix the data the inferred part would refuse).
    /// 2. Strata applies everything it can infer between the two models; what it cannot
    ///    (an attribute whose type does not convert, an entity that moved in the
    ///    hierarchy, a relationship to another entity) starts empty in `to`.
    /// 3. `didMigrate`, when given, runs with **both** versions at once
    ///    (``MigrationContexts``): `source`, a read-only context of `from` over the store
    ///    as it was before step 2, and `destination`, a context of `to` over the store
    ///    after it. Read the old objects, write the new ones, save `destination`.
    ///
    /// Afterwards every required attribute of `to` without a default must hold a value, or
    /// the stage fails. The whole migration runs on a copy of the store that replaces it
    /// atomically when every stage succeeded (a crash or an error leaves the store as it
    /// was); it needs the store to itself: no other process may have it open.
    case custom(
        from: ManagedObjectModel, to: ManagedObjectModel,
        willMigrate: (@Sendable (ManagedObjectContext) async throws -> Void)?,
        didMigrate: (@Sendable (MigrationContexts) async throws -> Void)?)

    /// The version the stage begins at.
    public var source: ManagedObjectModel {
        switch self {
        case .lightweight(let from, _), .custom(let from, _, _, _): from
        }
    }

    /// The version the stage ends at.
    public var destination: ManagedObjectModel {
        switch self {
        case .lightweight(_, let to), .custom(_, let to, _, _): to
        }
    }

    /// Whether the stage runs code of the app.
    public var isCustom: Bool {
        if case .custom = self { true } else { false }
    }

    /// `lightweight version 1 → version 2`, `custom version 2 → version 3`.
    public var description: String {
        "\(isCustom ? "custom" : "lightweight") \(MigrationPlan.name(source)) → \(MigrationPlan.name(destination))"
    }

    /// Stages are equal when they are of the same kind between the same versions (by
    /// hash); two custom stages between the same versions are equal whatever their code.
    public static func == (lhs: MigrationStage, rhs: MigrationStage) -> Bool {
        lhs.isCustom == rhs.isCustom && lhs.source.versionHash == rhs.source.versionHash
            && lhs.destination.versionHash == rhs.destination.versionHash
    }

    /// Hashes the kind and the versions.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(isCustom)
        hasher.combine(source.versionHash)
        hasher.combine(destination.versionHash)
    }
}

/// The two contexts a custom stage's `didMigrate` works with
/// (``MigrationStage/custom(from:to:willMigrate:didMigrate:)``): the store before the
/// stage and after its inferred part, at once.
public struct MigrationContexts: Sendable {
    /// A private-queue context of the stage's source model over the store as it was before
    /// the stage's inferred changes: read-only (a save touching it fails with
    /// ``StrataError/readOnlyStore(_:)``).
    public let source: ManagedObjectContext
    /// A private-queue context of the stage's destination model over the migrating store:
    /// what it saves is the stage's result.
    public let destination: ManagedObjectContext
}
