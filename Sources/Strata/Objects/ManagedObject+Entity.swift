import Synchronization

/// Entities derived from typed subclasses, and the typed accessors' slot lookups.
extension ManagedObject {
    /// The entity of this class, derived from its ``Attribute`` and ``Relationship``
    /// properties (and its superclasses' for inherited properties). Derived once per
    /// class and cached.
    ///
    /// Inverses are checked when you build a model from the classes
    /// (``ManagedObjectModel/init(types:configurations:)``); this description on its own is not
    /// checked. On `ManagedObject` itself it is an empty entity.
    public class func entity() -> EntityDescription {
        ClassEntityRegistry.shared.description(of: self).entity
    }

    // MARK: Typed access

    /// The attribute slot of the wrapper declared at `site`.
    func attributeSlot(at site: DeclarationSite) -> Int? {
        switch propertySlot(at: site) {
        case .attribute(let slot): slot
        default: nil
        }
    }

    /// The relationship slot of the wrapper declared at `site`.
    func relationshipSlot(at site: DeclarationSite) -> Int? {
        switch propertySlot(at: site) {
        case .relationship(let slot): slot
        default: nil
        }
    }

    func propertySlot(at site: DeclarationSite) -> PropertySlot? {
        if let slot = entity.siteSlots[site] { return slot }
        // An entity from a model built by hand for this class: find the name from the
        // class's own description.
        guard let name = Self.entity().siteSlots[site].map({ slot in
            switch slot {
            case .attribute(let index): Self.entity().attributes[index].name
            case .relationship(let index): Self.entity().relationships[index].name
            }
        }) else { return nil }
        return entity.attributeSlots[name].map(PropertySlot.attribute)
            ?? entity.relationshipSlots[name].map(PropertySlot.relationship)
    }

    func readAttribute<Value: AttributeStorable>(at site: DeclarationSite, default defaultValue: Value) -> Value {
        guard let slot = attributeSlot(at: site), fulfilIfNeeded(property: entity.attributes[slot].name) else {
            if faultState == .inaccessible, let recorder = owner as? KeyPathRecorder {
                _ = recorder.visit(self, property: propertySlot(at: site), valueType: Value.self, destination: nil)
                recorder.lastReturned = defaultValue.attributeValue
            }
            return defaultValue
        }
        return Value(attributeValue: attributeValues[slot]) ?? defaultValue
    }

    func writeAttribute(at site: DeclarationSite, _ value: AttributeValue?) {
        guard let slot = attributeSlot(at: site) else { return }
        let name = entity.attributes[slot].name
        editRecordingFailure(key: name) { () throws(StrataError) in
            // A fault that cannot be read keeps its stored values: writing over it would
            // save nil for every other attribute.
            if !fulfilIfNeeded(property: name) { try throwIfStorageFailed() }
            writeAttribute(slot, value)
        }
    }

    func readRelationship(at site: DeclarationSite, valueType: Any.Type, destination: ManagedObject.Type) -> [ManagedObject] {
        guard let slot = relationshipSlot(at: site), loadRelationshipIfNeeded(slot) else {
            // A recording prototype (KeyPathNames) goes on to its destination's prototype.
            if faultState == .inaccessible, let recorder = owner as? KeyPathRecorder,
               let prototype = recorder.visit(self, property: propertySlot(at: site), valueType: valueType, destination: destination) {
                return [prototype]
            }
            return []
        }
        return relationshipValues[slot].objects
    }

    /// A typed transformable write: a value that cannot be encoded, or whose encoding does
    /// not decode back, is refused (recorded: the next save fails with a type mismatch)
    /// instead of being stored as nil or as bytes nothing can read. Nil stores nil.
    func writeTransformable(at site: DeclarationSite, _ value: Any, type valueType: any (Codable & Sendable).Type) {
        guard let slot = attributeSlot(at: site) else { return }
        let attribute = entity.attributes[slot]
        editRecordingFailure(key: attribute.name) { () throws(StrataError) in
            var checked: AttributeValue?
            if let unwrapped = Self.flattened(value) {
                checked = try TransformableCoding.checkedValue(unwrapped, as: valueType) { detail throws(StrataError) in
                    throw StrataError.typeMismatch(
                        key: attribute.name, entity: entity.name, expected: attribute.type.swiftTypeName,
                        actual: "\(type(of: value))\(detail)")
                }
            }
            if !fulfilIfNeeded(property: attribute.name) { try throwIfStorageFailed() }
            writeAttribute(slot, checked)
        }
    }

    func writeRelationship(at site: DeclarationSite, _ objects: [ManagedObject]) {
        guard let slot = relationshipSlot(at: site) else { return }
        editRecordingFailure(key: entity.relationships[slot].name) { () throws(StrataError) in
            try setRelationship(slot, to: objects)
        }
    }
}

/// A property wrapper's contribution to its class's entity.
protocol PropertyDeclaration {
    var site: DeclarationSite { get }
    func property(named name: String) -> PropertyDescription
    /// The destination class of a relationship.
    var destinationType: ManagedObject.Type? { get }
}

extension Attribute: PropertyDeclaration {
    func property(named name: String) -> PropertyDescription {
        let validation: AttributeValidation = switch rules {
        case .none: AttributeValidation()
        case .some(let rules): rules
        }
        return .attribute(AttributeDescription(
            name: name, type: Value.attributeType, isOptional: Value.isOptionalAttribute,
            defaultValue: defaultValue.attributeValue, isIndexed: isIndexed, isTransient: isTransient,
            validation: validation))
    }

    var destinationType: ManagedObject.Type? { nil }
}

