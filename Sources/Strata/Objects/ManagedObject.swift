import Foundation

/// An object of an entity, confined to the context it lives in.
///
/// `ManagedObject` is deliberately **not** `Sendable`: the compiler rejects returning one
/// from `perform`, capturing it in a `Task` or handing it to another context. What
/// crosses contexts is its ``objectID``.
///
/// Use it directly with a dynamic model, reading and writing through
/// ``value(forKey:)`` and ``setValue(_:forKey:)``, or subclass it and declare each
/// property once with ``Attribute`` and ``Relationship``; the entity is then derived
/// from the subclass:
///
/// ```swift
/// final class Note: ManagedObject {
///     @Attribute(indexed: true) var title: String = ""
///     @Attribute var priority: Int16 = 0
///     @Relationship(inverse: "notes") var folder: Folder?
/// }
/// ```
///
/// An object starts as a *fault* when a context hands out a reference to a row it has
/// not read yet: it holds only its ID and reads its values from its context on the first
/// access to any property. Reading ``objectID`` or ``entity`` never fires a fault.
///
/// Setting one side of a relationship updates the inverse side in memory at once.
///
/// Objects are equal only to themselves (identity), as a context keeps one instance per
/// object ID.
open class ManagedObject: Hashable, CustomStringConvertible {
    /// The object's identity: temporary until it is saved, then permanent.
    ///
    /// In a parent–child tree of contexts, an object that was inserted in one context
    /// and saved up to the root reads its permanent ID in every context of the tree that
    /// has it registered, as soon as the root's save returns.
    public internal(set) var objectID: ManagedObjectID {
        get {
            // A temporary ID may have become permanent in another context of the tree.
            if storedObjectID.isTemporaryID, let owner { owner.adoptPermanentIDsIfNeeded() }
            return storedObjectID
        }
        set { storedObjectID = newValue }
    }
    /// The ID as last set.
    var storedObjectID: ManagedObjectID
    /// The object's entity.
    public internal(set) var entity: EntityDescription

    /// The context's object store (nil when the object is in no context). Weak: a
    /// context holds its objects, never the other way round.
    weak var owner: (any ManagedObjectOwner)?
    /// Attribute values by slot (see ``EntityDescription/attributes``).
    var attributeValues: [AttributeValue?]
    /// Relationship values by slot (see ``EntityDescription/relationships``).
    var relationshipValues: [RelationshipStorage]
    /// The values as last fetched or saved; nil for an object never saved.
    var committed: CommittedState?
    /// The row version the committed values were read at (0: never saved).
    var rowVersion: UInt64 = 0
    var faultState: FaultState = .fulfilled
    /// Why the last attempt to read the object's values (or a to-many relationship's
    /// destinations) failed, when the store could not be read (an I/O error, a full
    /// reader table, a terminal store): the object stays a fault, and accessors report
    /// this instead of an inaccessible fault. Nil once a read succeeds.
    var faultFailure: StrataError? {
        get { rare?.faultFailure }
        set {
            guard newValue != nil || rare != nil else { return }
            rareState.faultFailure = newValue
        }
    }
    /// State few objects ever have (a storage failure, an edit that did not happen), in a
    /// side allocation: one word per object instead of an optional error's 72 bytes each
    /// (DESIGN.md, "Object layout and cost").
    var rare: RareObjectState?
    /// ``rare``, made when needed.
    var rareState: RareObjectState {
        if let rare { return rare }
        let made = RareObjectState()
        rare = made
        return made
    }
    /// Whether a property was set since the last save (persistent or transient).
    var isModified = false
    var insertedFlag = false
    var deletedFlag = false
    /// Which change sets of the context's next ObjectsDidChange notification the object
    /// is already in (``ChangeEvent``): a bit per set, so recording a change is O(1).
    var eventMarks: UInt8 = 0

    /// A new object of `entity` with its default values and a temporary ID, in no context.
    ///
    /// `entity` should come from the ``ManagedObjectModel`` of the context you insert the
    /// object into (`model.entitiesByName["Note"]`), or, for a typed subclass, from
    /// ``entity()``. Subclasses that add a designated initialiser must also implement
    /// this one: contexts create objects through it.
    public required init(entity: EntityDescription) {
        self.entity = entity
        storedObjectID = ManagedObjectID(temporaryFor: entity.name)
        attributeValues = entity.attributes.map(\.defaultValue)
        relationshipValues = entity.relationships.map { $0.isToMany ? .toMany(ToManyStorage(isOrdered: $0.isOrdered)) : .toOne(nil) }
    }

    /// A new object of the subclass's entity (``entity()``) with its default values.
    public convenience init() {
        self.init(entity: Self.entity())
    }

    // MARK: Entity of a subclass

    /// The name of the entity a subclass derives (``entity()``): the class's name
    /// unless overridden.
    open class var entityName: String { String(describing: self) }

