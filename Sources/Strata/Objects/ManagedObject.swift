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
///
/// ## Layout
///
/// An object is a small header (its state flags, its row's store, primary key and
/// version, its context and its entity) followed by its subclass's fields: each
/// `@Attribute` keeps its value in its own typed field, so a typed read is a flag test
/// and a field load. What few objects need (a committed copy of a saved object that
/// changed, a read failure, the values of an entity used through key-value access) lives
/// in a side allocation made when needed. The ``objectID`` is made when asked for.
open class ManagedObject: Hashable, CustomStringConvertible {
    // The header's stored properties opt out of the runtime's exclusivity checks: an
    // object lives in one isolation domain (it is not Sendable), its state changes only
    // through this class's own short, non-overlapping accesses, and a dynamic check on
    // every flag test would cost more than the typed access it guards (a tenth of a
    // bulk import, measured with make profile).

    /// The state flags (``ObjectBits``): read by the typed accessors' fast paths.
    @exclusivity(unchecked) @usableFromInline final var _bits: UInt32
    /// The number of the row's store (``StoreNumbers``); 0 for a temporary ID.
    @exclusivity(unchecked) final var storeNumber: UInt32 = 0
    /// The row's primary key; for a temporary ID, its serial (0 until one is needed).
    @exclusivity(unchecked) final var rowKey: UInt64 = 0
    /// The row version the committed values were read at (0: never saved).
    @exclusivity(unchecked) final var rowVersion: UInt64 = 0
    /// The context's object graph (or a key-path recorder) that registered the object;
    /// nil when the object is in no context. Not counted: a context holds its objects,
    /// never the other way round, and an owner sets this to nil in every object it owns
    /// before it goes (``ObjectOwner``), so it never dangles. (A weak reference would give
    /// every object a side table: a malloc and a free, and an atomic load per read.)
    unowned(unsafe) final var _owner: ObjectOwner?
    /// See ``entity``.
    @exclusivity(unchecked) private(set) final var _entity: EntityDescription
    /// What few objects need (``ObjectSide``).
    @exclusivity(unchecked) final var side: ObjectSide?

    /// A new object of `entity` with its default values and a temporary ID, in no context.
    ///
    /// `entity` should come from the ``ManagedObjectModel`` of the context you insert the
    /// object into (`model.entitiesByName["Note"]`), or, for a typed subclass, from
    /// ``entity()``. Subclasses that add a designated initialiser must also implement
    /// this one: contexts create objects through it.
    public required init(entity: EntityDescription) {
        _entity = entity
        let layout = entity.layout
        _bits = ObjectBits.settled(ObjectBits.temporary | (layout.typedFieldsAreExact ? 0 : ObjectBits.inexactFields))
        if layout.usesDynamicStorage {
            let side = ObjectSide()
            side.attributes = Array(repeating: nil, count: layout.dynamicAttributeCount)
            side.relationships = Array(repeating: .notLoaded, count: layout.dynamicRelationshipCount)
            self.side = side
            for (slot, place) in layout.attributes.enumerated() {
                if case .dynamic(let index) = place { side.attributes[index] = layout.defaults[slot] }
            }
            for (slot, place) in layout.relationships.enumerated() {
                if case .dynamic(let index) = place { side.relationships[index] = .empty(for: entity.relationships[slot]) }
            }
        }
        if layout.writesDefaultsAtInit {
            for (slot, place) in layout.attributes.enumerated() {
                if case .field = place { storeAttribute(layout.defaults[slot], at: slot) }
            }
        }
    }

    /// A new object of the subclass's entity (``entity()``) with its default values.
    public convenience init() {
        self.init(entity: Self.entity())
    }

    deinit {
        if _bits & ObjectBits.owned != 0, let owner = _owner { owner.objectWillDeinit(key: identityKey, object: ObjectIdentifier(self)) }
    }

    // MARK: Identity

    /// The object's identity: temporary until it is saved, then permanent.
    ///
    /// In a parent–child tree of contexts, an object that was inserted in one context
    /// and saved up to the root reads its permanent ID in every context of the tree that
    /// has it registered, as soon as the root's save returns.
    public internal(set) var objectID: ManagedObjectID {
        get {
            if _bits & ObjectBits.temporary != 0 {
                // A temporary ID may have become permanent in another context of the tree.
                if let owner = _owner { owner.adoptPermanentIDsIfNeeded() }
                if _bits & ObjectBits.temporary != 0 {
                    return ManagedObjectID(temporary: temporaryUUID, entityName: _entity.name)
                }
            }
            return ManagedObjectID(storeNumber: storeNumber, entityName: _entity.name, primaryKey: rowKey)
        }
        set { assignID(newValue) }
    }

