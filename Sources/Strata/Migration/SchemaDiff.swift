import Foundation

/// One change between the model a store holds (``StoredModel``) and the model it is
/// opened with: what a lightweight (inferred) migration does, entity by entity.
enum SchemaChange: Sendable, Hashable, CustomStringConvertible {
    /// A new entity: no rows to rewrite.
    case addEntity(String)
    /// An entity gone: its rows, indexes and links are dropped.
    case removeEntity(String)
    /// An entity renamed (the new one's renaming identifier names the old one).
    case renameEntity(from: String, to: String)
    /// A new stored attribute: existing rows take its default (or nil).
    case addAttribute(entity: String, attribute: String)
    /// A stored attribute gone: its values are dropped from every row.
    case removeAttribute(entity: String, attribute: String)
    /// A stored attribute renamed: its values carried over.
    case renameAttribute(entity: String, from: String, to: String)
    /// A stored attribute's type changed to one every value converts to exactly
    /// (`widening`: integer16 → integer32 → integer64 → double, always exact; otherwise
    /// each value is checked when the rows are rewritten, and one that does not convert
    /// fails the migration, naming the row).
    case changeType(entity: String, attribute: String, from: String, to: String, widening: Bool)
    /// An optional attribute made required: rows holding nil take the default.
    case makeRequired(entity: String, attribute: String)
    /// A required attribute made optional: nothing to rewrite.
    case makeOptional(entity: String, attribute: String)
    /// An index added: built from the rows.
    case addIndex(entity: String, attribute: String)
    /// An index removed: dropped.
    case removeIndex(entity: String, attribute: String)
    /// A new relationship: empty (to-one nil) in existing rows.
    case addRelationship(entity: String, relationship: String)
    /// A relationship gone: its foreign keys and links dropped.
    case removeRelationship(entity: String, relationship: String)
    /// A relationship renamed: its links carried over.
    case renameRelationship(entity: String, from: String, to: String)
    /// A to-one relationship made to-many: each foreign key becomes a link.
    case makeToMany(entity: String, relationship: String)
    /// A uniqueness constraint added: its index is built from the rows, and rows sharing
    /// values fail the migration, named.
    case addUniquenessConstraint(entity: String, constraint: [String])
    /// A uniqueness constraint removed: its index dropped.
    case removeUniquenessConstraint(entity: String, constraint: [String])

    var description: String {
        switch self {
        case .addEntity(let name): "add entity \(name)"
        case .removeEntity(let name): "remove entity \(name)"
        case .renameEntity(let from, let to): "rename entity \(from) to \(to)"
        case .addAttribute(let entity, let attribute): "add attribute \(entity).\(attribute)"
        case .removeAttribute(let entity, let attribute): "remove attribute \(entity).\(attribute)"
        case .renameAttribute(let entity, let from, let to): "rename attribute \(entity).\(from) to \(to)"
        case .changeType(let entity, let attribute, let from, let to, let widening):
            "change \(entity).\(attribute) from \(from) to \(to)\(widening ? " (widening)" : " (each value checked)")"
        case .makeRequired(let entity, let attribute): "make \(entity).\(attribute) required (nil takes the default)"
        case .makeOptional(let entity, let attribute): "make \(entity).\(attribute) optional"
        case .addIndex(let entity, let attribute): "add index \(entity).\(attribute)"
        case .removeIndex(let entity, let attribute): "remove index \(entity).\(attribute)"
        case .addRelationship(let entity, let relationship): "add relationship \(entity).\(relationship)"
        case .removeRelationship(let entity, let relationship): "remove relationship \(entity).\(relationship)"
        case .renameRelationship(let entity, let from, let to): "rename relationship \(entity).\(from) to \(to)"
        case .makeToMany(let entity, let relationship): "make \(entity).\(relationship) to-many"
        case .addUniquenessConstraint(let entity, let constraint): "add uniqueness constraint \(entity)[\(constraint.joined(separator: ", "))]"
        case .removeUniquenessConstraint(let entity, let constraint):
            "remove uniqueness constraint \(entity)[\(constraint.joined(separator: ", "))]"
        }
    }

    /// Whether the change rewrites the rows of its entity.
    var rewritesRows: Bool {
        switch self {
        case .removeAttribute, .renameAttribute, .changeType, .makeRequired, .removeRelationship, .renameRelationship, .makeToMany:
            true
        case .addAttribute, .addEntity, .removeEntity, .renameEntity, .makeOptional, .addIndex, .removeIndex, .addRelationship,
            .addUniquenessConstraint, .removeUniquenessConstraint:
            false
        }
    }
}

/// The changes between a store's model and a new model, and what no lightweight
/// migration can do (each needs a custom stage), all found at once, before anything is
/// written.
struct SchemaDiff: Sendable, Hashable {
    /// The lightweight changes, entity by entity (entities by their new names).
    var changes: [SchemaChange] = []
    /// What needs a custom stage, one sentence each.
    var problems: [String] = []
    /// What a custom stage's inferred part does about each problem (same order as
    /// ``problems``): drops the stored element so the new one starts empty, or leaves a
    /// required attribute for the stage's code to fill.
    var repairs: [Repair] = []

