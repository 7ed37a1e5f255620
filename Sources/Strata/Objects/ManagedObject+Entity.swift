import Foundation
import Synchronization
internal import StrataLocks

/// Entities derived from typed subclasses, and the typed accessors' slow paths.
extension ManagedObject {
    /// The entity of this class, derived from its ``Attribute`` and ``Relationship``
    /// properties (and its superclasses' for inherited properties). Derived once per
    /// class and cached.
    ///
    /// Inverses are checked when you build a model from the classes
    /// (``ManagedObjectModel/init(types:configurations:versionIdentifier:)``); this description on its own is not
    /// checked. On `ManagedObject` itself it is an empty entity.
    public class func entity() -> EntityDescription {
        ClassEntityRegistry.shared.entity(of: self)
    }

    // MARK: Typed fields

    /// The byte offset in `object` of the field `keyPath` names (a property wrapper's
    /// storage, a stored property of the object's class).
    ///
    /// Projecting a stored property through a reference-writable key path yields the
    /// property's own address; `ObjectLayoutTests` checks it against ``ClassFields``.
    /// Inlined where the key path is a literal, the projection is a field address and no
    /// key path object is made: the typed accessors call it on their slow paths only and
    /// pass the offset on.
    @inlinable @inline(__always)
    static func _fieldOffset<Object: ManagedObject, Field>(_ keyPath: ReferenceWritableKeyPath<Object, Field>, in object: Object) -> Int {
        let base = UnsafeMutableRawPointer(Unmanaged.passUnretained(object).toOpaque())
        return withUnsafeMutablePointer(to: &object[keyPath: keyPath]) { UnsafeMutableRawPointer($0) - base }
    }

    /// ``_fieldOffset(_:in:)`` of this object.
    func fieldOffset<Object: ManagedObject, Field>(_ keyPath: ReferenceWritableKeyPath<Object, Field>) -> Int {
        Self._fieldOffset(keyPath, in: unsafeDowncast(self, to: Object.self))
    }

    /// The attribute slot the field at `offset` holds in this object's entity; nil when
    /// the entity has no such attribute (or keeps it elsewhere).
    func attributeSlot(atOffset offset: Int) -> Int? {
        if case .attribute(let slot)? = _entity.layout.fieldSlots[offset] { return slot }
        return fieldSlotByName(offset, attributes: true)
    }

    /// The relationship slot the field at `offset` holds in this object's entity.
    @usableFromInline
    func relationshipSlot(atOffset offset: Int) -> Int? {
        if case .relationship(let slot)? = _entity.layout.fieldSlots[offset] { return slot }
        return fieldSlotByName(offset, attributes: false)
    }

    /// The slot of the entity property named as the class field at `offset`: for an
    /// entity that keeps that property in dynamic storage (a hand-built entity whose
    /// type differs from the class's declaration).
    private func fieldSlotByName(_ offset: Int, attributes: Bool) -> Int? {
        guard let field = ClassFields.of(type(of: self)).fields.first(where: { $0.offset == offset }) else { return nil }
        return attributes ? _entity.attributeSlots[field.name] : _entity.relationshipSlots[field.name]
    }

    /// A typed read that cannot be a plain field load: a fault to fire, an object whose
    /// values cannot be read (the default value then), a recording prototype, or an
    /// entity that keeps the attribute elsewhere.
    @usableFromInline
    final func _readAttributeSlowly<Value: AttributeStorable>(atOffset offset: Int) -> Value {
        let field = fieldPointer(at: offset, as: Attribute<Value>.self)
        let slot = attributeSlot(atOffset: offset)
        if _bits & ObjectBits.recording != 0, let recorder = _owner {
            let value = field.pointee.storage
            _ = recorder.recordRead(of: self, property: slot.map(PropertySlot.attribute), valueType: Value.self, destination: nil)
            recorder.recordReturned(value.attributeValue)
            return value
        }
        guard let slot else { return field.pointee.storage }
        guard fulfilIfNeeded(property: _entity.attributes[slot].name) else {
            return Value(attributeValue: _entity.layout.defaults[slot]) ?? field.pointee.storage
        }
        if case .field = _entity.layout.attributes[slot] { return field.pointee.storage }
        return Value(attributeValue: attributeValue(at: slot))
            ?? Value(attributeValue: _entity.layout.defaults[slot]) ?? field.pointee.storage
    }

