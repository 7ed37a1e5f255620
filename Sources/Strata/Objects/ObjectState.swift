import Foundation

/// The state flags of a managed object, packed in one word so that the typed accessors'
/// fast paths test a single load (``ManagedObject/_bits``).
///
/// The fault state takes two bits; `slowRead` and `slowWrite` summarise what sends a
/// typed access to the slow path and are kept in step by ``ManagedObject`` whenever
/// the flags they summarise change.
@usableFromInline
struct ObjectBits {
    // Fault state (two bits).
    static let faultMask: UInt32 = 0b11
    static let fault: UInt32 = 0b01
    static let inaccessible: UInt32 = 0b10

    /// A typed read must go through ``ManagedObject/_readAttributeSlowly(_:)``: the object
    /// is a fault or inaccessible, records key paths, or its class's fields are not
    /// exactly its entity's slots.
    @usableFromInline static let slowRead: UInt32 = 1 << 2
    /// A typed write must go through ``ManagedObject/_writeAttributeSlowly(_:_:)``:
    /// `slowRead`, or the object is in a context (its changes are tracked), or it keeps
    /// failed edits or nil values in non-optional fields.
    @usableFromInline static let slowWrite: UInt32 = 1 << 3

    static let inserted: UInt32 = 1 << 4
    static let deleted: UInt32 = 1 << 5
    /// A property was set since the object was last fetched or saved.
    static let modified: UInt32 = 1 << 6
    /// The object has a committed state (it was fetched or saved).
    static let saved: UInt32 = 1 << 7
    /// The object's ID is temporary.
    static let temporary: UInt32 = 1 << 8
    /// The object has an owner (a context's graph, or a recorder): changes are tracked.
    static let owned: UInt32 = 1 << 9
    /// The object is a recording prototype (``KeyPathNames``).
    static let recording: UInt32 = 1 << 10
    /// The class's typed fields are not exactly the entity's slots.
    static let inexactFields: UInt32 = 1 << 11
    /// The side state keeps failed edits.
    static let failedEdits: UInt32 = 1 << 12
    /// The side state records nil values of attributes whose fields cannot hold nil.
    static let nilOverrides: UInt32 = 1 << 13
    /// The owner holds the object with an extra retain (``ObjectGraph/retainsRegisteredObjects``).
    static let retainedByOwner: UInt32 = 1 << 14
    /// The object is in its owner's changed set (``PendingChanges``).
    static let pendingChange: UInt32 = 1 << 15
    /// The object has an entry in its owner's list of changed objects, which may be
    /// stale (it left the set since; ``PendingChanges``).
    static let pendingListed: UInt32 = 1 << 24

    /// The event marks (``ChangeEvent``): bits 16 to 23.
    static let eventShift: UInt32 = 16
    static let eventMask: UInt32 = 0xFF << 16

    /// What makes a typed read slow, given the other flags.
    static func needsSlowRead(_ bits: UInt32) -> Bool {
        bits & (faultMask | recording | inexactFields) != 0
    }

    /// What makes a typed write slow, given the other flags.
    static func needsSlowWrite(_ bits: UInt32) -> Bool {
        needsSlowRead(bits) || bits & (owned | failedEdits | nilOverrides) != 0
    }

    /// `bits` with `slowRead` and `slowWrite` recomputed.
    static func settled(_ bits: UInt32) -> UInt32 {
        var result = bits & ~(slowRead | slowWrite)
        if needsSlowRead(bits) { result |= slowRead }
        if needsSlowWrite(bits) { result |= slowWrite }
        return result
    }
}

/// What few objects need, in an allocation made when needed (DESIGN.md, "Object layout
/// and cost"): the values of slots kept in dynamic storage, the committed copy of a saved
/// object that changed, a read failure, failed edits, nil values of non-optional fields,
/// a temporary ID made elsewhere.
// Used only in the isolation of the object's owner, through short accesses that never
// overlap (as ``ManagedObject``'s own fields): no dynamic exclusivity checks.
final class ObjectSide {
    /// Attribute values of dynamic slots (``ObjectLayout/AttributePlace/dynamic(_:)``).
    @exclusivity(unchecked) var attributes: [AttributeValue?] = []
    /// Relationship values of dynamic slots.
    @exclusivity(unchecked) var relationships: [RelationshipStorage] = []
    /// The values as last fetched or saved of the properties that changed since: each
    /// is copied when it first changes (the others' committed values are their current
    /// ones).
    @exclusivity(unchecked) var committed: CommittedState?
    /// What fewer objects still need: made when one of its values is first set, so
    /// that the side allocation of a changed object (its committed values) stays small.
    @exclusivity(unchecked) private var rare: Rare?

