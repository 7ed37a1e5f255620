import Foundation

/// The entities of a store: what kinds of objects exist, their properties, relationships
/// and inheritance. Immutable and `Sendable` once built.
///
/// ```swift
/// let model = try ManagedObjectModel(entities: [
///     EntityDescription(name: "Folder", attributes: [
///         AttributeDescription(name: "name", type: .string, isOptional: false),
///     ], relationships: [
///         RelationshipDescription(name: "notes", destinationEntityName: "Note",
///                                 inverseName: "folder", isToMany: true, deleteRule: .cascade),
///     ]),
///     EntityDescription(name: "Note", attributes: [
///         AttributeDescription(name: "title", type: .string, isIndexed: true),
///     ], relationships: [
///         RelationshipDescription(name: "folder", destinationEntityName: "Folder", inverseName: "notes"),
///     ]),
/// ])
/// ```
///
/// Building validates the whole model and throws a ``ModelError`` listing every problem.
public final class ManagedObjectModel: Sendable, CustomStringConvertible {
    /// The resolved entities by name.
    public let entitiesByName: [String: EntityDescription]

    /// The version of the model, as the app names it (`"2"`, `"2026.11"`): what a
    /// migration plan orders and a store records. Nil for a model that names none; a
    /// store still tells models apart by their ``versionHash``.
    public let versionIdentifier: String?

    /// Whether any entity has uniqueness constraints (saves of a model without any skip
    /// their checks).
    let hasUniquenessConstraints: Bool

    /// A stable digest of everything that affects storage: entity names and inheritance,
    /// stored attribute names, types and indexes, relationship names, destinations and
    /// kinds. Default values, validation rules, delete rules and transient attributes do
    /// not change it. Sixteen lowercase hexadecimal digits.
    public let versionHash: String

    /// Named subsets of the entities, each for the stores added with that configuration
    /// (``PersistentStoreCoordinator/addPersistentStore(type:configuration:at:options:)``):
    /// the entities listed and every sub-entity of them.
    public let configurations: [String: Set<String>]

    /// Builds and validates a model.
    ///
    /// `configurations` names subsets of the entities, so that different stores hold
    /// different entities (say, `"Cache"` for rebuildable data in an in-memory store).
    /// A configuration includes the sub-entities of the entities it lists, and every
    /// relationship of its entities must stay inside it: a store holds whole object
    /// graphs.
    ///
    /// - Throws: ``ModelError`` with every problem found.
    public init(
        entities: [EntityDescription], configurations: [String: [String]] = [:], versionIdentifier: String? = nil
    ) throws(ModelError) {
        self.versionIdentifier = versionIdentifier
        var problems: [ModelError.Problem] = []
        var byName: [String: EntityDescription] = [:]
        for entity in entities {
            if byName[entity.name] != nil {
                problems.append(.duplicateEntity(entity.name))
            } else {
                byName[entity.name] = entity
            }
            if !Self.isIdentifier(entity.name) { problems.append(.invalidName(entity: entity.name, name: entity.name)) }
        }
        // Inheritance: ancestors, nearest first; unknown superentities and cycles.
        var ancestors: [String: [EntityDescription]] = [:]
        for entity in byName.values {
            var chain: [EntityDescription] = []
            var seen: Set<String> = [entity.name]
            var next = entity.superentityName
            while let parentName = next {
                guard let parent = byName[parentName] else {
                    if parentName == entity.superentityName {
                        problems.append(.unknownSuperentity(entity: entity.name, superentity: parentName))
                    }
                    break
                }
                guard seen.insert(parentName).inserted else {
                    problems.append(.inheritanceCycle(entity: entity.name))
                    chain = []
                    break
                }
                chain.append(parent)
                next = parent.superentityName
            }
            ancestors[entity.name] = chain
        }
        var subentities: [String: [String]] = [:]
        for entity in byName.values {
            if let parent = entity.superentityName, byName[parent] != nil {
                subentities[parent, default: []].append(entity.name)
            }
        }
        var resolved: [String: EntityDescription] = [:]
        for entity in byName.values {
            resolved[entity.name] = EntityDescription(
                resolving: entity, ancestors: ancestors[entity.name] ?? [],
                subentityNames: (subentities[entity.name] ?? []).sorted())
        }
        for entity in entities where byName[entity.name] === entity {
            problems += Self.check(entity, ancestors: ancestors[entity.name] ?? [], in: resolved)
        }
        var expanded: [String: Set<String>] = [:]
        for (name, members) in configurations.sorted(by: { $0.key < $1.key }) {
            var set: Set<String> = []
            for member in members {
                guard resolved[member] != nil else {
                    problems.append(.unknownConfigurationEntity(configuration: name, entity: member))
                    continue
                }
                set.formUnion(resolved.values.filter { $0.isKind(of: member) }.map(\.name))
            }
            for entityName in set.sorted() {
                for relationship in resolved[entityName]?.relationships ?? []
                where !set.contains(relationship.destinationEntityName) && resolved[relationship.destinationEntityName] != nil {
                    problems.append(.relationshipLeavesConfiguration(
                        configuration: name, entity: entityName, relationship: relationship.name))
                }
            }
            expanded[name] = set
        }
        guard problems.isEmpty else { throw ModelError(problems: problems) }
        entitiesByName = resolved
        hasUniquenessConstraints = resolved.values.contains { !$0.uniquenessConstraints.isEmpty }
        versionHash = Self.hash(resolved)
        self.configurations = expanded
    }

