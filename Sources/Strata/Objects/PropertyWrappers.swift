/// Declares an attribute of a ``ManagedObject`` subclass, once, in Swift.
///
/// The property's name is the attribute's name; its Swift type gives the attribute type
/// (see ``AttributeStorable``) and whether it is optional; its initial value is the
/// default value:
///
/// ```swift
/// final class Note: ManagedObject {
///     @Attribute(indexed: true) var title: String = ""
///     @Attribute(validation: AttributeValidation(minimum: 0, maximum: 5)) var priority: Int16 = 0
///     @Attribute var body: String?
///     @Attribute(transient: true) var isSelected: Bool = false
/// }
/// ```
///
/// The value lives in the wrapper, inside the object: reading the property of an object
/// whose values are in memory is a test of the object's state and a load of the field.
/// Reading it fires the object's fault first. A value that cannot be read (the object's
/// row is gone) reads as the default value.
///
/// The declaration's arguments (indexing, validation, transience) describe the entity,
/// which is derived once per class (``ManagedObject/entity()``); no object keeps them.
@propertyWrapper
public struct Attribute<Value: AttributeStorable> {
    /// The property's value (``ObjectLayout``: the object's typed field for the attribute).
    @usableFromInline var storage: Value

    /// Declares an attribute whose default value is the property's initial value.
    ///
    /// - Parameters:
    ///   - wrappedValue: the property's initial value, which is also the attribute's default.
    ///   - indexed: whether the store keeps an index on the attribute.
    ///   - transient: a transient attribute lives in memory only.
    ///   - validation: the rules values must satisfy when the object is saved.
    ///   - renamingIdentifier: the attribute's name in an earlier model version, so that a
    ///     migration carries its stored values over (``AttributeDescription/renamingIdentifier``).
    ///   - preservesValueInHistoryOnDeletion: whether persistent history keeps the value
    ///     of a deleted object (``AttributeDescription/preservesValueInHistoryOnDeletion``).
    ///   - fileID: where the property is declared (do not pass it: it tells the
    ///     declarations of a class apart when its entity is derived).
    ///   - line: see `fileID`.
    ///   - column: see `fileID`.
    @inlinable
    public init(
        wrappedValue: Value, indexed: Bool = false, transient: Bool = false, validation: AttributeValidation? = nil,
        renamingIdentifier: String? = nil, preservesValueInHistoryOnDeletion: Bool = false,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) {
        storage = wrappedValue
        if _slowPath(EntityDerivation.isActive) {
            EntityDerivation.recordAttribute(
                Value.self, default: wrappedValue, indexed: indexed, transient: transient, validation: validation,
                renamingIdentifier: renamingIdentifier, preservesValueInHistoryOnDeletion: preservesValueInHistoryOnDeletion,
                site: DeclarationSite(fileID: fileID, line: line, column: column))
        }
    }

    /// Declares an optional attribute whose default value is nil.
    ///
    /// - Parameters: as ``init(wrappedValue:indexed:transient:validation:renamingIdentifier:preservesValueInHistoryOnDeletion:fileID:line:column:)``.
    @inlinable
    public init(
        indexed: Bool = false, transient: Bool = false, validation: AttributeValidation? = nil,
        renamingIdentifier: String? = nil, preservesValueInHistoryOnDeletion: Bool = false,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) where Value: ExpressibleByNilLiteral {
        self.init(
            wrappedValue: nil, indexed: indexed, transient: transient, validation: validation,
            renamingIdentifier: renamingIdentifier, preservesValueInHistoryOnDeletion: preservesValueInHistoryOnDeletion,
            fileID: fileID, line: line, column: column)
    }

    /// Reads and writes go through the enclosing object (see `_enclosingInstance`).
    @available(*, unavailable, message: "@Attribute can only be used on ManagedObject subclasses")
    public var wrappedValue: Value {
        get { preconditionFailure("@Attribute can only be used on ManagedObject subclasses") }
        // swiftlint:disable:next unused_setter_value
        set { preconditionFailure("@Attribute can only be used on ManagedObject subclasses") }
    }