    /// A typed write that cannot be a plain field store: change tracking (the object is in
    /// a context), a fault to fire first, a recording prototype, a failed edit to clear,
    /// or an entity that keeps the attribute elsewhere.
    @usableFromInline
    final func _writeAttributeSlowly<Value: AttributeStorable>(_ value: Value, atOffset offset: Int) {
        guard let slot = attributeSlot(atOffset: offset) else {
            // A property the entity does not have: kept in the field, never stored.
            fieldPointer(at: offset, as: Attribute<Value>.self).pointee.storage = value
            return
        }
        let attribute = _entity.attributes[slot]
        editRecordingFailure(key: attribute.name) { () throws(StrataError) in
            guard Value.attributeType == attribute.type else {
                // A hand-built entity that gives the property another type than the class.
                throw StrataError.typeMismatch(
                    key: attribute.name, entity: _entity.name, expected: attribute.type.swiftTypeName, actual: "\(Value.self)")
            }
            var converted: AttributeValue?
            if case .transformable(let type) = Value.attributeType {
                // A value that cannot be encoded, or whose encoding does not decode back,
                // is refused instead of being stored as nil or as bytes nothing can read.
                if let unwrapped = Self.flattened(value) {
                    converted = try TransformableCoding.checkedValue(unwrapped, as: type) { detail throws(StrataError) in
                        throw StrataError.typeMismatch(
                            key: attribute.name, entity: _entity.name, expected: attribute.type.swiftTypeName,
                            actual: "\(Swift.type(of: value))\(detail)")
                    }
                }
            } else {
                converted = value.attributeValue
            }
            // A fault that cannot be read keeps its stored values: writing over it would
            // save nil for every other attribute.
            if !fulfilIfNeeded(property: attribute.name) { try throwIfStorageFailed() }
            writeAttribute(slot, converted)
        }
    }

    /// The destinations of the relationship whose field `keyPath` names (loaded first).
    @usableFromInline
    func readRelationshipField<Value: RelationshipStorable>(atOffset offset: Int, as _: Value.Type) -> [ManagedObject] {
        let slot = relationshipSlot(atOffset: offset)
        if _bits & ObjectBits.recording != 0, let recorder = _owner {
            // A recording prototype goes on to its destination's prototype.
            return recorder.recordRead(
                of: self, property: slot.map(PropertySlot.relationship), valueType: Value.self,
                destination: Value.Destination.self).map { [$0] } ?? []
        }
        guard let slot, loadRelationshipIfNeeded(slot) else { return [] }
        return relationshipStorage(at: slot).objects
    }

    /// Sets the relationship whose field `keyPath` names to `objects`, keeping inverses in
    /// step; a failure is recorded (the next save fails with it).
    @usableFromInline
    func writeRelationshipField(_ objects: [ManagedObject], atOffset offset: Int) {
        guard let slot = relationshipSlot(atOffset: offset) else { return }
        editRecordingFailure(key: _entity.relationships[slot].name) { () throws(StrataError) in
            try setRelationship(slot, to: objects)
        }
    }
}

// MARK: - Deriving a class's entity

/// Captures what a class's property wrappers declare while a prototype of the class is
/// made (``ClassEntityRegistry``): the wrappers keep only their values, so their
/// arguments (indexing, validation, inverses) are recorded by their initialisers, and
/// only while a derivation is under way on the initialising thread.
@usableFromInline
enum EntityDerivation {
    /// How many derivations are under way, on any thread: the wrappers' initialisers test
    /// it (one relaxed load) before looking for a recording of their own thread.
    @usableFromInline static let activeCount = Atomic<Int>(0)

    /// Whether a derivation is under way somewhere.
    @inlinable static var isActive: Bool { activeCount.load(ordering: .relaxed) != 0 }

    /// One wrapper's declaration.
    struct Declaration {
        /// Where it is written.
        let site: DeclarationSite
        /// The wrapper's type (`Attribute<Int16>`), matched against the class's fields.
        let wrapperType: ObjectIdentifier
        /// The property, given its name.
        let make: (String) -> PropertyDescription
        /// A relationship's destination class.
        let destination: ManagedObject.Type?
    }