    /// The ID as last assigned, without adopting a permanent ID made elsewhere in the tree.
    var storedObjectID: ManagedObjectID {
        _bits & ObjectBits.temporary != 0
            ? ManagedObjectID(temporary: temporaryUUID, entityName: _entity.name)
            : ManagedObjectID(storeNumber: storeNumber, entityName: _entity.name, primaryKey: rowKey)
    }

    /// Whether the object's ID is temporary (it was never saved).
    var hasTemporaryID: Bool { _bits & ObjectBits.temporary != 0 }

    /// The UUID of the object's temporary ID.
    private var temporaryUUID: UUID {
        if let foreign = side?.temporaryUUID { return foreign }
        return TemporaryIDs.uuid(serial: temporarySerial)
    }

    /// The serial of the object's temporary ID, made at first need.
    private var temporarySerial: UInt64 {
        if rowKey == 0 { rowKey = TemporaryIDs.nextSerial() }
        return rowKey
    }

    /// Gives the object `id` (its permanent ID after a save, or the ID of the row it
    /// stands for). The owner's registration is the owner's to move.
    func assignID(_ id: ManagedObjectID) {
        switch id.identity {
        case .permanent(let store, let key):
            storeNumber = StoreNumbers.number(for: store)
            rowKey = key
            _bits &= ~ObjectBits.temporary
            side?.temporaryUUID = nil
        case .temporary(let uuid):
            storeNumber = 0
            _bits |= ObjectBits.temporary
            if let serial = TemporaryIDs.serial(of: uuid) {
                rowKey = serial
                side?.temporaryUUID = nil
            } else {
                rowKey = 0
                sideState.temporaryUUID = uuid
            }
        }
    }

    /// Gives the object the permanent ID of row `primaryKey` of the store numbered `store`.
    func assignPermanentKey(store: UInt32, primaryKey: UInt64) {
        storeNumber = store
        rowKey = primaryKey
        _bits &= ~ObjectBits.temporary
        side?.temporaryUUID = nil
    }

    /// The key the object is registered under in its owner's identity map.
    var identityKey: ObjectIdentityKey {
        guard _bits & ObjectBits.temporary != 0 else {
            return ObjectIdentityKey(store: storeNumber, entity: _entity.nameNumber, primaryKey: rowKey)
        }
        if let foreign = side?.temporaryUUID { return ObjectIdentityKey(temporary: foreign) }
        return ObjectIdentityKey(temporarySerial: temporarySerial)
    }

    /// Whether the object comes before `other` in ID order (entity name, then primary
    /// key; permanent IDs before temporary ones): the order ``ManagedObjectID/precedesInStoreOrder(_:)``
    /// gives their IDs, without making them when both are permanent.
    func precedesByID(_ other: ManagedObject) -> Bool {
        let temporary = ObjectBits.temporary
        guard (_bits | other._bits) & temporary == 0 else {
            return objectID.precedesInStoreOrder(other.objectID)
        }
        if _entity !== other._entity, _entity.nameNumber != other._entity.nameNumber {
            return _entity.name < other._entity.name
        }
        return rowKey < other.rowKey
    }

    /// `objects` in ID order (see ``precedesByID(_:)``).
    static func inIDOrder(_ objects: [ManagedObject]) -> [ManagedObject] {
        guard let first = objects.first else { return [] }
        // Saved objects of one entity (the usual save), often in key order already (as
        // fetched, or as a child's save lists them): then nothing moves.
        var previous = first.rowKey
        let inOrder = objects.allSatisfy { object in
            guard object._bits & ObjectBits.temporary == 0, object._entity === first._entity, object.rowKey >= previous else { return false }
            previous = object.rowKey
            return true
        }
        if inOrder { return objects }
        // Otherwise sorted by row key alone, as plain integers, then gathered.
        var keys: [(key: UInt64, index: Int)] = []
        keys.reserveCapacity(objects.count)
        for (index, object) in objects.enumerated() {
            guard object._bits & ObjectBits.temporary == 0, object._entity === first._entity else {
                return objects.sorted { $0.precedesByID($1) }
            }
            keys.append((object.rowKey, index))
        }
        keys.sort { $0.key < $1.key }
        return keys.map { objects[$0.index] }
    }

