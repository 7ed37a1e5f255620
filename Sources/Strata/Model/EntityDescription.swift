/// A kind of object in a ``ManagedObjectModel``: its attributes, relationships and place
/// in an inheritance tree.
///
/// You describe an entity with its own (declared) properties and the name of its
/// superentity; the model you build from it returns resolved descriptions whose
/// ``attributes``, ``attributesByName`` and ``relationshipsByName`` include inherited
/// properties. Immutable and `Sendable`.
///
/// A typed ``ManagedObject`` subclass derives its description from its property
/// wrappers: see ``ManagedObject/entity()``.
public final class EntityDescription: Sendable, CustomStringConvertible {
    /// The entity's name, unique in its model.
    public let name: String
    /// The superentity's name, or nil for a root entity.
    public let superentityName: String?
    /// An abstract entity has no instances of its own, only of its sub-entities.
    public let isAbstract: Bool
    /// The class of the entity's objects: a ``ManagedObject`` subclass, or
    /// `ManagedObject` itself for an entity used through `value(forKey:)`.
    public let managedObjectClass: ManagedObject.Type
    /// The attributes this entity declares itself (not inherited), in declaration order.
    public let declaredAttributes: [AttributeDescription]
    /// The relationships this entity declares itself, in declaration order.
    public let declaredRelationships: [RelationshipDescription]
    /// The uniqueness constraints this entity declares itself: each a list of attribute
    /// names whose values together may appear in one object only (see
    /// ``uniquenessConstraints``).
    public let declaredUniquenessConstraints: [[String]]
    /// The name this entity had in an earlier model version: a migration carries the
    /// stored objects of the entity of that name over to this one (a rename).
    public let renamingIdentifier: String?
    /// Every uniqueness constraint of the entity, inherited ones first: each a list of
    /// attribute names (one for a single-attribute constraint) whose values, together,
    /// no two saved objects of the entity, or of the entity that declares the
    /// constraint and its sub-entities, may share. The store enforces each with a unique
    /// index; an object with a nil in a constrained attribute is not constrained by that
    /// constraint. A save that breaks one conflicts (``StrataError/constraintConflicts(_:)``),
    /// unless its merge policy settles it (<doc:MergePolicies>). Part of the model's
    /// ``ManagedObjectModel/versionHash``.
    public let uniquenessConstraints: [[String]]
    /// The entity that declares each of ``uniquenessConstraints`` (this one or an ancestor):
    /// the one whose objects, with its sub-entities', share the constraint's index.
    let uniquenessConstraintOwners: [String]

    /// Every attribute, inherited ones first, in declaration order.
    public let attributes: [AttributeDescription]
    /// Every relationship, inherited ones first, in declaration order.
    public let relationships: [RelationshipDescription]
    /// The names of the direct sub-entities, sorted (filled in by the model).
    public let subentityNames: [String]
    /// The entity's ancestors, nearest first (filled in by the model).
    public let ancestorNames: [String]

    /// Positions in ``attributes`` and ``relationships`` by name: where a managed object
    /// keeps each value.
    let attributeSlots: [String: Int]
    let relationshipSlots: [String: Int]
    /// The names of ``attributes`` and ``relationships`` by slot (scanned and read
    /// without copying the descriptions).
    let attributeNames: [String]
    let relationshipNames: [String]
    /// The slots of the stored (not transient) attributes, ascending.
    let storedAttributeSlots: [Int]
    /// Where a typed subclass declared each property wrapper, mapped to its name.
    let declarationSites: [DeclarationSite: String]
    /// Where objects of this entity keep each property (typed fields of the class, or
    /// dynamic storage).
    let layout: ObjectLayout
    /// The process-wide number of the entity's name (``EntityNames``), for identity keys.
    let nameNumber: UInt32
    /// Whether validating an object of ``managedObjectClass`` (exactly) may skip calling
    /// ``ManagedObject/validateValue(_:forKey:)`` for each property: the model's rules
    /// cannot fail (``ObjectLayout/modelRulesCannotFail``), and the class runs
    /// `ManagedObject`'s own implementation (it adds no rules of its own).
    let skipsPropertyValidation: Bool

