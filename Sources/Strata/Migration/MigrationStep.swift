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
