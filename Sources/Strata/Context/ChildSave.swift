/// A child context's save, as it crosses to its parent: `Sendable` values only (object
/// IDs and property values, never objects), applied to the parent's objects in the
/// parent's isolation (DESIGN.md, "Saving one store up").
struct ChildSave: Sendable {
    /// Objects the child inserted: their whole persistent state, under their IDs
    /// (temporary, or permanent when the child obtained them).
    var inserted: [ObjectSnapshot] = []
    /// What the child changed in other objects, property by property.
    var updated: [ObjectChange] = []
    /// Objects the child deleted.
    var deleted: [ManagedObjectID] = []
    /// Unchanged objects whose stored rows the root's save must check
    /// (`detectConflicts(for:)` in the child).
    var checked: [ManagedObjectID] = []
    /// Stores chosen with `assign(_:to:)` for inserted objects.
    var stores: [ManagedObjectID: PersistentStore] = [:]
    /// The state the child read each deleted and checked object at: its row version and
    /// committed values (an updated object's change carries the values it read of the
    /// properties it sets). The parent takes the save only where it holds the object in
    /// that state (the properties a change sets; the whole object, to-many members
    /// included, for a deletion or a check), so that neither the child's values nor the
    /// parent's delete rules act on a state the child never saw, and the root's
    /// optimistic locking then checks the version the parent holds (DESIGN.md, "Saving
    /// one store up"; ``ObjectGraph/acceptChildSave(_:)``).
    var bases: [ManagedObjectID: ObjectSnapshot] = [:]
    /// The child's merge policy: how the parent settles conflicts with its own state.
    var policy: MergePolicy = .error
    /// Under a merging policy, the child's whole state of each object it changed (what
    /// ``MergePolicy/overwrite`` forces, and the conflict records' object snapshots).
    var objectStates: [ManagedObjectID: ObjectSnapshot] = [:]

    /// Whether there is nothing to apply.
    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty && checked.isEmpty }
}

/// The changed properties of one object, relative to the state the child read from its
/// parent. Only these are applied, so a property the parent changed meanwhile and the
/// child did not touch keeps the parent's value. Each carries the value the child read
/// (its base), which the parent must still hold for the change to apply.
struct ObjectChange: Sendable {
    /// A new attribute value and the one the child read.
    struct Attribute: Sendable {
        var slot: Int
        var value: AttributeValue?
        var base: AttributeValue?
    }

    /// New relationship contents (to-one, or ordered to-many: the whole list) and what
    /// the child read.
    struct Relationship: Sendable {
        var slot: Int
        var destinations: [ManagedObjectID]
        var base: RelationshipSnapshot
    }

    /// Destinations added to and removed from an unordered to-many relationship (the
    /// other members may be anything).
    struct Members: Sendable {
        var slot: Int
        var added: [ManagedObjectID]
        var removed: [ManagedObjectID]
    }

    /// What few changes have: attributes after the first, and relationships. Kept out
    /// of line, so that a change of one attribute is copied (into the save's list, out
    /// of it) with a single reference count, its ID's.
    private final class Rest: Sendable {
        let attributes: [Attribute]
        let toOne: [Relationship]
        let ordered: [Relationship]
        let members: [Members]

        init(attributes: [Attribute], toOne: [Relationship], ordered: [Relationship], members: [Members]) {
            self.attributes = attributes
            self.toOne = toOne
            self.ordered = ordered
            self.members = members
        }
    }

    /// The object.
    var objectID: ManagedObjectID
    /// The row version the child read the object at; nil for an object its parent has
    /// not saved either (there is no read state to compare).
    var baseVersion: UInt64?
    /// The first changed attribute, inline: most changes set one or two attributes.
    private var firstAttribute: Attribute?
    /// The rest, when there is any.
    private var rest: Rest?

