/// A kind of object in a ``ManagedObjectModel``: its attributes, relationships and place
/// in an inheritance tree.
///
/// You describe an entity with its own (declared) properties and the name of its
/// superentity; the model you build from it returns resolved descriptions whose
/// ``attributesByName`` and ``relationshipsByName`` include inherited properties.
/// Immutable and `Sendable`.
public final class EntityDescription: Sendable, CustomStringConvertible {
    /// The entity's name, unique in its model.
    public let name: String
    /// The superentity's name, or nil for a root entity.
    public let superentityName: String?
    /// An abstract entity has no instances of its own, only of its sub-entities.
    public let isAbstract: Bool
    /// The attributes this entity declares itself (not inherited), in declaration order.
    public let declaredAttributes: [AttributeDescription]
    /// The relationships this entity declares itself, in declaration order.
    public let declaredRelationships: [RelationshipDescription]

    /// Every attribute, inherited ones first, by name (filled in by the model).
    public let attributesByName: [String: AttributeDescription]
    /// Every relationship, inherited ones included, by name (filled in by the model).
    public let relationshipsByName: [String: RelationshipDescription]
    /// The names of the direct sub-entities, sorted (filled in by the model).
    public let subentityNames: [String]
    /// The entity's ancestors, nearest first (filled in by the model).
    public let ancestorNames: [String]

    /// Describes an entity by its own properties.
    public init(
        name: String, superentityName: String? = nil, isAbstract: Bool = false,
        attributes: [AttributeDescription] = [], relationships: [RelationshipDescription] = []
    ) {
        self.name = name
        self.superentityName = superentityName
        self.isAbstract = isAbstract
        self.declaredAttributes = attributes
        self.declaredRelationships = relationships
        self.attributesByName = Dictionary(attributes.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.relationshipsByName = Dictionary(relationships.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.subentityNames = []
        self.ancestorNames = []
    }

    /// The resolved description the model builds, with inherited properties.
    init(resolving entity: EntityDescription, ancestors: [EntityDescription], subentityNames: [String]) {
        name = entity.name
        superentityName = entity.superentityName
        isAbstract = entity.isAbstract
        declaredAttributes = entity.declaredAttributes
        declaredRelationships = entity.declaredRelationships
        var attributes: [String: AttributeDescription] = [:]
        var relationships: [String: RelationshipDescription] = [:]
        for source in ancestors.reversed() + [entity] {
            for attribute in source.declaredAttributes where attributes[attribute.name] == nil {
                attributes[attribute.name] = attribute
            }
            for relationship in source.declaredRelationships where relationships[relationship.name] == nil {
                relationships[relationship.name] = relationship
            }
        }
        attributesByName = attributes
        relationshipsByName = relationships
        self.subentityNames = subentityNames
        ancestorNames = ancestors.map(\.name)
    }

    /// Every property name, attributes and relationships, sorted.
    public var propertyNames: [String] {
        (Array(attributesByName.keys) + Array(relationshipsByName.keys)).sorted()
    }

    /// The attributes that are stored (not transient), sorted by name.
    public var storedAttributes: [AttributeDescription] {
        attributesByName.values.filter { !$0.isTransient }.sorted { $0.name < $1.name }
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
