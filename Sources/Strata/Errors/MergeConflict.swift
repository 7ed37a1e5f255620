import Foundation

/// One property's value in a ``PropertySnapshot``: an attribute's value, or a
/// relationship's destinations as object IDs.
public enum PropertyValue: Sendable, Hashable, CustomStringConvertible {
    /// An attribute's value (nil: no value).
    case attribute(AttributeValue?)
    /// A to-one relationship's destination, or nil.
    case toOne(ManagedObjectID?)
    /// A to-many relationship's destinations (in order when it is ordered).
    case toMany([ManagedObjectID])

    /// The attribute value, or nil for a relationship (or an attribute without a value).
    public var attributeValue: AttributeValue? {
        if case .attribute(let value) = self { value } else { nil }
    }

    /// The destinations of a relationship (none for an attribute or a nil to-one).
    public var destinations: [ManagedObjectID] {
        switch self {
        case .attribute: []
        case .toOne(let id): id.map { [$0] } ?? []
        case .toMany(let ids): ids
        }
    }

    /// `42`, `nil`, `→ x-strata://…/Tag/p1`, `[3 objects]`.
    public var description: String {
        switch self {
        case .attribute(let value?): "\(value)"
        case .attribute(nil), .toOne(nil): "nil"
        case .toOne(let id?): "→ \(id)"
        case .toMany(let ids): "[\(ids.count) object(s)]"
        }
    }
}

/// The persistent state of one object as a conflict record holds it: property values
/// keyed by property name, and the row version they belong to.
///
/// A snapshot holds every stored attribute and to-one relationship, and the to-many
/// relationships that were known where it was taken (loaded in memory; always in the
/// store's snapshot). Transient attributes are never in it.
public struct PropertySnapshot: Sendable, Hashable, CustomStringConvertible {
    /// The row version the values belong to (0 for an object never saved).
    public let version: UInt64
    /// The values, by property name.
    public let values: [String: PropertyValue]

    /// A snapshot of `values` at `version`.
    public init(version: UInt64, values: [String: PropertyValue]) {
        self.version = version
        self.values = values
    }

    /// The value of property `key`, or nil when the snapshot does not hold it.
    public subscript(key: String) -> PropertyValue? { values[key] }

    /// The value of attribute `key` (nil when it has none, or is not an attribute here).
    public func attributeValue(_ key: String) -> AttributeValue? { values[key]?.attributeValue }

    /// `{count: 3, title: "x"} @v4`, keys in order.
    public var description: String {
        "{" + values.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "} @v\(version)"
    }
}

/// A conflict between a save and changes made elsewhere to the same object: the record
/// a merge policy decides on, and that ``StrataError/mergeConflicts(_:)`` lists when a
/// save fails under ``MergePolicy/error`` (Core Data's conflict records,
/// `NSMergeConflict`; see <doc:MergePolicies>).
///
/// For a root context's save, "elsewhere" is the store: another context, process or
/// batch request saved the object since this context read it. For a child context's
/// save it is the parent context, whose current state (its unsaved changes included)
/// changed since the child read it.
public struct MergeConflict: Sendable, Hashable, CustomStringConvertible {
    /// The object.
    public let objectID: ManagedObjectID
    /// The object's values in the saving context (nil when it deletes the object).
    public let objectSnapshot: PropertySnapshot?
    /// The values the saving context last read or saved (what its changes were based on).
    public let cachedSnapshot: PropertySnapshot?
    /// The values now in the store (the parent context's, for a child's save); nil when
    /// the object was deleted there.
    public let persistedSnapshot: PropertySnapshot?
    /// The row version the saving context's changes were based on.
    public let oldVersion: UInt64
    /// The row version now stored; nil when the row was deleted.
    public let newVersion: UInt64?
    /// The properties the saving context changed.
    public let changedKeysInMemory: Set<String>
    /// The properties changed elsewhere since the saving context read the object (the
    /// persisted values that differ from the cached ones).
    public let changedKeysInStore: Set<String>

    /// A conflict on `objectID` with its snapshots and changed keys.
    public init(
        objectID: ManagedObjectID, objectSnapshot: PropertySnapshot? = nil, cachedSnapshot: PropertySnapshot? = nil,
        persistedSnapshot: PropertySnapshot? = nil, oldVersion: UInt64, newVersion: UInt64?,
        changedKeysInMemory: Set<String> = [], changedKeysInStore: Set<String> = []
    ) {
        self.objectID = objectID
        self.objectSnapshot = objectSnapshot
        self.cachedSnapshot = cachedSnapshot
        self.persistedSnapshot = persistedSnapshot
        self.oldVersion = oldVersion
        self.newVersion = newVersion
        self.changedKeysInMemory = changedKeysInMemory
        self.changedKeysInStore = changedKeysInStore
    }

    /// The properties changed on both sides: the ones a merging policy decides.
    public var changedKeysOnBothSides: Set<String> { changedKeysInMemory.intersection(changedKeysInStore) }

    /// `x-strata://…/Note/p3: based on version 2, stored version 3 (changed here: title; there: title, body)`.
    public var description: String {
        var text = "\(objectID): based on version \(oldVersion), " + (newVersion.map { "stored version \($0)" } ?? "since deleted")
        if objectSnapshot == nil && cachedSnapshot != nil { text += ", deleted here" }
        if !changedKeysInMemory.isEmpty || !changedKeysInStore.isEmpty {
            text += " (changed here: \(changedKeysInMemory.sorted().joined(separator: ", ")); there: "
                + "\(changedKeysInStore.sorted().joined(separator: ", ")))"
        }
        return text
    }
}

/// A save that would give two objects the values of one uniqueness constraint
/// (``EntityDescription/uniquenessConstraints``; Core Data's `NSConstraintConflict`):
/// objects the save inserts or changes claim values that a stored object holds, or that
/// another object of the same save claims. ``MergePolicy/error`` fails the save listing
/// every one (``StrataError/constraintConflicts(_:)``); the other policies settle it
/// (<doc:MergePolicies>).
public struct ConstraintConflict: Sendable, Hashable, CustomStringConvertible {
    /// The entity that declares the constraint.
    public let entityName: String
    /// The constrained attributes.
    public let constraint: [String]
    /// The values claimed, by attribute name.
    public let values: [String: AttributeValue]
    /// The saving context's objects that claim them (temporary IDs for new objects).
    public let objectIDs: [ManagedObjectID]
    /// The stored object that holds them, or nil when only objects of the save claim them.
    public let existingObjectID: ManagedObjectID?

    /// A conflict on `constraint` of `entityName`.
    public init(
        entityName: String, constraint: [String], values: [String: AttributeValue], objectIDs: [ManagedObjectID],
        existingObjectID: ManagedObjectID?
    ) {
        self.entityName = entityName
        self.constraint = constraint
        self.values = values
        self.objectIDs = objectIDs
        self.existingObjectID = existingObjectID
    }

    /// `Account[email] = "a@x": claimed by 2 object(s), held by x-strata://…/Account/p3`.
    public var description: String {
        let shown = constraint.map { "\(values[$0].map { "\($0)" } ?? "nil")" }.joined(separator: ", ")
        return "\(entityName)[\(constraint.joined(separator: ", "))] = (\(shown)): claimed by \(objectIDs.count) object(s)"
            + (existingObjectID.map { ", held by \($0)" } ?? " of the same save")
    }
}