    /// What a custom stage does about a problem a lightweight stage refuses.
    enum Repair: Sendable, Hashable {
        /// The stored attribute (old names) is dropped; the new one starts empty.
        case dropAttribute(entity: String, attribute: String)
        /// The stored relationship (old names) and its inverse are dropped; the new ones start empty.
        case dropRelationship(entity: String, relationship: String)
        /// The stored entity (old name), its sub-entities and every relationship to them
        /// are dropped; the new entity starts empty.
        case dropEntity(String)
        /// Nothing is dropped; the stage's code must give every object a value for this
        /// required attribute (new names).
        case fill(entity: String, attribute: String)
    }

    /// Records a problem and what a custom stage does about it.
    private mutating func problem(_ text: String, _ repair: Repair) {
        problems.append(text)
        repairs.append(repair)
    }

    /// Whether nothing changed.
    var isEmpty: Bool { changes.isEmpty && problems.isEmpty }

    /// Whether a lightweight migration can do it all.
    var isLightweight: Bool { problems.isEmpty }

    /// The widening conversions, in order: each type converts exactly to every later one.
    private static let widening = ["integer16", "integer32", "integer64", "double"]

    /// Conversions whose every value is checked: between integer widths (narrowing), from
    /// integers to floating point, and from float to double and back.
    private static let checked: Set<[String]> = [
        ["integer64", "integer32"], ["integer64", "integer16"], ["integer32", "integer16"],
        ["integer16", "float"], ["integer32", "float"], ["integer64", "float"],
        ["float", "double"], ["double", "float"], ["double", "integer64"], ["double", "integer32"], ["double", "integer16"],
        ["float", "integer64"], ["float", "integer32"], ["float", "integer16"],
    ]

    /// The changes from `old` (a store's model) to `new`.
    init(from old: StoredModel, to new: ManagedObjectModel) {
        let oldEntities = Dictionary(old.entities.map { ($0.name, $0) }) { first, _ in first }
        var matched = Set<String>()
        for entity in new.entities {
            // The old entity: by the renaming identifier, else by name.
            let (source, renamedFrom) = Self.previous(of: entity.name, renaming: entity.renamingIdentifier, in: oldEntities)
            if let renamedFrom { changes.append(.renameEntity(from: renamedFrom, to: entity.name)) }
            guard let source else {
                changes.append(.addEntity(entity.name))
                continue
            }
            matched.insert(source.name)
            if source.superentity != entity.superentityName.flatMap({ name in Self.oldName(of: name, in: new, old: oldEntities) }) {
                problem(
                    "entity \(entity.name) has superentity \(entity.superentityName ?? "none"), not \(source.superentity ?? "none") as stored: "
                        + "it moved in the entity hierarchy", .dropEntity(source.name))
            }
            if source.isAbstract != entity.isAbstract, entity.isAbstract {
                problem("entity \(entity.name) became abstract: its stored objects must become objects of its sub-entities", .dropEntity(source.name))
            }
            compareAttributes(of: entity, with: source)
            compareRelationships(of: entity, with: source, in: new, old: oldEntities)
            let oldConstraints = Set(source.uniquenessConstraints.map { $0.map { name in Self.newAttributeName(name, in: entity) } })
            let newConstraints = Set(entity.declaredUniquenessConstraints)
            for constraint in entity.declaredUniquenessConstraints where !oldConstraints.contains(constraint) {
                changes.append(.addUniquenessConstraint(entity: entity.name, constraint: constraint))
            }
            for constraint in source.uniquenessConstraints.map({ $0.map { name in Self.newAttributeName(name, in: entity) } })
            where !newConstraints.contains(constraint) {
                changes.append(.removeUniquenessConstraint(entity: entity.name, constraint: constraint))
            }
        }
        for entity in old.entities where !matched.contains(entity.name) {
            changes.append(.removeEntity(entity.name))
        }
    }

    /// What `name` was in the stored model: the stored element its renaming identifier names
    /// (and that old name, when it differs), else the one of the same name.
    private static func previous<Element>(
        of name: String, renaming: String?, in old: [String: Element]
    ) -> (element: Element?, renamedFrom: String?) {
        if let renaming, let found = old[renaming] { return (found, renaming == name ? nil : renaming) }
        return (old[name], nil)
    }

    /// The name an old attribute has in `entity` (a renamed one's new name).
    private static func newAttributeName(_ name: String, in entity: EntityDescription) -> String {
        entity.declaredAttributes.first { $0.renamingIdentifier == name }?.name ?? name
    }

    /// The stored name of new entity `name` (its renaming identifier when it has one that
    /// the store knows).
    private static func oldName(of name: String, in new: ManagedObjectModel, old: [String: StoredModel.Entity]) -> String {
        if let renamed = new.entitiesByName[name]?.renamingIdentifier, old[renamed] != nil { return renamed }
        return name
    }

