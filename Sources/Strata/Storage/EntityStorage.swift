import StrataLMDB

/// How one entity is stored: its number, its databases and the field number of every
/// stored property, aligned with the entity's attribute and relationship slots (the
/// positions ``ObjectSnapshot`` uses). A class: every row of a save or a fetch reads it,
/// and a reference is one word to pass around.
final class EntityStorage: Sendable {
    /// The resolved entity.
    let entity: EntityDescription
    /// The entity's number (``StoreSchema``).
    let number: UInt16
    /// The entity's rows; nil for an abstract entity, which has none.
    let rows: Database?
    /// By attribute slot.
    let attributes: [StoredAttribute]
    /// By relationship slot.
    let relationships: [StoredRelationship]
    /// The uniqueness constraints, each with its unique index (none for an abstract entity).
    let constraints: [StoredConstraint]
    /// What each field number of a row holds.
    let fields: [UInt32: Field]
    /// ``fields`` as an array indexed by field number (field numbers are small: the
    /// store numbers every stored property of its model from 1), for decoding a record
    /// without hashing.
    private let fieldsByNumber: [Field?]
    /// The stored fields in increasing field number: the order a record is written in.
    let fieldOrder: [(number: UInt32, field: Field)]
    /// The attributes with an index: their slots, in slot order.
    let indexedSlots: [Int]
    /// Whether the entity has relationships: its rows then need references to other
    /// rows, known only when the save is written (``EncodedRow/relationships``).
    let hasRelationships: Bool
    /// Relationship slots by name.
    private let relationshipSlots: [String: Int]
    /// Attribute slots by name.
    private let attributeSlots: [String: Int]

    /// What a field of a row holds: the attribute or the to-one relationship of a slot.
    enum Field: Sendable, Hashable {
        /// The attribute of this slot.
        case attribute(Int)
        /// The to-one relationship of this slot (its foreign key).
        case relationship(Int)
    }

    /// The entity's name.
    var name: String { entity.name }

