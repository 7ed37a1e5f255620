/// Every problem found while building a ``ManagedObjectModel``, reported at once.
public struct ModelError: Error, Sendable, Hashable, CustomStringConvertible {
    /// One problem in the model.
    public enum Problem: Sendable, Hashable, CustomStringConvertible {
        /// Two entities share a name.
        case duplicateEntity(String)
        /// A name is not a valid identifier (letters, digits and `_`, not starting with a digit).
        case invalidName(entity: String, name: String)
        /// Two properties of an entity (or of it and an ancestor) share a name.
        case duplicateProperty(entity: String, name: String)
        /// The superentity does not exist.
        case unknownSuperentity(entity: String, superentity: String)
        /// The superentities form a cycle.
        case inheritanceCycle(entity: String)
        /// A relationship's destination entity does not exist.
        case unknownDestination(entity: String, relationship: String, destination: String)
        /// A relationship names no inverse, or one the destination does not have.
        case missingInverse(entity: String, relationship: String, inverse: String)
        /// The inverse does not point back at this relationship (or at this entity).
        case mismatchedInverse(entity: String, relationship: String, inverse: String)
        /// The default value is not a value of the attribute's type.
        case defaultValueTypeMismatch(entity: String, attribute: String, type: String)
        /// A validation rule does not fit the attribute's type, or is malformed.
        case invalidValidationRule(entity: String, attribute: String, reason: String)
        /// A relationship's counts or flags contradict each other.
        case invalidRelationship(entity: String, relationship: String, reason: String)
        /// The attribute's type cannot be indexed.
        case unindexableAttribute(entity: String, attribute: String, type: String)
        /// A configuration lists an entity the model does not have.
        case unknownConfigurationEntity(configuration: String, entity: String)
        /// A relationship of an entity in a configuration leads to an entity outside it.
        case relationshipLeavesConfiguration(configuration: String, entity: String, relationship: String)
        /// A uniqueness constraint that names no attribute, an unknown or transient one, a
        /// relationship, or an attribute whose type cannot be indexed.
        case invalidUniquenessConstraint(entity: String, constraint: [String], reason: String)

        /// One line describing the problem.
        public var description: String {
            switch self {
            case .duplicateEntity(let name): "two entities are named '\(name)'"
            case .invalidName(let entity, let name): "\(entity): '\(name)' is not a valid name"
            case .duplicateProperty(let entity, let name): "\(entity): more than one property is named '\(name)' (counting inherited ones)"
            case .unknownSuperentity(let entity, let superentity): "\(entity): superentity '\(superentity)' does not exist"
            case .inheritanceCycle(let entity): "\(entity): its superentities form a cycle"
            case .unknownDestination(let entity, let relationship, let destination): "\(entity).\(relationship): destination entity '\(destination)' does not exist"
            case .missingInverse(let entity, let relationship, let inverse): "\(entity).\(relationship): inverse '\(inverse)' does not exist on the destination"
            case .mismatchedInverse(let entity, let relationship, let inverse): "\(entity).\(relationship): inverse '\(inverse)' does not point back to it"
            case .defaultValueTypeMismatch(let entity, let attribute, let type): "\(entity).\(attribute): the default value is not a \(type)"
            case .invalidValidationRule(let entity, let attribute, let reason): "\(entity).\(attribute): \(reason)"
            case .invalidRelationship(let entity, let relationship, let reason): "\(entity).\(relationship): \(reason)"
            case .unindexableAttribute(let entity, let attribute, let type): "\(entity).\(attribute): a \(type) attribute cannot be indexed"
            case .unknownConfigurationEntity(let configuration, let entity): "configuration '\(configuration)': entity '\(entity)' does not exist"
            case .relationshipLeavesConfiguration(let configuration, let entity, let relationship):
                "configuration '\(configuration)': \(entity).\(relationship) leads outside the configuration (a store holds whole object graphs)"
            case .invalidUniquenessConstraint(let entity, let constraint, let reason):
                "\(entity): uniqueness constraint [\(constraint.joined(separator: ", "))]: \(reason)"
            }
        }
    }

    /// Every problem found, in model order.
    public let problems: [Problem]

    /// All problems, one per line.
    public var description: String {
        "the model has \(problems.count) problem(s):\n" + problems.map { "- \($0)" }.joined(separator: "\n")
    }
}