    private mutating func compareAttributes(of entity: EntityDescription, with source: StoredModel.Entity) {
        let oldAttributes = Dictionary(source.attributes.map { ($0.name, $0) }) { first, _ in first }
        var matched = Set<String>()
        for attribute in entity.declaredAttributes where !attribute.isTransient {
            let (previous, renamedFrom) = Self.previous(of: attribute.name, renaming: attribute.renamingIdentifier, in: oldAttributes)
            if let renamedFrom { changes.append(.renameAttribute(entity: entity.name, from: renamedFrom, to: attribute.name)) }
            guard let previous else {
                if !attribute.isOptional && attribute.defaultValue == nil {
                    problem(
                        "attribute \(entity.name).\(attribute.name) is new and required without a default value: "
                            + "existing objects have nothing to hold (give it a default, make it optional, or fill it in a custom stage)",
                        .fill(entity: entity.name, attribute: attribute.name))
                } else {
                    changes.append(.addAttribute(entity: entity.name, attribute: attribute.name))
                }
                if attribute.isIndexed { changes.append(.addIndex(entity: entity.name, attribute: attribute.name)) }
                continue
            }
            matched.insert(previous.name)
            let newType = attribute.type.description
            if previous.type != newType {
                if let from = Self.widening.firstIndex(of: previous.type), let to = Self.widening.firstIndex(of: newType), from < to {
                    changes.append(.changeType(entity: entity.name, attribute: attribute.name, from: previous.type, to: newType, widening: true))
                } else if Self.checked.contains([previous.type, newType]) {
                    changes.append(.changeType(entity: entity.name, attribute: attribute.name, from: previous.type, to: newType, widening: false))
                } else {
                    problem(
                        "attribute \(entity.name).\(attribute.name) changes from \(previous.type) to \(newType): "
                            + "no lightweight conversion", .dropAttribute(entity: source.name, attribute: previous.name))
                }
            }
            if previous.isOptional && !attribute.isOptional {
                if attribute.defaultValue == nil {
                    problem(
                        "attribute \(entity.name).\(attribute.name) becomes required without a default value: "
                            + "objects holding nil have nothing to take (give it a default, or fill it in a custom stage)",
                        .fill(entity: entity.name, attribute: attribute.name))
                } else {
                    changes.append(.makeRequired(entity: entity.name, attribute: attribute.name))
                }
            } else if !previous.isOptional && attribute.isOptional {
                changes.append(.makeOptional(entity: entity.name, attribute: attribute.name))
            }
            if previous.isIndexed != attribute.isIndexed {
                changes.append(attribute.isIndexed
                    ? .addIndex(entity: entity.name, attribute: attribute.name) : .removeIndex(entity: entity.name, attribute: attribute.name))
            }
        }
        for attribute in source.attributes where !matched.contains(attribute.name) {
            changes.append(.removeAttribute(entity: entity.name, attribute: attribute.name))
        }
    }

    private mutating func compareRelationships(
        of entity: EntityDescription, with source: StoredModel.Entity, in new: ManagedObjectModel, old: [String: StoredModel.Entity]
    ) {
        let oldRelationships = Dictionary(source.relationships.map { ($0.name, $0) }) { first, _ in first }
        var matched = Set<String>()
        for relationship in entity.declaredRelationships {
            let (previous, renamedFrom) = Self.previous(
                of: relationship.name, renaming: relationship.renamingIdentifier, in: oldRelationships)
            if let renamedFrom { changes.append(.renameRelationship(entity: entity.name, from: renamedFrom, to: relationship.name)) }
            guard let previous else {
                changes.append(.addRelationship(entity: entity.name, relationship: relationship.name))
                continue
            }
            matched.insert(previous.name)
            let destination = Self.oldName(of: relationship.destinationEntityName, in: new, old: old)
            if previous.destination != destination {
                problem(
                    "relationship \(entity.name).\(relationship.name) points to \(relationship.destinationEntityName), "
                        + "not \(previous.destination) as stored", .dropRelationship(entity: source.name, relationship: previous.name))
            }
            switch (previous.isToMany, relationship.isToMany) {
            case (false, true):
                changes.append(.makeToMany(entity: entity.name, relationship: relationship.name))
            case (true, false):
                problem(
                    "relationship \(entity.name).\(relationship.name) becomes to-one: objects with several destinations "
                        + "must keep one", .dropRelationship(entity: source.name, relationship: previous.name))
            default:
                if previous.isToMany && previous.isOrdered != relationship.isOrdered && relationship.isOrdered {
                    problem(
                        "relationship \(entity.name).\(relationship.name) becomes ordered: the stored members have no order",
                        .dropRelationship(entity: source.name, relationship: previous.name))
                }
            }
        }
        for relationship in source.relationships where !matched.contains(relationship.name) {
            changes.append(.removeRelationship(entity: entity.name, relationship: relationship.name))
        }
    }
}