    /// Whether the entity a subclass derives is abstract (it has objects only through
    /// its own subclasses). False unless overridden.
    ///
    /// Subclasses inherit the override, so the entity of a subclass of an abstract class
    /// is concrete: only the class where the answer turns true is abstract. (An abstract
    /// entity directly below another abstract one cannot be declared this way; describe
    /// such a model with ``EntityDescription``s.)
    open class var isAbstractEntity: Bool { false }

    // MARK: State

    /// Whether the object was inserted into its context and not saved yet.
    public var isInserted: Bool { insertedFlag }

    /// Whether the object will be deleted from the store at the next save.
    public var isDeleted: Bool { deletedFlag }

    /// Whether the object, registered in a context, was changed since it was last
    /// fetched or saved (transient changes included: see ``hasPersistentChangedValues``).
    public var isUpdated: Bool { isModified && !insertedFlag && !deletedFlag && owner != nil }

    /// Whether the object is inserted, updated or deleted.
    public var hasChanges: Bool { insertedFlag || deletedFlag || isUpdated }

    /// Whether the object's values have not been read yet. Reading ``objectID`` does not
    /// change this; reading any property does.
    public var isFault: Bool { faultState == .fault }

    /// Whether a persistent (non-transient) property differs from its committed value.
    public var hasPersistentChangedValues: Bool {
        guard faultState == .fulfilled else { return false }
        for (slot, attribute) in entity.attributes.enumerated() where !attribute.isTransient {
            if attributeValues[slot] != committed?.attributes[slot] ?? nil { return true }
        }
        for slot in entity.relationships.indices where relationshipChanged(slot) { return true }
        return false
    }

    // MARK: Lifecycle hooks

    /// Called once when the object is first inserted into a context. Set initial values
    /// here (they do not count as a user change for undo).
    open func awakeFromInsert() {}

    /// Called after the object's values were read from the store (its fault fulfilled).
    open func awakeFromFetch() {}

    /// Called before the object is saved; it may still change values.
    open func willSave() {}

    /// Called after the object was saved (or its deletion committed).
    open func didSave() {}

    /// Called when the object is deleted from its context, before delete rules run.
    open func prepareForDeletion() {}

    /// Called before the object is turned back into a fault.
    open func willTurnIntoFault() {}

    /// Called after the object was turned into a fault; its values are released.
    open func didTurnIntoFault() {}


    // MARK: Validation

    /// Checks one property's value against the model's rules: required values, integer
    /// ranges, numeric minimum and maximum, string length and pattern, date range, and a
    /// to-many relationship's counts.
    ///
    /// Override it to add rules of your own; call `super` to keep the model's, and throw
    /// ``StrataError/validation(_:)`` (or any error, which is reported as a custom
    /// failure) for a bad value.
    ///
    /// - Throws: ``StrataError/validation(_:)`` listing every rule the value breaks.
    open func validateValue(_ value: Any?, forKey key: String) throws {
        try validateModelRules(value, forKey: key)
    }

    /// Checks the object before it is first saved: every property through
    /// ``validateValue(_:forKey:)``.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every failure of every property.
    open func validateForInsert() throws {
        try validateAllProperties()
    }

    /// Checks a changed object before it is saved: every property through
    /// ``validateValue(_:forKey:)``.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every failure of every property.
    open func validateForUpdate() throws {
        try validateAllProperties()
    }

    /// Checks that the object may be deleted: no relationship with the ``DeleteRule/deny``
    /// rule may still refer to an object.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every denying relationship.
    open func validateForDelete() throws {
        try validateDeleteRules()
    }

    // MARK: Hashable

    /// Identity: an object equals only itself.
    public static func == (lhs: ManagedObject, rhs: ManagedObject) -> Bool { lhs === rhs }

    /// Hashes the object's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// `Note <x-strata://…/Note/p42> (fault)`.
    open var description: String {
        var flags: [String] = []
        if isFault { flags.append("fault") }
        if isInserted { flags.append("inserted") }
        if isUpdated { flags.append("updated") }
        if isDeleted { flags.append("deleted") }
        return "\(entity.name) <\(objectID)>" + (flags.isEmpty ? "" : " (\(flags.joined(separator: ", ")))")
    }
}

/// The values of an object as last fetched or saved.
/// What an object rarely needs to remember (see ``ManagedObject/rare``).
final class RareObjectState {
    /// See ``ManagedObject/faultFailure``.
    var faultFailure: StrataError?
    /// Edits asked for through setters that cannot throw and that did not happen while
    /// the object was in no context (a value that cannot be stored): its context takes
    /// them over when the object is inserted, and its next save fails with the first.
    var failedEdits: [(key: String, error: StrataError)] = []
}

struct CommittedState {
    var attributes: [AttributeValue?]
    var relationships: [RelationshipStorage]
}

/// Whether an object's values are in memory.
enum FaultState {
    /// Values are in memory.
    case fulfilled
    /// Only the ID is known; the first property access reads the values.
    case fault
    /// Fulfilment failed (the row is gone): reads return nil or defaults.
    case inaccessible
}