    /// The property's value, read from and written to the enclosing object.
    ///
    /// An object whose values are in memory, whose changes nobody tracks yet (it is in no
    /// context), is read and written in place. Everything else (a fault to fire, change
    /// tracking, a recording prototype) takes the slow path.
    /// Always inlined, so that the key paths are the caller's literals and the field
    /// access compiles to an offset (a key path passed to an outlined copy is applied
    /// by the runtime, some 1,200 instructions a write).
    @inlinable @inline(__always)
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            if _slowPath(object._bits & ObjectBits.slowRead != 0) {
                return object._readAttributeSlowly(atOffset: ManagedObject._fieldOffset(storageKeyPath, in: object))
            }
            return object[keyPath: storageKeyPath].storage
        }
        set {
            if _slowPath(object._bits & ObjectBits.slowWrite != 0 || Value._isTransformable) {
                object._writeAttributeSlowly(newValue, atOffset: ManagedObject._fieldOffset(storageKeyPath, in: object))
                return
            }
            object[keyPath: storageKeyPath].storage = newValue
        }
    }
}

/// Declares a relationship of a ``ManagedObject`` subclass, once, in Swift.
///
/// The property's type says what kind of relationship it is: `Destination?` is to-one,
/// `Set<Destination>` to-many, `[Destination]` ordered to-many. Name the inverse
/// relationship of the destination class; the model checks that it points back.
///
/// ```swift
/// final class Folder: ManagedObject {
///     @Attribute var name: String = ""
///     @Relationship(inverse: "folder", deleteRule: .cascade) var notes: Set<Note>
/// }
/// final class Note: ManagedObject {
///     @Relationship(inverse: "notes") var folder: Folder?
///     @Relationship(inverse: "notes") var tags: Set<Tag>      // many-to-many
/// }
/// ```
///
/// Assigning the property updates the inverse side of every object involved. The
/// projected value (`$notes`) adds and removes single objects without copying the set.
@propertyWrapper
public struct Relationship<Value: RelationshipStorable> {
    /// The destinations (``ObjectLayout``: the object's typed field for the relationship).
    var storage: RelationshipStorage

    /// Declares a relationship.
    ///
    /// - Parameters:
    ///   - inverse: the name of the destination's relationship pointing back.
    ///   - deleteRule: what deleting this object does to its destinations.
    ///   - isOptional: whether a to-one may be nil (a to-many empty) when saved.
    ///   - minCount: the fewest destinations a to-many must hold when saved.
    ///   - maxCount: the most destinations a to-many may hold when saved.
    ///   - renamingIdentifier: the relationship's name in an earlier model version, so that a
    ///     migration carries its links over (``RelationshipDescription/renamingIdentifier``).
    ///   - fileID: where the property is declared (do not pass it: it tells the
    ///     declarations of a class apart when its entity is derived).
    ///   - line: see `fileID`.
    ///   - column: see `fileID`.
    public init(
        inverse: String, deleteRule: DeleteRule = .nullify, isOptional: Bool = true,
        minCount: Int = 0, maxCount: Int? = nil, renamingIdentifier: String? = nil,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) {
        storage = Value.isToMany ? .toMany(ToManyStorage(isOrdered: Value.isOrdered)) : .toOne(nil)
        if _slowPath(EntityDerivation.isActive) {
            EntityDerivation.recordRelationship(
                Value.self, inverse: inverse, deleteRule: deleteRule, isOptional: isOptional,
                minCount: minCount, maxCount: maxCount, renamingIdentifier: renamingIdentifier,
                site: DeclarationSite(fileID: fileID, line: line, column: column))
        }
    }

    /// Reads and writes go through the enclosing object (see `_enclosingInstance`).
    @available(*, unavailable, message: "@Relationship can only be used on ManagedObject subclasses")
    public var wrappedValue: Value {
        get { preconditionFailure("@Relationship can only be used on ManagedObject subclasses") }
        // swiftlint:disable:next unused_setter_value
        set { preconditionFailure("@Relationship can only be used on ManagedObject subclasses") }
    }

    /// Edits the relationship one object at a time.
    @available(*, unavailable, message: "@Relationship can only be used on ManagedObject subclasses")
    public var projectedValue: RelationshipEditor<Value.Destination> {
        preconditionFailure("@Relationship can only be used on ManagedObject subclasses")
    }

    /// The property's value, read from and written to the enclosing object (inlined, so
    /// that the field offset is the caller's constant: see ``Attribute``).
    @inlinable @inline(__always)
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            Value(managedObjects: object.readRelationshipField(atOffset: ManagedObject._fieldOffset(storageKeyPath, in: object), as: Value.self))
        }
        set { object.writeRelationshipField(newValue.managedObjects, atOffset: ManagedObject._fieldOffset(storageKeyPath, in: object)) }
    }

    /// An editor of the relationship (`object.$notes`).
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        projected projectedKeyPath: KeyPath<Object, RelationshipEditor<Value.Destination>>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> RelationshipEditor<Value.Destination> {
        RelationshipEditor(object: object, slot: object.relationshipSlot(atOffset: ManagedObject._fieldOffset(storageKeyPath, in: object)))
    }
}