    /// Describes how `entity` is stored, opening its databases (none for an abstract
    /// entity). Without an `opener` (a store of a database server, ``SQLStore``), no LMDB
    /// database is opened: rows, indexes, links and unique indexes are all nil or empty,
    /// and only the numbers and slots are described.
    init(_ entity: EntityDescription, in model: ManagedObjectModel, schema: StoreSchema, opener: DatabaseOpener?) throws(StrataError) {
        // `StoreSchema.problem(storing:)` has checked that every number exists.
        let numbers = schema.entities[entity.name] ?? StoreSchema.Entity(number: 0, fields: [:])
        let concrete = !entity.isAbstract
        self.entity = entity
        number = numbers.number
        rows = concrete ? try opener?.open(StoreLayout.rowsDatabase(entity: entity.name)) : nil
        var fields: [UInt32: Field] = [:]
        var attributes: [StoredAttribute] = []
        var attributeSlots: [String: Int] = [:]
        for (slot, attribute) in entity.attributes.enumerated() {
            let field = attribute.isTransient ? nil : numbers.fields[attribute.name]
            if let field { fields[field] = .attribute(slot) }
            let indexed = concrete && field != nil && attribute.isIndexed
            attributes.append(StoredAttribute(
                description: attribute, field: field,
                index: indexed ? try opener?.open(StoreLayout.indexDatabase(entity: entity.name, attribute: attribute.name)) : nil,
                indexKind: attribute.type.indexKeyKind))
            attributeSlots[attribute.name] = slot
        }
        var relationships: [StoredRelationship] = []
        var relationshipSlots: [String: Int] = [:]
        for (slot, relationship) in entity.relationships.enumerated() {
            let field = relationship.isToMany ? nil : numbers.fields[relationship.name]
            if let field { fields[field] = .relationship(slot) }
            let inverse = model.entitiesByName[relationship.destinationEntityName]?.relationship(named: relationship.inverseName)
            let links = concrete && relationship.isToMany
                ? try opener?.open(StoreLayout.linksDatabase(entity: entity.name, relationship: relationship.name)) : nil
            relationships.append(StoredRelationship(
                description: relationship, inverseIsToMany: inverse?.isToMany ?? false, field: field, links: links))
            relationshipSlots[relationship.name] = slot
        }
        var constraints: [StoredConstraint] = []
        if concrete, let opener {
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                let slots = constraint.compactMap { attributeSlots[$0] }
                let fields = slots.compactMap { attributes[$0].field }
                let kinds = slots.compactMap { attributes[$0].indexKind }
                // The model checked that each is a stored, indexable attribute.
                guard slots.count == constraint.count, fields.count == slots.count, kinds.count == slots.count else { continue }
                constraints.append(StoredConstraint(
                    attributes: constraint, slots: slots, fields: fields, kinds: kinds,
                    database: try opener.open(StoreLayout.uniqueDatabase(entity: owner, attributes: constraint)), owner: owner))
            }
        }
        self.constraints = constraints
        self.attributes = attributes
        self.relationships = relationships
        self.fields = fields
        fieldOrder = fields.sorted { $0.key < $1.key }.map { (number: $0.key, field: $0.value) }
        var byNumber = [Field?](repeating: nil, count: Int(min(fields.keys.max() ?? 0, 1 << 16)) + 1)
        for (number, field) in fields where number < byNumber.count { byNumber[Int(number)] = field }
        fieldsByNumber = byNumber
        indexedSlots = attributes.indices.filter { attributes[$0].index != nil && attributes[$0].indexKind != nil && attributes[$0].field != nil }
        hasRelationships = !relationships.isEmpty
        self.attributeSlots = attributeSlots
        self.relationshipSlots = relationshipSlots
    }

    /// What field `number` of a row holds, or nil for a field this model does not know.
    @inline(__always)
    func field(numbered number: UInt32) -> Field? {
        number < fieldsByNumber.count ? fieldsByNumber[Int(number)] : fields[number]
    }

    /// The slot of relationship `name`, or nil.
    func relationshipSlot(named name: String) -> Int? { relationshipSlots[name] }

    /// The slot of attribute `name`, or nil.
    func attributeSlot(named name: String) -> Int? { attributeSlots[name] }

    /// The links database of to-many relationship `name`, or nil.
    func links(named name: String) -> Database? {
        relationshipSlots[name].flatMap { relationships[$0].links }
    }
}

/// How one attribute of an entity is stored.
struct StoredAttribute: Sendable {
    /// The attribute.
    let description: AttributeDescription
    /// Its field number; nil for a transient attribute, which is never stored.
    let field: UInt32?
    /// Its index database, when it is indexed (and the entity concrete).
    let index: Database?
    /// How its values encode as index keys; nil for a type that cannot be indexed.
    let indexKind: IndexKeyKind?
    /// The attribute's type (``description``'s, kept apart: reading it needs no copy of
    /// the whole description).
    let type: AttributeType

    init(description: AttributeDescription, field: UInt32?, index: Database?, indexKind: IndexKeyKind?) {
        self.description = description
        self.field = field
        self.index = index
        self.indexKind = indexKind
        type = description.type
    }
}

/// How one relationship of an entity is stored.
struct StoredRelationship: Sendable {
    /// The relationship.
    let description: RelationshipDescription
    /// Whether its inverse is to-many.
    let inverseIsToMany: Bool
    /// The foreign-key field of a to-one relationship.
    let field: UInt32?
    /// The links database of a to-many relationship (of a concrete entity).
    let links: Database?

    /// The relationship's shape, seen from this side.
    enum Shape: Sendable, Hashable {
        /// To-one with a to-one inverse: a foreign key on both sides.
        case oneToOne
        /// To-one with a to-many inverse: the authoritative foreign key; the inverse's
        /// links follow it.
        case manyToOne
        /// To-many with a to-one inverse: links kept by the other side's foreign keys;
        /// this side only orders them.
        case oneToMany
        /// To-many on both sides: each side keeps its own links.
        case manyToMany
    }

    /// This side's shape.
    var shape: Shape {
        switch (description.isToMany, inverseIsToMany) {
        case (false, false): .oneToOne
        case (false, true): .manyToOne
        case (true, false): .oneToMany
        case (true, true): .manyToMany
        }
    }
}