    /// Describes an entity by its own properties.
    ///
    /// `uniquenessConstraints` lists the entity's own uniqueness constraints: each a list
    /// of attribute names (see ``uniquenessConstraints``).
    public convenience init(
        name: String, superentityName: String? = nil, isAbstract: Bool = false,
        managedObjectClass: ManagedObject.Type = ManagedObject.self,
        attributes: [AttributeDescription] = [], relationships: [RelationshipDescription] = [],
        uniquenessConstraints: [[String]] = [], renamingIdentifier: String? = nil
    ) {
        self.init(
            name: name, superentityName: superentityName, isAbstract: isAbstract,
            managedObjectClass: managedObjectClass, declaredAttributes: attributes,
            declaredRelationships: relationships, declaredUniquenessConstraints: uniquenessConstraints,
            renamingIdentifier: renamingIdentifier, declarationSites: [:], ancestors: [], subentityNames: [])
    }

    /// The resolved description the model builds, with inherited properties.
    convenience init(resolving entity: EntityDescription, ancestors: [EntityDescription], subentityNames: [String]) {
        self.init(
            name: entity.name, superentityName: entity.superentityName, isAbstract: entity.isAbstract,
            managedObjectClass: entity.managedObjectClass, declaredAttributes: entity.declaredAttributes,
            declaredRelationships: entity.declaredRelationships, declaredUniquenessConstraints: entity.declaredUniquenessConstraints,
            renamingIdentifier: entity.renamingIdentifier, declarationSites: entity.declarationSites, ancestors: ancestors,
            subentityNames: subentityNames)
    }

    init(
        name: String, superentityName: String?, isAbstract: Bool, managedObjectClass: ManagedObject.Type,
        declaredAttributes: [AttributeDescription], declaredRelationships: [RelationshipDescription],
        declaredUniquenessConstraints: [[String]] = [], renamingIdentifier: String? = nil,
        declarationSites: [DeclarationSite: String], ancestors: [EntityDescription], subentityNames: [String]
    ) {
        self.renamingIdentifier = renamingIdentifier
        self.name = name
        self.superentityName = superentityName
        self.isAbstract = isAbstract
        self.managedObjectClass = managedObjectClass
        self.declaredAttributes = declaredAttributes
        self.declaredRelationships = declaredRelationships
        self.declaredUniquenessConstraints = declaredUniquenessConstraints
        var constraints: [[String]] = []
        var owners: [String] = []
        for source in ancestors.reversed() {
            for constraint in source.declaredUniquenessConstraints where !constraints.contains(constraint) {
                constraints.append(constraint)
                owners.append(source.name)
            }
        }
        for constraint in declaredUniquenessConstraints where !constraints.contains(constraint) {
            constraints.append(constraint)
            owners.append(name)
        }
        uniquenessConstraints = constraints
        uniquenessConstraintOwners = owners
        var attributes: [AttributeDescription] = []
        var relationships: [RelationshipDescription] = []
        var attributeSlots: [String: Int] = [:]
        var relationshipSlots: [String: Int] = [:]
        var sites = declarationSites
        // A duplicate name is a model error reported by the model; here the first one wins.
        for source in ancestors.reversed() + [nil] {
            for attribute in source?.declaredAttributes ?? declaredAttributes
            where attributeSlots[attribute.name] == nil && relationshipSlots[attribute.name] == nil {
                attributeSlots[attribute.name] = attributes.count
                attributes.append(attribute)
            }
            for relationship in source?.declaredRelationships ?? declaredRelationships
            where attributeSlots[relationship.name] == nil && relationshipSlots[relationship.name] == nil {
                relationshipSlots[relationship.name] = relationships.count
                relationships.append(relationship)
            }
            if let source { sites.merge(source.declarationSites) { own, _ in own } }
        }
        self.attributes = attributes
        self.relationships = relationships
        self.attributeSlots = attributeSlots
        self.relationshipSlots = relationshipSlots
        attributeNames = attributes.map(\.name)
        relationshipNames = relationships.map(\.name)
        storedAttributeSlots = attributes.indices.filter { !attributes[$0].isTransient }
        self.declarationSites = declarationSites
        self.subentityNames = subentityNames
        ancestorNames = ancestors.map(\.name)
        layout = ObjectLayout(
            attributes: attributes, relationships: relationships, fields: ClassFields.of(managedObjectClass),
            derivedFromClass: !sites.isEmpty)
        nameNumber = EntityNames.number(for: name)
        skipsPropertyValidation = layout.modelRulesCannotFail && !ManagedObject.overridesValidateValue(managedObjectClass)
    }

