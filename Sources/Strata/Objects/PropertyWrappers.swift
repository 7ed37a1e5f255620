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
/// Reading the property fires the object's fault. A value that cannot be read (the
/// object's row is gone) reads as the default value.
@propertyWrapper
public struct Attribute<Value: AttributeStorable> {
    let site: DeclarationSite
    let defaultValue: Value
    let isIndexed: Bool
    let isTransient: Bool
    let rules: Rules

    /// Validation rules, boxed so that a property without any costs one word per object.
    enum Rules {
        case none
        indirect case some(AttributeValidation)
    }

    /// Declares an attribute whose default value is the property's initial value.
    ///
    /// - Parameters:
    ///   - indexed: whether the store keeps an index on the attribute.
    ///   - transient: a transient attribute lives in memory only.
    ///   - validation: the rules values must satisfy when the object is saved.
    public init(
        wrappedValue: Value, indexed: Bool = false, transient: Bool = false, validation: AttributeValidation? = nil,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) {
        site = DeclarationSite(fileID: fileID, line: line, column: column)
        defaultValue = wrappedValue
        isIndexed = indexed
        isTransient = transient
        rules = validation.map(Rules.some) ?? .none
    }

    /// Declares an optional attribute whose default value is nil.
    public init(
        indexed: Bool = false, transient: Bool = false, validation: AttributeValidation? = nil,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) where Value: ExpressibleByNilLiteral {
        self.init(
            wrappedValue: nil, indexed: indexed, transient: transient, validation: validation,
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
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            let wrapper = object[keyPath: storageKeyPath]
            return object.readAttribute(at: wrapper.site, default: wrapper.defaultValue)
        }
        set {
            let site = object[keyPath: storageKeyPath].site
            if case .transformable(let type) = Value.attributeType {
                object.writeTransformable(at: site, newValue, type: type)
            } else {
                object.writeAttribute(at: site, newValue.attributeValue)
            }
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
    let site: DeclarationSite
    let inverseName: String
    let deleteRule: DeleteRule
    let isOptional: Bool
    let minCount: Int
    let maxCount: Int?

    /// Declares a relationship.
    ///
    /// - Parameters:
    ///   - inverse: the name of the destination's relationship pointing back.
    ///   - deleteRule: what deleting this object does to its destinations.
    ///   - isOptional: whether a to-one may be nil (a to-many empty) when saved.
    ///   - minCount: the fewest destinations a to-many must hold when saved.
    ///   - maxCount: the most destinations a to-many may hold when saved.
    public init(
        inverse: String, deleteRule: DeleteRule = .nullify, isOptional: Bool = true,
        minCount: Int = 0, maxCount: Int? = nil,
        fileID: StaticString = #fileID, line: UInt = #line, column: UInt = #column
    ) {
        site = DeclarationSite(fileID: fileID, line: line, column: column)
        inverseName = inverse
        self.deleteRule = deleteRule
        self.isOptional = isOptional
        self.minCount = minCount
        self.maxCount = maxCount
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

    /// The property's value, read from and written to the enclosing object.
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            Value(managedObjects: object.readRelationship(
                at: object[keyPath: storageKeyPath].site, valueType: Value.self, destination: Value.Destination.self))
        }
        set { object.writeRelationship(at: object[keyPath: storageKeyPath].site, newValue.managedObjects) }
    }

    /// An editor of the relationship (`object.$notes`).
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        projected projectedKeyPath: KeyPath<Object, RelationshipEditor<Value.Destination>>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> RelationshipEditor<Value.Destination> {
        RelationshipEditor(object: object, slot: object.relationshipSlot(at: object[keyPath: storageKeyPath].site))
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
        return object.relationshipValues[slot].objects.count
    }

    /// Whether `destination` is one of the destinations.
    public func contains(_ destination: Destination) -> Bool {
        guard let slot, object.loadRelationshipIfNeeded(slot) else { return false }
        if case .toMany(let storage) = object.relationshipValues[slot] { return storage.contains(destination) }
        return object.relationshipValues[slot].objects.first === destination
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
                if object.relationshipValues[slot].objects.first === destination { try object.setToOne(slot, to: nil) }
            }
        }
    }
}
