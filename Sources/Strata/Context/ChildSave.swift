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
    /// The state the child read each updated, deleted and checked object at: its row
    /// version and committed values. The parent takes the save only where it holds the
    /// object in that state (the properties a change sets; the whole object, to-many
    /// members included, for a deletion or a check), so that neither the child's values
    /// nor the parent's delete rules act on a state the child never saw, and the root's
    /// optimistic locking then checks the version the parent holds (DESIGN.md, "Saving
    /// one store up"; ``ObjectGraph/acceptChildSave(_:)``).
    var bases: [ManagedObjectID: ObjectSnapshot] = [:]

    /// Whether there is nothing to apply.
    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty && checked.isEmpty }
}

/// The changed properties of one object, relative to the state the child read from its
/// parent. Only these are applied, so a property the parent changed meanwhile and the
/// child did not touch keeps the parent's value.
struct ObjectChange: Sendable {
    /// The object.
    var objectID: ManagedObjectID
    /// New attribute values by attribute slot.
    var attributes: [Int: AttributeValue?] = [:]
    /// New destinations of to-one relationships by slot.
    var toOne: [Int: ManagedObjectID?] = [:]
    /// Destinations added to unordered to-many relationships, by slot.
    var added: [Int: [ManagedObjectID]] = [:]
    /// Destinations removed from unordered to-many relationships, by slot.
    var removed: [Int: [ManagedObjectID]] = [:]
    /// The whole new contents of ordered to-many relationships, by slot.
    var ordered: [Int: [ManagedObjectID]] = [:]

    /// The changes of `object` since it was last read or saved.
    init(of object: ManagedObject) {
        objectID = object.objectID
        for (slot, attribute) in object.entity.attributes.enumerated() where !attribute.isTransient {
            let value = object.attributeValue(at: slot)
            if value != object.committedAttribute(at: slot) { attributes[slot] = value }
        }
        for (slot, relationship) in object.entity.relationships.enumerated() where object.relationshipChanged(slot) {
            switch object.relationshipStorage(at: slot) {
            case .notLoaded:
                continue
            case .toOne(let destination):
                toOne[slot] = .some(destination?.objectID)
            case .toMany(let storage) where relationship.isOrdered:
                ordered[slot] = storage.objects.map(\.objectID)
            case .toMany(let storage):
                let old: [ManagedObject]
                if case .toMany(let oldStorage)? = object.committedRelationship(at: slot) { old = oldStorage.objects } else { old = [] }
                let before = Set(old.map(ObjectIdentifier.init))
                added[slot] = storage.objects.filter { !before.contains(ObjectIdentifier($0)) }.map(\.objectID)
                removed[slot] = old.filter { !storage.contains($0) }.map(\.objectID)
            }
        }
    }
}
