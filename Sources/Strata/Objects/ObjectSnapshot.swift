/// The persistent state of one object as a `Sendable` value: what crosses actors when a
/// context saves, fetches or fulfils a fault (DESIGN.md, "Saving one store up").
///
/// Values are aligned with the entity's ``EntityDescription/attributes`` and
/// ``EntityDescription/relationships``; a transient attribute is always nil here.
struct ObjectSnapshot: Sendable, Hashable {
    /// The object.
    var objectID: ManagedObjectID
    /// The row version this state was read at or based on; 0 for an object never saved.
    /// A parent's state of an object with unsaved changes carries ``unsavedMark`` too.
    var version: UInt64

    /// Set in the version of a parent context's state of an object with unsaved changes,
    /// as a child reads it: its values are not the stored row of that version, so a change
    /// the child bases on them is never taken for one based on the stored row (a root
    /// context compares the version with the store's to take a change unread:
    /// ``ObjectGraph``'s `unreadChanges(in:)`). Stored versions never reach it.
    static let unsavedMark: UInt64 = 1 << 63
    /// Attribute values by attribute slot.
    var attributes: [AttributeValue?]
    /// Relationship values by relationship slot.
    var relationships: [RelationshipSnapshot]

    /// An empty snapshot of an object of `entity` (every value nil, to-many not loaded).
    init(objectID: ManagedObjectID, entity: EntityDescription, version: UInt64 = 0) {
        self.objectID = objectID
        self.version = version
        attributes = Array(repeating: nil, count: entity.attributes.count)
        relationships = entity.relationships.map { $0.isToMany ? .notLoaded : .toOne(nil) }
    }

    init(objectID: ManagedObjectID, version: UInt64, attributes: [AttributeValue?], relationships: [RelationshipSnapshot]) {
        self.objectID = objectID
        self.version = version
        self.attributes = attributes
        self.relationships = relationships
    }
}

/// One relationship's value in an ``ObjectSnapshot``.
enum RelationshipSnapshot: Sendable, Hashable {
    /// A to-one relationship's destination, or nil.
    case toOne(ManagedObjectID?)
    /// A to-many relationship's destinations, in order when the relationship is ordered.
    case toMany([ManagedObjectID])
    /// A to-many relationship that was not read: it is loaded when first used.
    case notLoaded
}