    /// The declarations recorded on one thread.
    final class Recording {
        var declarations: [Declaration] = []
    }

    /// The thread's recording, if a derivation is under way on it.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    private static func record(_ declaration: Declaration) {
        guard let pointer = pthread_getspecific(key) else { return }
        Unmanaged<Recording>.fromOpaque(pointer).takeUnretainedValue().declarations.append(declaration)
    }

    /// Records an `@Attribute` declaration.
    @usableFromInline
    static func recordAttribute<Value: AttributeStorable>(
        _: Value.Type, default defaultValue: Value, indexed: Bool, transient: Bool, validation: AttributeValidation?,
        renamingIdentifier: String?, preservesValueInHistoryOnDeletion: Bool = false, site: DeclarationSite
    ) {
        let stored = defaultValue.attributeValue
        record(Declaration(site: site, wrapperType: ObjectIdentifier(Attribute<Value>.self), make: { name in
            .attribute(AttributeDescription(
                name: name, type: Value.attributeType, isOptional: Value.isOptionalAttribute, defaultValue: stored,
                isIndexed: indexed, isTransient: transient, validation: validation ?? AttributeValidation(),
                renamingIdentifier: renamingIdentifier, preservesValueInHistoryOnDeletion: preservesValueInHistoryOnDeletion))
        }, destination: nil))
    }

    /// Records a `@Relationship` declaration.
    @usableFromInline
    static func recordRelationship<Value: RelationshipStorable>(
        _: Value.Type, inverse: String, deleteRule: DeleteRule, isOptional: Bool, minCount: Int, maxCount: Int?,
        renamingIdentifier: String?, site: DeclarationSite
    ) {
        let destinationName = Value.Destination.entityName
        record(Declaration(site: site, wrapperType: ObjectIdentifier(Relationship<Value>.self), make: { name in
            .relationship(RelationshipDescription(
                name: name, destinationEntityName: destinationName, inverseName: inverse,
                isToMany: Value.isToMany, isOrdered: Value.isOrdered, isOptional: isOptional,
                deleteRule: deleteRule, minCount: minCount, maxCount: maxCount, renamingIdentifier: renamingIdentifier))
        }, destination: Value.Destination.self))
    }

    /// Runs `body` (which makes a prototype) with a recording on this thread, and returns
    /// what it recorded, in the order the wrappers were initialised.
    static func recording(_ body: () -> Void) -> [Declaration] {
        let recording = Recording()
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(recording).toOpaque())
        activeCount.add(1, ordering: .relaxed)
        body()
        activeCount.subtract(1, ordering: .relaxed)
        pthread_setspecific(key, previous)
        return recording.declarations
    }
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
    /// Every declaration site of the class and its ancestors.
    let sites: Set<DeclarationSite>
}

/// The per-class cache of derived entities.
final class ClassEntityRegistry: Sendable {
    static let shared = ClassEntityRegistry()
    private let descriptions = LockedValue<[ObjectIdentifier: ClassDescription]>([:])

    /// The entity of `type`: the last one asked for on this thread, else the cache's.
    /// (`Item()` asks for it for every object: one thread-local load instead of a lock
    /// and a hash.)
    func entity(of type: ManagedObject.Type) -> EntityDescription {
        let last = LastEntity.ofThisThread
        if last.type == ObjectIdentifier(type), let entity = last.entity { return entity }
        let entity = description(of: type).entity
        last.type = ObjectIdentifier(type)
        last.entity = entity
        return entity
    }

    /// The class whose entity this thread asked for last, and that entity.
    private final class LastEntity {
        var type: ObjectIdentifier?
        var entity: EntityDescription?

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            // The thread's instance is released with the thread.
            pthread_key_create(&key) { pointer in
                if let pointer { Unmanaged<LastEntity>.fromOpaque(pointer).release() }
            }
            return key
        }()

