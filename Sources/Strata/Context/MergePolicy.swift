import Foundation

/// How a context's save settles conflicts with changes made elsewhere since it read
/// its objects (``ManagedObjectContext/mergePolicy``; Core Data's merge policies). The
/// rules, numbered, are in <doc:MergePolicies>.
///
/// Conflicts are found property by property: a property conflicts only when both the
/// saving context and the other side changed it since the context read the object. A
/// property changed on one side only keeps that side's value under every merging policy.
public enum MergePolicy: Sendable, CustomStringConvertible {
    /// The save fails with ``StrataError/mergeConflicts(_:)`` listing every conflict, and
    /// writes nothing: any change of a saved row since the context read it is a conflict
    /// (optimistic locking). The default.
    case error
    /// Merge property by property; a property changed on both sides takes the other
    /// side's (the store's, or the parent's) value.
    case mergeByPropertyStoreTrump
    /// Merge property by property; a property changed on both sides takes the saving
    /// context's value.
    case mergeByPropertyObjectTrump
    /// The saving context's whole state of each conflicting object is forced on the store.
    case overwrite
    /// The saving context's changes to each conflicting object are discarded: the other
    /// side's state is kept.
    case rollback
    /// Merge property by property; a property changed on both sides is decided by the
    /// resolver (Core Data's `NSMergePolicy` subclass).
    case custom(MergeResolver)

    /// Whether conflicts are settled rather than failing the save.
    var merges: Bool {
        if case .error = self { false } else { true }
    }

    /// `error`, `mergeByPropertyObjectTrump`, `custom(sumCounters)`, …
    public var description: String {
        switch self {
        case .error: "error"
        case .mergeByPropertyStoreTrump: "mergeByPropertyStoreTrump"
        case .mergeByPropertyObjectTrump: "mergeByPropertyObjectTrump"
        case .overwrite: "overwrite"
        case .rollback: "rollback"
        case .custom(let resolver): "custom(\(resolver.name))"
        }
    }
}

/// What a custom merge policy decides for one property changed on both sides.
public enum PropertyResolution: Sendable, Hashable {
    /// The saving context's value.
    case object
    /// The other side's value (the store's, or the parent context's).
    case store
    /// A value of the resolver's own: an attribute value of the attribute's type, or a
    /// relationship's destinations (objects that exist on the other side).
    case value(PropertyValue)

    /// A value of the resolver's own for an attribute.
    public static func attribute(_ value: AttributeValue?) -> PropertyResolution { .value(.attribute(value)) }
}

/// A custom merge policy: decides each property that both the saving context and the
/// other side changed, from the conflict's snapshots (``MergePolicy/custom(_:)``).
///
/// The resolver runs inside the save's write (a root context's) or in the parent
/// context's isolation (a child's), so it must be quick and must not touch contexts. It
/// is called once per conflicting property, with the conflict it belongs to; a property
/// changed on one side only is never passed to it. What it throws fails the save, which
/// then writes nothing.
///
/// ```swift
/// // Counters add up; everything else: the latest timestamp wins.
/// let sumCounters = MergeResolver(name: "sumCounters") { conflict, key in
///     guard key == "count",
///           case .integer(let mine)? = conflict.objectSnapshot?.attributeValue(key),
///           case .integer(let theirs)? = conflict.persistedSnapshot?.attributeValue(key),
///           case .integer(let base)? = conflict.cachedSnapshot?.attributeValue(key)
///     else {
///         let mine = conflict.objectSnapshot?.attributeValue("updatedAt")
///         let theirs = conflict.persistedSnapshot?.attributeValue("updatedAt")
///         if case .date(let a)? = mine, case .date(let b)? = theirs, b > a { return .store }
///         return .object
///     }
///     return .attribute(.integer(theirs + mine - base))
/// }
/// context.mergePolicy = .custom(sumCounters)
/// ```
public struct MergeResolver: Sendable {
    /// Decides property `key` of `conflict`.
    public typealias Decision = @Sendable (_ conflict: MergeConflict, _ key: String) throws -> PropertyResolution

    /// A name for messages and ``MergePolicy/description``.
    public let name: String
    /// The decision.
    let decide: Decision

    /// A resolver named `name` that decides with `decide`.
    public init(name: String = "custom", _ decide: @escaping Decision) {
        self.name = name
        self.decide = decide
    }
}