extension Relationship: PropertyDeclaration {
    func property(named name: String) -> PropertyDescription {
        .relationship(RelationshipDescription(
            name: name, destinationEntityName: Value.Destination.entityName, inverseName: inverseName,
            isToMany: Value.isToMany, isOrdered: Value.isOrdered, isOptional: isOptional,
            deleteRule: deleteRule, minCount: minCount, maxCount: maxCount))
    }

    var destinationType: ManagedObject.Type? { Value.Destination.self }
}

/// What Strata knows about a managed-object class: its entity, derived once.
struct ClassDescription: Sendable {
    /// The entity as declared by the class alone (no inherited properties).
    let declared: EntityDescription
    /// The entity with inherited properties.
    let entity: EntityDescription
    /// The superclass, when it is a subclass of `ManagedObject`.
    let superclass: ManagedObject.Type?
    /// The classes the relationships point to.
    let destinations: [ManagedObject.Type]
    /// The declared entities of the ancestors, nearest first.
    let ancestors: [EntityDescription]
}

/// The per-class cache of derived entities.
final class ClassEntityRegistry: Sendable {
    static let shared = ClassEntityRegistry()
    private let descriptions = Mutex<[ObjectIdentifier: ClassDescription]>([:])

    func description(of type: ManagedObject.Type) -> ClassDescription {
        if let known = descriptions.withLock({ $0[ObjectIdentifier(type)] }) { return known }
        // Derived outside the lock: deriving asks for the superclass's description.
        let derived = derive(type)
        return descriptions.withLock { cache in
            if let raced = cache[ObjectIdentifier(type)] { return raced }
            cache[ObjectIdentifier(type)] = derived
            return derived
        }
    }

    /// Reads the class's property wrappers from a prototype instance.
    private func derive(_ type: ManagedObject.Type) -> ClassDescription {
        let placeholder = EntityDescription(name: type.entityName, managedObjectClass: type)
        let prototype = type.init(entity: placeholder)
        let mirror = Mirror(reflecting: prototype)
        var attributes: [AttributeDescription] = []
        var relationships: [RelationshipDescription] = []
        var sites: [DeclarationSite: String] = [:]
        var destinations: [ManagedObject.Type] = []
        for child in mirror.children {
            guard let declaration = child.value as? any PropertyDeclaration, let label = child.label else { continue }
            let name = label.hasPrefix("_") ? String(label.dropFirst()) : label
            switch declaration.property(named: name) {
            case .attribute(let attribute): attributes.append(attribute)
            case .relationship(let relationship): relationships.append(relationship)
            }
            sites[declaration.site] = name
            if let destination = declaration.destinationType { destinations.append(destination) }
        }
        var superclass: ManagedObject.Type?
        var ancestors: [EntityDescription] = []
        if let parent = mirror.superclassMirror?.subjectType as? ManagedObject.Type, parent != ManagedObject.self {
            superclass = parent
            let parentDescription = description(of: parent)
            ancestors = [parentDescription.declared] + parentDescription.ancestors
        }
        let declared = EntityDescription(
            // A subclass inherits its superclass's `isAbstractEntity`: the entity is abstract
            // only where the answer changes to true, so sub-entities of an abstract
            // entity are concrete without having to say so.
            name: type.entityName, superentityName: superclass?.entityName,
            isAbstract: type.isAbstractEntity && !(superclass?.isAbstractEntity ?? false),
            managedObjectClass: type, declaredAttributes: attributes, declaredRelationships: relationships,
            declarationSites: sites, ancestors: [], subentityNames: [])
        return ClassDescription(
            declared: declared, entity: EntityDescription(resolving: declared, ancestors: ancestors, subentityNames: []),
            superclass: superclass, destinations: destinations, ancestors: ancestors)
    }
}

extension ManagedObject {
    /// Moves the object to `entity`, the same entity as described by a context's model
    /// (an object made with `Note()` carries its class's own description): values move
    /// by property name; properties the new description lacks are dropped.
    func adopt(_ entity: EntityDescription) {
        let old = self.entity
        var attributes = entity.attributes.map(\.defaultValue)
        for (slot, attribute) in entity.attributes.enumerated() {
            if let oldSlot = old.attributeSlots[attribute.name] { attributes[slot] = attributeValues[oldSlot] }
        }
        var relationships = entity.relationships.map { RelationshipStorage.toOneOrEmpty(for: $0) }
        for (slot, relationship) in entity.relationships.enumerated() {
            if let oldSlot = old.relationshipSlots[relationship.name] { relationships[slot] = relationshipValues[oldSlot] }
        }
        var committedState = committed
        if let state = committed {
            var committedAttributes = attributes
            for (slot, attribute) in entity.attributes.enumerated() {
                if let oldSlot = old.attributeSlots[attribute.name] { committedAttributes[slot] = state.attributes[oldSlot] }
            }
            var committedRelationships = relationships
            for (slot, relationship) in entity.relationships.enumerated() {
                if let oldSlot = old.relationshipSlots[relationship.name] { committedRelationships[slot] = state.relationships[oldSlot] }
            }
            committedState = CommittedState(attributes: committedAttributes, relationships: committedRelationships)
        }
        self.entity = entity
        attributeValues = attributes
        relationshipValues = relationships
        committed = committedState
    }
}

extension RelationshipStorage {
    /// An empty value for `relationship`.
    static func toOneOrEmpty(for relationship: RelationshipDescription) -> RelationshipStorage {
        relationship.isToMany ? .toMany(ToManyStorage(isOrdered: relationship.isOrdered)) : .toOne(nil)
    }
}