        /// This thread's instance, made at its first use.
        static var ofThisThread: LastEntity {
            if let pointer = pthread_getspecific(key) { return Unmanaged<LastEntity>.fromOpaque(pointer).takeUnretainedValue() }
            let made = LastEntity()
            pthread_setspecific(key, Unmanaged.passRetained(made).toOpaque())
            return made
        }
    }

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

    /// Derives `type`'s entity: its own wrapper fields (from the runtime's field
    /// metadata, in declaration order) named and described by what their initialisers
    /// recorded while a prototype was made.
    private func derive(_ type: ManagedObject.Type) -> ClassDescription {
        var superclass: ManagedObject.Type?
        var ancestors: [EntityDescription] = []
        var inheritedSites: Set<DeclarationSite> = []
        var inheritedFieldCount = 0
        if let parent = Swift._getSuperclass(type) as? ManagedObject.Type, parent != ManagedObject.self {
            superclass = parent
            let parentDescription = description(of: parent)
            ancestors = [parentDescription.declared] + parentDescription.ancestors
            inheritedSites = parentDescription.sites
            inheritedFieldCount = ClassFields.of(parent).count
        }
        let ownFields = Array(ClassFields.of(type).fields.dropFirst(inheritedFieldCount))
        let placeholder = EntityDescription(name: type.entityName, managedObjectClass: type)
        let recorded = EntityDerivation.recording { _ = type.init(entity: placeholder) }
            .filter { !inheritedSites.contains($0.site) }
        let declarations = Self.match(ownFields, with: recorded)

        var attributes: [AttributeDescription] = []
        var relationships: [RelationshipDescription] = []
        var sites: [DeclarationSite: String] = [:]
        var destinations: [ManagedObject.Type] = []
        for (field, declaration) in zip(ownFields, declarations) {
            guard let declaration else { continue }
            switch declaration.make(field.name) {
            case .attribute(let attribute): attributes.append(attribute)
            case .relationship(let relationship): relationships.append(relationship)
            }
            sites[declaration.site] = field.name
            if let destination = declaration.destination { destinations.append(destination) }
        }
        let declared = EntityDescription(
            // A subclass inherits its superclass's `isAbstractEntity`: the entity is abstract
            // only where the answer changes to true, so sub-entities of an abstract
            // entity are concrete without having to say so.
            name: type.entityName, superentityName: superclass?.entityName,
            isAbstract: type.isAbstractEntity && !(superclass?.isAbstractEntity ?? false),
            managedObjectClass: type, declaredAttributes: attributes, declaredRelationships: relationships,
            declaredUniquenessConstraints: type.uniquenessConstraints.filter { !(superclass?.uniquenessConstraints ?? []).contains($0) },
            // A class var is inherited: a subclass has a renaming identifier of its own only where it differs.
            renamingIdentifier: type.renamingIdentifier == superclass?.renamingIdentifier ? nil : type.renamingIdentifier,
            declarationSites: sites, ancestors: [], subentityNames: [])
        return ClassDescription(
            declared: declared, entity: EntityDescription(resolving: declared, ancestors: ancestors, subentityNames: []),
            superclass: superclass, destinations: destinations, ancestors: ancestors,
            sites: inheritedSites.union(sites.keys))
    }

    /// The declaration of each of `fields` (a class's own wrapper fields, in declaration
    /// order) among `recorded`: the declarations of one source file, in source order,
    /// matched to the fields in order by wrapper type. Source order is declaration order
    /// whatever order an initialiser ran them in; one file holds a class's declarations,
    /// and a declaration of another class (a managed object made by a default value)
    /// is skipped. Recorded order is the fallback.
    private static func match(_ fields: [ClassFields.Field], with recorded: [EntityDerivation.Declaration]) -> [EntityDerivation.Declaration?] {
        func greedy(_ candidates: [EntityDerivation.Declaration]) -> [EntityDerivation.Declaration?] {
            var next = candidates.startIndex
            return fields.map { field in
                while next < candidates.endIndex {
                    let candidate = candidates[next]
                    next += 1
                    if candidate.wrapperType == field.wrapperType { return candidate }
                }
                return nil
            }
        }
        let byFile = Dictionary(grouping: recorded, by: \.site.file)
        for file in byFile.keys.sorted() {
            let inSourceOrder = byFile[file]!.sorted { ($0.site.line, $0.site.column) < ($1.site.line, $1.site.column) }
            let matched = greedy(inSourceOrder)
            if !matched.contains(where: { $0 == nil }) { return matched }
        }
        return greedy(recorded)
    }
}