    /// The entities a store of `configuration` holds: every entity for nil.
    ///
    /// - Throws: ``StrataError/unknownConfiguration(_:)``.
    func entityNames(inConfiguration configuration: String?) throws(StrataError) -> Set<String> {
        guard let configuration else { return Set(entitiesByName.keys) }
        guard let names = configurations[configuration] else { throw .unknownConfiguration(configuration) }
        return names
    }

    /// Builds a model from typed ``ManagedObject`` subclasses: their entities, those of
    /// their superclasses and of every class their relationships reach.
    ///
    /// ```swift
    /// let model = try ManagedObjectModel(types: [Folder.self, Note.self])
    /// ```
    ///
    /// List sub-entities explicitly: nothing in a superclass points to them.
    ///
    /// - Throws: ``ModelError`` with every problem found.
    public convenience init(
        types: [ManagedObject.Type], configurations: [String: [String]] = [:], versionIdentifier: String? = nil
    ) throws(ModelError) {
        var pending = types
        var seen: Set<ObjectIdentifier> = []
        var entities: [EntityDescription] = []
        while let type = pending.popLast() {
            guard seen.insert(ObjectIdentifier(type)).inserted else { continue }
            let description = ClassEntityRegistry.shared.description(of: type)
            entities.append(description.declared)
            pending += description.destinations
            if let superclass = description.superclass { pending.append(superclass) }
        }
        try self.init(entities: entities.sorted { $0.name < $1.name }, configurations: configurations, versionIdentifier: versionIdentifier)
    }

    /// The entities, sorted by name.
    public var entities: [EntityDescription] {
        entitiesByName.values.sorted { $0.name < $1.name }
    }

    /// The names of `entityName` and every entity that inherits from it, sorted;
    /// what a fetch of `entityName` covers when it includes sub-entities.
    public func entityNames(kindOf entityName: String) -> [String] {
        entitiesByName.values.filter { $0.isKind(of: entityName) }.map(\.name).sorted()
    }

    /// `ManagedObjectModel(Folder, Note) #hash`.
    public var description: String {
        "ManagedObjectModel(\(entities.map(\.name).joined(separator: ", "))) #\(versionHash)"
    }

    // MARK: Validation

    private static func check(
        _ entity: EntityDescription, ancestors: [EntityDescription], in entities: [String: EntityDescription]
    ) -> [ModelError.Problem] {
        var problems: [ModelError.Problem] = []
        var names = Set(ancestors.flatMap { $0.declaredAttributes.map(\.name) + $0.declaredRelationships.map(\.name) })
        for name in entity.declaredAttributes.map(\.name) + entity.declaredRelationships.map(\.name) {
            if !isIdentifier(name) { problems.append(.invalidName(entity: entity.name, name: name)) }
            if !names.insert(name).inserted { problems.append(.duplicateProperty(entity: entity.name, name: name)) }
        }
        for attribute in entity.declaredAttributes {
            problems += check(attribute, of: entity.name)
        }
        for relationship in entity.declaredRelationships {
            problems += check(relationship, of: entity, in: entities)
        }
        let resolved = entities[entity.name]
        var seen: Set<[String]> = []
        for constraint in entity.declaredUniquenessConstraints {
            func bad(_ reason: String) {
                problems.append(.invalidUniquenessConstraint(entity: entity.name, constraint: constraint, reason: reason))
            }
            if constraint.isEmpty { bad("it names no attribute") }
            if Set(constraint).count != constraint.count { bad("it names an attribute twice") }
            if !seen.insert(constraint).inserted { bad("it is declared twice") }
            for name in constraint {
                guard let attribute = resolved?.attribute(named: name) else {
                    bad(resolved?.relationship(named: name) != nil
                        ? "'\(name)' is a relationship; constraints hold attributes only" : "the entity has no attribute '\(name)'")
                    continue
                }
                if attribute.isTransient { bad("'\(name)' is transient: it is not stored") }
                if attribute.type.indexKeyKind == nil { bad("a \(attribute.type) attribute ('\(name)') cannot be indexed") }
            }
        }
        return problems
    }