    /// The changed attributes after the first.
    private var moreAttributes: [Attribute] { rest?.attributes ?? [] }
    /// Changed to-one relationships.
    var toOne: [Relationship] { rest?.toOne ?? [] }
    /// Changed ordered to-many relationships.
    var ordered: [Relationship] { rest?.ordered ?? [] }
    /// Changed unordered to-many relationships.
    var members: [Members] { rest?.members ?? [] }
    /// Whether only attributes changed.
    var changesAttributesOnly: Bool { rest.map { $0.toOne.isEmpty && $0.ordered.isEmpty && $0.members.isEmpty } ?? true }

    /// The changes of `object` since it was last read or saved. A saved object lists
    /// only the properties whose committed value it kept (the ones it changed).
    init(of object: ManagedObject) {
        objectID = object.objectID
        let entity = object.entity
        let saved = object.isSaved
        baseVersion = saved ? object.rowVersion : nil
        var parts = Parts()
        if saved {
            if let committed = object.committedCopy {
                committed.forEachAttributeInSlotOrder { slot, base in
                    guard !entity.attributes[slot].isTransient else { return }
                    let value = object.attributeValue(at: slot)
                    if value != base { parts.append(Attribute(slot: slot, value: value, base: base)) }
                }
                if !committed.relationships.isEmpty {
                    for (slot, _) in committed.relationships.sorted(by: { $0.slot < $1.slot }) {
                        parts.addRelationship(slot, of: object)
                    }
                }
            }
        } else {
            for slot in entity.storedAttributeSlots {
                if let value = object.attributeValue(at: slot) { parts.append(Attribute(slot: slot, value: value, base: nil)) }
            }
            for slot in entity.relationships.indices { parts.addRelationship(slot, of: object) }
        }
        firstAttribute = parts.first
        if !parts.more.isEmpty || !parts.toOne.isEmpty || !parts.ordered.isEmpty || !parts.members.isEmpty {
            rest = Rest(attributes: parts.more, toOne: parts.toOne, ordered: parts.ordered, members: parts.members)
        }
    }

    /// How many attributes changed.
    var attributeCount: Int { firstAttribute == nil ? 0 : 1 + (rest?.attributes.count ?? 0) }

    /// Changed attribute `index` (`0..<attributeCount`), by ascending slot.
    func attribute(_ index: Int) -> Attribute {
        index == 0 ? firstAttribute! : moreAttributes[index - 1]
    }
}

/// An ``ObjectChange`` as it is gathered.
private struct Parts {
    var first: ObjectChange.Attribute?
    var more: [ObjectChange.Attribute] = []
    var toOne: [ObjectChange.Relationship] = []
    var ordered: [ObjectChange.Relationship] = []
    var members: [ObjectChange.Members] = []

    mutating func append(_ attribute: ObjectChange.Attribute) {
        if first == nil { first = attribute } else { more.append(attribute) }
    }

    mutating func addRelationship(_ slot: Int, of object: ManagedObject) {
        guard object.relationshipChanged(slot) else { return }
        let relationship = object.entity.relationships[slot]
        let base = (object.committedRelationship(at: slot) ?? .notLoaded).snapshot
        switch object.relationshipStorage(at: slot) {
        case .notLoaded:
            return
        case .toOne(let destination):
            toOne.append(ObjectChange.Relationship(slot: slot, destinations: destination.map { [$0.objectID] } ?? [], base: base))
        case .toMany(let storage) where relationship.isOrdered:
            ordered.append(ObjectChange.Relationship(slot: slot, destinations: storage.objects.map(\.objectID), base: base))
        case .toMany(let storage):
            let old: [ManagedObject]
            if case .toMany(let oldStorage)? = object.committedRelationship(at: slot) { old = oldStorage.objects } else { old = [] }
            let before = Set(old.map(ObjectIdentifier.init))
            members.append(ObjectChange.Members(
                slot: slot,
                added: storage.objects.filter { !before.contains(ObjectIdentifier($0)) }.map(\.objectID),
                removed: old.filter { !storage.contains($0) }.map(\.objectID)))
        }
    }
}