    /// The rarely set state (see ``rare``).
    private final class Rare {
        @exclusivity(unchecked) var faultFailure: StrataError?
        @exclusivity(unchecked) var failedEdits: [(key: String, error: StrataError)] = []
        @exclusivity(unchecked) var nilAttributes: Set<Int> = []
        @exclusivity(unchecked) var temporaryUUID: UUID?
    }

    /// ``rare``, made when needed.
    private var rareState: Rare {
        if let rare { return rare }
        let made = Rare()
        rare = made
        return made
    }

    /// See ``ManagedObject/faultFailure``.
    var faultFailure: StrataError? {
        get { rare?.faultFailure }
        set { if newValue != nil || rare != nil { rareState.faultFailure = newValue } }
    }
    /// Edits asked for through setters that cannot throw and that did not happen while
    /// the object was in no context (a value that cannot be stored): its context takes
    /// them over when the object is inserted, and its next save fails with the first.
    var failedEdits: [(key: String, error: StrataError)] {
        get { rare?.failedEdits ?? [] }
        set { if !newValue.isEmpty || rare != nil { rareState.failedEdits = newValue } }
    }
    /// Attribute slots that hold nil although their typed field cannot (the field then
    /// holds the attribute's default value, which is what its typed accessor reads).
    var nilAttributes: Set<Int> {
        get { rare?.nilAttributes ?? [] }
        set { if !newValue.isEmpty || rare != nil { rareState.nilAttributes = newValue } }
    }
    /// The UUID of a temporary ID that this process did not make (read from a URI).
    var temporaryUUID: UUID? {
        get { rare?.temporaryUUID }
        set { if newValue != nil || rare != nil { rareState.temporaryUUID = newValue } }
    }
}

/// The values as last fetched or saved of the properties of an object that changed
/// since, by slot (a property not here has its committed value as its current one).
/// Few properties change at a time: the lists are scanned.
struct CommittedState {
    /// The first attribute kept, inline: most saves change one or two properties, and a
    /// first change then allocates no list.
    private var firstAttribute: (slot: Int, value: AttributeValue?)?
    /// The attributes kept after the first, in the order they changed.
    private var moreAttributes: [(slot: Int, value: AttributeValue?)] = []
    /// Relationship slots and their committed values.
    private(set) var relationships: [(slot: Int, value: RelationshipStorage)] = []

    /// How many attributes have a committed value kept.
    var attributeCount: Int { firstAttribute == nil ? 0 : 1 + moreAttributes.count }

    /// Attribute slots and their committed values, in the order they changed.
    var attributes: [(slot: Int, value: AttributeValue?)] {
        guard let firstAttribute else { return [] }
        return [firstAttribute] + moreAttributes
    }

    /// Calls `body` with each attribute slot and committed value, in slot order.
    func forEachAttributeInSlotOrder(_ body: (Int, AttributeValue?) -> Void) {
        guard let firstAttribute else { return }
        if moreAttributes.isEmpty { return body(firstAttribute.slot, firstAttribute.value) }
        for entry in attributes.sorted(by: { $0.slot < $1.slot }) { body(entry.slot, entry.value) }
    }

    /// The committed value of attribute `slot`, if it changed (`.some(nil)`: nil).
    func attribute(_ slot: Int) -> AttributeValue?? {
        guard let firstAttribute else { return nil }
        if firstAttribute.slot == slot { return .some(firstAttribute.value) }
        for entry in moreAttributes where entry.slot == slot { return .some(entry.value) }
        return nil
    }

    /// The committed value of relationship `slot`, if it changed.
    func relationship(_ slot: Int) -> RelationshipStorage? {
        for entry in relationships where entry.slot == slot { return entry.value }
        return nil
    }

    /// Keeps `value` as attribute `slot`'s committed value, unless one is kept already.
    mutating func keepAttribute(_ slot: Int, _ value: AttributeValue?) {
        if firstAttribute == nil {
            firstAttribute = (slot, value)
        } else if attribute(slot) == nil {
            moreAttributes.append((slot, value))
        }
    }

    /// Keeps `value` as relationship `slot`'s committed value, unless one is kept already.
    mutating func keepRelationship(_ slot: Int, _ value: RelationshipStorage) {
        if relationship(slot) == nil { relationships.append((slot, value)) }
    }

    /// Replaces relationship `slot`'s committed value when one is kept.
    mutating func replaceRelationship(_ slot: Int, with value: RelationshipStorage) {
        if let index = relationships.firstIndex(where: { $0.slot == slot }) { relationships[index].value = value }
    }
}

/// Whether an object's values are in memory.
enum FaultState {
    /// Values are in memory.
    case fulfilled
    /// Only the ID is known; the first property access reads the values.
    case fault
    /// Fulfilment failed (the row is gone), or the object left its context: reads
    /// return nil or defaults.
    case inaccessible
}