    /// The object's entity.
    public var entity: EntityDescription { _entity }

    /// Moves the object to `entity`, the same entity as described by a context's model
    /// (an object made with `Note()` carries its class's own description): values move
    /// by property name; properties the new description lacks are dropped. When both
    /// descriptions keep every slot in the same field, nothing moves.
    func adopt(_ entity: EntityDescription) {
        let old = _entity
        guard old !== entity else { return }
        if entity.layout.holdsSlotsLike(old.layout) {
            _entity = entity
            return
        }
        let attributes = entity.attributes.map { attribute in
            old.attributeSlots[attribute.name].map { attributeValue(at: $0) } ?? attribute.defaultValue
        }
        let relationships = entity.relationships.map { relationship in
            old.relationshipSlots[relationship.name].map { relationshipStorage(at: $0) } ?? .empty(for: relationship)
        }
        var committedState: CommittedState?
        if let state = committedCopy {
            // The committed values kept move to their properties' new slots.
            var moved = CommittedState()
            for (slot, value) in state.attributes {
                if let new = entity.attributeSlots[old.attributes[slot].name] { moved.keepAttribute(new, value) }
            }
            for (slot, value) in state.relationships {
                if let new = entity.relationshipSlots[old.relationships[slot].name] { moved.keepRelationship(new, value) }
            }
            committedState = moved
        }
        _entity = entity
        let layout = entity.layout
        _bits = ObjectBits.settled(_bits & ~ObjectBits.inexactFields | (layout.typedFieldsAreExact ? 0 : ObjectBits.inexactFields))
        if layout.usesDynamicStorage {
            sideState.attributes = Array(repeating: nil, count: layout.dynamicAttributeCount)
            sideState.relationships = Array(repeating: .notLoaded, count: layout.dynamicRelationshipCount)
        } else if let side {
            side.attributes = []
            side.relationships = []
        }
        side?.nilAttributes = []
        _bits = ObjectBits.settled(_bits & ~ObjectBits.nilOverrides)
        for (slot, value) in attributes.enumerated() { storeAttribute(value, at: slot) }
        for (slot, value) in relationships.enumerated() { storeRelationship(value, at: slot) }
        if let side { side.committed = committedState }
        else if committedState != nil { sideState.committed = committedState }
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

    /// The uniqueness constraints of the entity a subclass derives: each a list of
    /// attribute (property) names whose values together no two saved objects may share
    /// (``EntityDescription/uniquenessConstraints``). None unless overridden.
    ///
    /// ```swift
    /// final class Account: ManagedObject {
    ///     override class var uniquenessConstraints: [[String]] { [["email"], ["region", "handle"]] }
    ///     @Attribute var email: String = ""
    ///     @Attribute var region: String = ""
    ///     @Attribute var handle: String = ""
    /// }
    /// ```
    ///
    /// A subclass inherits the override; its entity declares only the constraints its
    /// superclass's does not (those it inherits from the superentity).
    open class var uniquenessConstraints: [[String]] { [] }

    /// The entity's name in an earlier model version, so that a migration carries its
    /// stored objects over to this entity (``EntityDescription/renamingIdentifier``). None
    /// unless overridden.
    open class var renamingIdentifier: String? { nil }

    // MARK: State

    /// Whether the object was inserted into its context and not saved yet.
    public var isInserted: Bool { _bits & ObjectBits.inserted != 0 }

    /// Whether the object will be deleted from the store at the next save.
    public var isDeleted: Bool { _bits & ObjectBits.deleted != 0 }

    /// Whether the object, registered in a context, was changed since it was last
    /// fetched or saved (transient changes included: see ``hasPersistentChangedValues``).
    public var isUpdated: Bool {
        _bits & (ObjectBits.modified | ObjectBits.inserted | ObjectBits.deleted) == ObjectBits.modified && _owner != nil
    }

    /// Whether the object is inserted, updated or deleted.
    public var hasChanges: Bool { _bits & (ObjectBits.inserted | ObjectBits.deleted) != 0 || isUpdated }

    /// Whether the object's values have not been read yet. Reading ``objectID`` does not
    /// change this; reading any property does. An object with changes is never a fault
    /// (a context may hold a child's changes to an object before it reads the object's
    /// other values: they are read on first access, as a fault's are).
    public var isFault: Bool { faultState == .fault && _bits & ObjectBits.modified == 0 }

    /// Whether a persistent (non-transient) property differs from its committed value.
    public var hasPersistentChangedValues: Bool {
        if holdsUnreadChanges { fulfilIfNeeded() }
        guard faultState == .fulfilled else { return false }
        if isSaved && committedCopy == nil { return false }  // nothing changed since it was read
        for (slot, attribute) in _entity.attributes.enumerated() where !attribute.isTransient {
            if attributeValue(at: slot) != committedAttribute(at: slot) { return true }
        }
        for slot in _entity.relationships.indices where relationshipChanged(slot) { return true }
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

// MARK: - State, for the owner

extension ManagedObject {
    /// Sets or clears `flag`, keeping the summary flags in step.
    @inline(__always)
    func setFlag(_ flag: UInt32, _ on: Bool) {
        _bits = ObjectBits.settled(on ? _bits | flag : _bits & ~flag)
    }

    /// The side state, made when needed.
    var sideState: ObjectSide {
        if let side { return side }
        let made = ObjectSide()
        side = made
        return made
    }

    /// The owner (see ``_owner``). Setting it registers nothing: owners register objects
    /// in their own identity maps.
    var owner: ObjectOwner? {
        get { _owner }
        set {
            _owner = newValue
            setFlag(ObjectBits.owned, newValue != nil)
        }
    }

    /// Whether the object's values are in memory.
    var faultState: FaultState {
        get {
            switch _bits & ObjectBits.faultMask {
            case ObjectBits.fault: .fault
            case ObjectBits.inaccessible: .inaccessible
            default: .fulfilled
            }
        }
        set {
            let state: UInt32 = switch newValue {
            case .fulfilled: 0
            case .fault: ObjectBits.fault
            case .inaccessible: ObjectBits.inaccessible
            }
            _bits = ObjectBits.settled(_bits & ~ObjectBits.faultMask | state)
        }
    }

    var insertedFlag: Bool {
        get { _bits & ObjectBits.inserted != 0 }
        set { setFlag(ObjectBits.inserted, newValue) }
    }

    var deletedFlag: Bool {
        get { _bits & ObjectBits.deleted != 0 }
        set { setFlag(ObjectBits.deleted, newValue) }
    }

    /// Whether a property was set since the last save (persistent or transient).
    var isModified: Bool {
        get { _bits & ObjectBits.modified != 0 }
        set { setFlag(ObjectBits.modified, newValue) }
    }

    /// Whether the object has a committed state (it was fetched or saved).
    var isSaved: Bool { _bits & ObjectBits.saved != 0 }

    /// Which change sets of the context's next ObjectsDidChange notification the object
    /// is already in (``ChangeEvent``): a bit per set, so recording a change is O(1).
    var eventMarks: UInt8 {
        get { UInt8(truncatingIfNeeded: (_bits & ObjectBits.eventMask) >> ObjectBits.eventShift) }
        set { _bits = _bits & ~ObjectBits.eventMask | UInt32(newValue) << ObjectBits.eventShift }
    }

    /// Why the last attempt to read the object's values (or a to-many relationship's
    /// destinations) failed, when the store could not be read (an I/O error, a full
    /// reader table, a terminal store): the object stays a fault, and accessors report
    /// this instead of an inaccessible fault. Nil once a read succeeds.
    var faultFailure: StrataError? {
        get { side?.faultFailure }
        set {
            guard newValue != nil || side?.faultFailure != nil else { return }
            sideState.faultFailure = newValue
        }
    }

    /// Edits that failed while the object was in no context (see ``ObjectSide/failedEdits``).
    var pendingFailedEdits: [(key: String, error: StrataError)] {
        get { side?.failedEdits ?? [] }
        set {
            guard !newValue.isEmpty || side?.failedEdits.isEmpty == false else { return }
            sideState.failedEdits = newValue
            setFlag(ObjectBits.failedEdits, !newValue.isEmpty)
        }
    }
}
