import Foundation

/// A stored (or transient) property holding a value of an ``AttributeType``.
public struct AttributeDescription: Sendable, Hashable {
    /// The attribute's name, a Swift identifier unique within its entity and its ancestors.
    public var name: String
    /// The type of its values.
    public var type: AttributeType
    /// Whether the attribute may be nil when the object is saved.
    public var isOptional: Bool
    /// The value a newly inserted object starts with; it must be of ``type``.
    public var defaultValue: AttributeValue?
    /// Whether the store keeps an index on the attribute (for range and equality queries).
    public var isIndexed: Bool
    /// A transient attribute lives in memory only: it is never stored.
    public var isTransient: Bool
    /// The rules a value must satisfy when the object is validated.
    public var validation: AttributeValidation
    /// The name this attribute had in an earlier model version: a migration carries the
    /// stored values of the attribute of that name over to this one (a rename), instead of
    /// dropping one attribute and adding another.
    public var renamingIdentifier: String?
    /// Whether persistent history keeps the attribute's value when its object is deleted
    /// (in the delete change's tombstone, ``PersistentHistoryChange/tombstone``): what
    /// another process needs to recognise the object it lost (a unique code, a name).
    public var preservesValueInHistoryOnDeletion: Bool

    /// Describes an attribute.
    public init(
        name: String, type: AttributeType, isOptional: Bool = true, defaultValue: AttributeValue? = nil,
        isIndexed: Bool = false, isTransient: Bool = false, validation: AttributeValidation = AttributeValidation(),
        renamingIdentifier: String? = nil, preservesValueInHistoryOnDeletion: Bool = false
    ) {
        self.renamingIdentifier = renamingIdentifier
        self.preservesValueInHistoryOnDeletion = preservesValueInHistoryOnDeletion
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.defaultValue = defaultValue
        self.isIndexed = isIndexed
        self.isTransient = isTransient
        self.validation = validation
    }
}

/// The validation rules of an attribute (Core Data's min/max value, length and regular
/// expression, and date range). Rules that do not apply to the attribute's type are a
/// model error.
public struct AttributeValidation: Sendable, Hashable {
    /// The smallest allowed number (integer, double, float and decimal attributes).
    public var minimum: Double?
    /// The largest allowed number.
    public var maximum: Double?
    /// The shortest allowed string, in characters.
    public var minimumLength: Int?
    /// The longest allowed string, in characters.
    public var maximumLength: Int?
    /// A regular expression the whole string must match (NSRegularExpression syntax).
    public var pattern: String?
    /// The earliest allowed date.
    public var earliestDate: Date?
    /// The latest allowed date.
    public var latestDate: Date?

    /// Rules; every one is optional.
    public init(
        minimum: Double? = nil, maximum: Double? = nil, minimumLength: Int? = nil, maximumLength: Int? = nil,
        pattern: String? = nil, earliestDate: Date? = nil, latestDate: Date? = nil
    ) {
        self.minimum = minimum
        self.maximum = maximum
        self.minimumLength = minimumLength
        self.maximumLength = maximumLength
        self.pattern = pattern
        self.earliestDate = earliestDate
        self.latestDate = latestDate
    }

    /// Whether no rule is set.
    public var isEmpty: Bool { self == AttributeValidation() }
}

/// A reference from objects of one entity to objects of another (or the same) entity.
///
/// Every relationship has an inverse, named on both sides. To-one on both sides is
/// one-to-one; to-many on one side is one-to-many; to-many on both is many-to-many.
public struct RelationshipDescription: Sendable, Hashable {
    /// The relationship's name, unique within its entity and its ancestors.
    public var name: String
    /// The entity the relationship points to.
    public var destinationEntityName: String
    /// The relationship of the destination entity pointing back.
    public var inverseName: String
    /// Whether the relationship holds a set (or ordered set) of objects.
    public var isToMany: Bool
    /// With ``isToMany``: whether the order of the objects is kept.
    public var isOrdered: Bool
    /// Whether a to-one relationship may be nil (a to-many one may be empty) at save time.
    public var isOptional: Bool
    /// What deleting the source does to the destination objects.
    public var deleteRule: DeleteRule
    /// The fewest objects a to-many relationship must hold at save time.
    public var minCount: Int
    /// The most objects a to-many relationship may hold at save time, or nil for no limit.
    public var maxCount: Int?
    /// The name this relationship had in an earlier model version: a migration carries
    /// its stored links over (a rename).
    public var renamingIdentifier: String?

    /// Describes a relationship.
    public init(
        name: String, destinationEntityName: String, inverseName: String, isToMany: Bool = false,
        isOrdered: Bool = false, isOptional: Bool = true, deleteRule: DeleteRule = .nullify,
        minCount: Int = 0, maxCount: Int? = nil, renamingIdentifier: String? = nil
    ) {
        self.renamingIdentifier = renamingIdentifier
        self.name = name
        self.destinationEntityName = destinationEntityName
        self.inverseName = inverseName
        self.isToMany = isToMany
        self.isOrdered = isOrdered
        self.isOptional = isOptional
        self.deleteRule = deleteRule
        self.minCount = minCount
        self.maxCount = maxCount
    }
}