/// A Swift type a ``Relationship`` property can have: `Destination?` (to-one),
/// `Set<Destination>` (to-many) or `[Destination]` (ordered to-many).
public protocol RelationshipStorable {
    /// The destination class.
    associatedtype Destination: ManagedObject
    /// Whether the relationship is to-many.
    static var isToMany: Bool { get }
    /// Whether a to-many relationship keeps its order.
    static var isOrdered: Bool { get }
    /// The value holding `managedObjects` (those of the destination class).
    init(managedObjects: [ManagedObject])
    /// The objects the value holds.
    var managedObjects: [ManagedObject] { get }
}

extension Optional: RelationshipStorable where Wrapped: ManagedObject {
    /// The wrapped class.
    public typealias Destination = Wrapped
    /// To-one.
    public static var isToMany: Bool { false }
    /// Not ordered.
    public static var isOrdered: Bool { false }
    /// The first object, if any.
    public init(managedObjects: [ManagedObject]) { self = managedObjects.first as? Wrapped }
    /// The object, if any.
    public var managedObjects: [ManagedObject] { self.map { [$0] } ?? [] }
}

extension Set: RelationshipStorable where Element: ManagedObject {
    /// The element class.
    public typealias Destination = Element
    /// To-many.
    public static var isToMany: Bool { true }
    /// Not ordered.
    public static var isOrdered: Bool { false }
    /// The objects as a set.
    public init(managedObjects: [ManagedObject]) { self.init(managedObjects.compactMap { $0 as? Element }) }
    /// The objects.
    public var managedObjects: [ManagedObject] { Array(self) }
}

extension Array: RelationshipStorable where Element: ManagedObject {
    /// The element class.
    public typealias Destination = Element
    /// To-many.
    public static var isToMany: Bool { true }
    /// Ordered.
    public static var isOrdered: Bool { true }
    /// The objects in order.
    public init(managedObjects: [ManagedObject]) { self = managedObjects.compactMap { $0 as? Element } }
    /// The objects in order.
    public var managedObjects: [ManagedObject] { self }
}

/// Edits one relationship of an object one destination at a time, keeping inverses in
/// step: `folder.$notes.insert(note)`. For a to-one relationship, `insert` sets it and
/// `remove` clears it when it holds that object.
public struct RelationshipEditor<Destination: ManagedObject> {
    let object: ManagedObject
    let slot: Int?

    /// The number of destinations.
    public var count: Int {
        guard let slot, object.loadRelationshipIfNeeded(slot) else { return 0 }
        return object.relationshipStorage(at: slot).count
    }

    /// Whether `destination` is one of the destinations.
    public func contains(_ destination: Destination) -> Bool {
        guard let slot, object.loadRelationshipIfNeeded(slot) else { return false }
        return object.relationshipStorage(at: slot).contains(destination)
    }

    /// Adds `destination` (at the end of an ordered relationship).
    ///
    /// When the store cannot be read for the change (the object's fault, the
    /// relationship, or `destination`'s inverse side), nothing changes and the context's
    /// next save fails with that storage error.
    public func insert(_ destination: Destination) {
        guard let slot else { return }
        let object = object
        object.editRecordingFailure(key: object.entity.relationships[slot].name) { () throws(StrataError) in
            if object.entity.relationships[slot].isToMany {
                try object.addDestination(destination, slot: slot, at: nil)
            } else {
                try object.setToOne(slot, to: destination)
            }
        }
    }

    /// Inserts `destination` at `index` (clamped) of an ordered relationship, moving it
    /// when it is already there; appends to an unordered one. Storage failures as
    /// ``insert(_:)``.
    public func insert(_ destination: Destination, at index: Int) {
        guard let slot else { return }
        let relationship = object.entity.relationships[slot]
        guard relationship.isToMany else { return insert(destination) }
        let object = object
        object.editRecordingFailure(key: relationship.name) { () throws(StrataError) in
            try object.addDestination(destination, slot: slot, at: relationship.isOrdered ? index : nil)
        }
    }

    /// Removes `destination`. Storage failures as ``insert(_:)``.
    public func remove(_ destination: Destination) {
        guard let slot else { return }
        let object = object
        object.editRecordingFailure(key: object.entity.relationships[slot].name) { () throws(StrataError) in
            if object.entity.relationships[slot].isToMany {
                try object.removeDestination(destination, slot: slot)
            } else {
                try object.readForEdit(slot)
                if object.relationshipStorage(at: slot).first === destination { try object.setToOne(slot, to: nil) }
            }
        }
    }
}