    /// Every attribute, inherited ones included, by name.
    public var attributesByName: [String: AttributeDescription] {
        attributeSlots.mapValues { attributes[$0] }
    }

    /// Every relationship, inherited ones included, by name.
    public var relationshipsByName: [String: RelationshipDescription] {
        relationshipSlots.mapValues { relationships[$0] }
    }

    /// Every property, attributes then relationships, inherited ones first.
    public var properties: [PropertyDescription] {
        attributes.map(PropertyDescription.attribute) + relationships.map(PropertyDescription.relationship)
    }

    /// The attribute named `name`, inherited ones included.
    public func attribute(named name: String) -> AttributeDescription? {
        attributeSlot(named: name).map { attributes[$0] }
    }

    /// The relationship named `name`, inherited ones included.
    public func relationship(named name: String) -> RelationshipDescription? {
        relationshipSlot(named: name).map { relationships[$0] }
    }

    /// The slot of attribute `name`. A small entity's names are scanned: the names
    /// callers pass are mostly the entity's own strings, which compare equal at once,
    /// where hashing would read every byte.
    func attributeSlot(named name: String) -> Int? {
        guard attributeNames.count <= Self.scannedSlots else { return attributeSlots[name] }
        return Self.scan(attributeNames, for: name)
    }

    /// The slot of relationship `name` (see ``attributeSlot(named:)``).
    func relationshipSlot(named name: String) -> Int? {
        guard relationshipNames.count <= Self.scannedSlots else { return relationshipSlots[name] }
        return Self.scan(relationshipNames, for: name)
    }

    /// The index of `name` in `names`: first by representation (the entity's own string,
    /// or an equal small one, is found without comparing characters), then by value.
    private static func scan(_ names: [String], for name: String) -> Int? {
        let bits = unsafeBitCast(name, to: (UInt64, UInt64).self)
        for index in names.indices {
            let other = unsafeBitCast(names[index], to: (UInt64, UInt64).self)
            if other.0 == bits.0 && other.1 == bits.1 { return index }
        }
        return names.firstIndex(of: name)
    }

    /// Up to how many slots a name lookup scans rather than hashes.
    private static let scannedSlots = 8

    /// Every property name, attributes and relationships, sorted.
    public var propertyNames: [String] {
        (Array(attributeSlots.keys) + Array(relationshipSlots.keys)).sorted()
    }

    /// The attributes that are stored (not transient), sorted by name.
    public var storedAttributes: [AttributeDescription] {
        attributes.filter { !$0.isTransient }.sorted { $0.name < $1.name }
    }

    /// Whether this entity is `entityName` or inherits from it.
    public func isKind(of entityName: String) -> Bool {
        name == entityName || ancestorNames.contains(entityName)
    }

    /// `Entity(Superentity)`.
    public var description: String {
        superentityName.map { "\(name)(\($0))" } ?? name
    }
}

/// An attribute or a relationship of an entity.
public enum PropertyDescription: Sendable, Hashable {
    /// An attribute.
    case attribute(AttributeDescription)
    /// A relationship.
    case relationship(RelationshipDescription)

    /// The property's name.
    public var name: String {
        switch self {
        case .attribute(let attribute): attribute.name
        case .relationship(let relationship): relationship.name
        }
    }
}

/// Where a managed object keeps one property's value.
enum PropertySlot: Sendable, Hashable {
    case attribute(Int)
    case relationship(Int)
}

/// The source position of a property wrapper's declaration: how the derivation of a
/// class's entity tells its declarations apart (``EntityDerivation``).
///
/// The file is kept as the address of the `#fileID` literal: constant for a given call
/// site, cheap to hash, and unique per file.
@usableFromInline
struct DeclarationSite: Sendable, Hashable {
    let file: UInt
    let line: UInt32
    let column: UInt32

    @usableFromInline
    init(fileID: StaticString, line: UInt, column: UInt) {
        file = fileID.hasPointerRepresentation ? UInt(bitPattern: fileID.utf8Start) : 0
        self.line = UInt32(truncatingIfNeeded: line)
        self.column = UInt32(truncatingIfNeeded: column)
    }
}