    private static func check(_ attribute: AttributeDescription, of entity: String) -> [ModelError.Problem] {
        var problems: [ModelError.Problem] = []
        let name = attribute.name
        if let value = attribute.defaultValue, !attribute.type.accepts(value) {
            problems.append(.defaultValueTypeMismatch(entity: entity, attribute: name, type: attribute.type.description))
        }
        if attribute.isIndexed && (attribute.type.indexKeyKind == nil || attribute.isTransient) {
            problems.append(.unindexableAttribute(
                entity: entity, attribute: name, type: attribute.isTransient ? "transient" : attribute.type.description))
        }
        let rules = attribute.validation
        let numeric: Bool
        switch attribute.type {
        case .integer16, .integer32, .integer64, .double, .float, .decimal: numeric = true
        default: numeric = false
        }
        func bad(_ reason: String) { problems.append(.invalidValidationRule(entity: entity, attribute: name, reason: reason)) }
        if (rules.minimum != nil || rules.maximum != nil) && !numeric { bad("a minimum or maximum needs a numeric attribute") }
        if let low = rules.minimum, let high = rules.maximum, low > high { bad("the minimum \(low) is above the maximum \(high)") }
        let lengthRules = rules.minimumLength != nil || rules.maximumLength != nil || rules.pattern != nil
        if lengthRules && attribute.type != .string { bad("a length or pattern rule needs a string attribute") }
        if let low = rules.minimumLength, low < 0 { bad("the minimum length \(low) is negative") }
        if let low = rules.minimumLength, let high = rules.maximumLength, low > high {
            bad("the minimum length \(low) is above the maximum length \(high)")
        }
        if let pattern = rules.pattern, (try? NSRegularExpression(pattern: pattern)) == nil {
            bad("the pattern '\(pattern)' is not a valid regular expression")
        }
        if (rules.earliestDate != nil || rules.latestDate != nil) && attribute.type != .date { bad("a date range needs a date attribute") }
        if let early = rules.earliestDate, let late = rules.latestDate, early > late { bad("the earliest date is after the latest date") }
        return problems
    }

    private static func check(
        _ relationship: RelationshipDescription, of entity: EntityDescription, in entities: [String: EntityDescription]
    ) -> [ModelError.Problem] {
        var problems: [ModelError.Problem] = []
        let name = relationship.name
        func bad(_ reason: String) { problems.append(.invalidRelationship(entity: entity.name, relationship: name, reason: reason)) }
        if relationship.isOrdered && !relationship.isToMany { bad("only a to-many relationship can be ordered") }
        if relationship.minCount < 0 { bad("the minimum count \(relationship.minCount) is negative") }
        if let max = relationship.maxCount, max < relationship.minCount {
            bad("the maximum count \(max) is below the minimum count \(relationship.minCount)")
        }
        if !relationship.isToMany && (relationship.minCount > 1 || (relationship.maxCount ?? 1) != 1) {
            bad("a to-one relationship cannot have counts other than 0...1")
        }
        guard let destination = entities[relationship.destinationEntityName] else {
            problems.append(.unknownDestination(entity: entity.name, relationship: name, destination: relationship.destinationEntityName))
            return problems
        }
        guard !relationship.inverseName.isEmpty, let inverse = destination.relationship(named: relationship.inverseName) else {
            problems.append(.missingInverse(entity: entity.name, relationship: name, inverse: relationship.inverseName))
            return problems
        }
        // The inverse must name this relationship and point at this entity or an ancestor of it.
        let resolved = entities[entity.name] ?? entity
        if inverse.inverseName != name || !resolved.isKind(of: inverse.destinationEntityName) {
            problems.append(.mismatchedInverse(entity: entity.name, relationship: name, inverse: relationship.inverseName))
        }
        return problems
    }

    private static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }

    // MARK: Version hash

    /// FNV-1a (64-bit) over a canonical text of everything that affects storage.
    private static func hash(_ entities: [String: EntityDescription]) -> String {
        var text = "strata-model-v1\n"
        for entity in entities.values.sorted(by: { $0.name < $1.name }) {
            text += "entity \(entity.name) < \(entity.superentityName ?? "-") abstract=\(entity.isAbstract)\n"
            for attribute in entity.declaredAttributes.filter({ !$0.isTransient }).sorted(by: { $0.name < $1.name }) {
                text += "  attribute \(attribute.name) \(attribute.type) indexed=\(attribute.isIndexed)\n"
            }
            for relationship in entity.declaredRelationships.sorted(by: { $0.name < $1.name }) {
                text += "  relationship \(relationship.name) -> \(relationship.destinationEntityName).\(relationship.inverseName)"
                text += " toMany=\(relationship.isToMany) ordered=\(relationship.isOrdered)\n"
            }
            // Only when there are some, so that models without constraints keep their hash.
            for constraint in entity.declaredUniquenessConstraints.map({ $0.joined(separator: ",") }).sorted() {
                text += "  unique \(constraint)\n"
            }
        }
        var digest: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in text.utf8 {
            digest ^= UInt64(byte)
            digest = digest &* 0x0000_0100_0000_01B3
        }
        let hex = String(digest, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
