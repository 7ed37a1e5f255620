import Foundation

/// Checking a request against the model before it runs: every key must exist, naming the
/// key and the entity when it does not.
extension FetchRequest {
    /// Checks the entity, the predicate's key paths, the sort keys, the properties to
    /// fetch and the prefetching key paths against `model`.
    ///
    /// - Throws: the error a predicate or sort descriptor built from a refused key path
    ///   carries (a ``FetchPredicateError``; the predicate's before anything else);
    ///   ``StrataError/unknownEntity(_:)``, or ``StrataError/unknownKey(key:entity:)``
    ///   naming the first unknown key and the entity it was looked up in; a
    ///   ``FetchPredicateError`` for a variable left unsubstituted.
    func validate(in model: ManagedObjectModel) throws -> EntityDescription {
        try validated(in: model).entity
    }

    /// ``validate(in:)``, also returning what a dictionary fetch runs by: its shape and its
    /// having condition (nil for other result types), so that they are made once.
    ///
    /// - Throws: as ``validate(in:)``; for a having condition, what it throws
    ///   (``StrataError/invalidFetchRequest(_:)`` for a key that is not a result key, a
    ///   ``FetchPredicateError`` for a variable left unsubstituted).
    func validated(in model: ManagedObjectModel) throws -> (entity: EntityDescription, shape: DictionaryShape?, having: HavingCondition?) {
        if let error = predicate?.deferredError { throw error }
        // A descriptor built from a refused key path says so before any key is looked up.
        if let error = sortDescriptors.lazy.compactMap(\.deferredError).first { throw error }
        guard let entity = model.entitiesByName[entityName] else { throw StrataError.unknownEntity(entityName) }
        if let predicate {
            if let variable = predicate.variableNames.sorted().first {
                throw FetchPredicateError(kind: .missingVariable, message: "the variable $\(variable) has no value")
            }
            try Self.validate(predicate.node, from: entity, in: model)
        }
        // Grouped dictionary results sort by their own keys (checked with their shape).
        let dictionaryShape = resultType == .dictionary ? try DictionaryShape(self, entity: entity, model: model) : nil
        var having: HavingCondition?
        if let dictionaryShape, let havingPredicate {
            if let variable = havingPredicate.variableNames.sorted().first {
                throw FetchPredicateError(kind: .missingVariable, message: "the variable $\(variable) of havingPredicate has no value")
            }
            having = try HavingCondition(havingPredicate, names: Set(dictionaryShape.resultNames))
        }
        if dictionaryShape?.isAggregating != true {
            for descriptor in sortDescriptors {
                try Self.validateSortKey(descriptor, from: entity, in: model)
            }
        }
        if resultType != .dictionary {
            let aggregates = propertiesToFetch.contains { if case .expression = $0 { true } else { false } }
            if aggregates || !propertiesToGroupBy.isEmpty || havingPredicate != nil {
                throw StrataError.invalidFetchRequest("aggregates, propertiesToGroupBy and havingPredicate need resultType .dictionary")
            }
            for key in propertiesToFetch.map(\.name) where entity.attribute(named: key) == nil && entity.relationship(named: key) == nil {
                throw StrataError.unknownKey(key: key, entity: entity.name)
            }
        }
        for path in relationshipKeyPathsForPrefetching {
            var current = entity
            for component in path.split(separator: ".").map(String.init) {
                guard let relationship = current.relationship(named: component),
                      let next = model.entitiesByName[relationship.destinationEntityName]
                else { throw StrataError.unknownKey(key: component, entity: current.name) }
                current = next
            }
        }
        return (entity, dictionaryShape, having)
    }

    private static func validate(_ node: PredicateNode, from entity: EntityDescription, in model: ManagedObjectModel) throws {
        switch node {
        case .constant: return
        case .not(let inner): try validate(inner, from: entity, in: model)
        case .and(let nodes), .or(let nodes): for inner in nodes { try validate(inner, from: entity, in: model) }
        case .comparison(let comparison):
            try validate(comparison.left, from: entity, in: model)
            try validate(comparison.right, from: entity, in: model)
        }
    }

    private static func validate(_ expression: PredicateExpression, from entity: EntityDescription, in model: ManagedObjectModel) throws {
        switch expression {
        case .constant, .variable: return
        case .aggregate(let expressions): for inner in expressions { try validate(inner, from: entity, in: model) }
        case .keyPath(let components): try validateKeyPath(components[...], from: entity, in: model)
        }
    }

    /// A key path is valid when each component is a property of the entity reached so
    /// far (relationships lead on, an attribute ends the path), with collection operators
    /// anywhere after a to-many step.
    private static func validateKeyPath(_ components: ArraySlice<String>, from entity: EntityDescription, in model: ManagedObjectModel) throws {
        guard let key = components.first else { return }
        let rest = components.dropFirst()
        if key == "SELF" || CollectionOperator(rawValue: key) != nil {
            return try validateKeyPath(rest, from: entity, in: model)
        }
        if entity.attribute(named: key) != nil {
            guard rest.allSatisfy({ CollectionOperator(rawValue: $0) != nil }) else {
                throw StrataError.unknownKey(key: rest.joined(separator: "."), entity: "\(entity.name).\(key) (an attribute)")
            }
            return
        }
        guard let relationship = entity.relationship(named: key),
              let destination = model.entitiesByName[relationship.destinationEntityName]
        else { throw StrataError.unknownKey(key: key, entity: entity.name) }
        try validateKeyPath(rest, from: destination, in: model)
    }

    /// Sort keys follow to-one relationships only and end at an attribute; a descriptor made
    /// from a refused key path throws its error.
    private static func validateSortKey(
        _ descriptor: FetchSortDescriptor, from entity: EntityDescription, in model: ManagedObjectModel
    ) throws {
        if let error = descriptor.deferredError { throw error }
        let components = descriptor.components
        var current = entity
        for (index, key) in components.enumerated() {
            if current.attribute(named: key) != nil, index == components.count - 1 { return }
            guard let relationship = current.relationship(named: key), !relationship.isToMany,
                  index < components.count - 1,
                  let next = model.entitiesByName[relationship.destinationEntityName]
            else { throw StrataError.unknownKey(key: key, entity: current.name) }
            current = next
        }
        throw StrataError.unknownKey(key: components.joined(separator: "."), entity: entity.name)
    }
}

/// Sorting in memory with the evaluator's order (the planner's index scans yield the same).
enum FetchSorting {
    /// Whether `a` comes before `b` under `descriptors`, ties broken by object ID order
    /// (primary key for saved objects).
    static func precedes<Subject: PredicateSubject>(_ a: Subject, _ b: Subject, by descriptors: [FetchSortDescriptor]) throws -> Bool {
        for descriptor in descriptors {
            if let error = descriptor.deferredError { throw error }
            let left = try PredicateEvaluator.resolve(.keyPath(descriptor.components), on: a).valueForm
            let right = try PredicateEvaluator.resolve(.keyPath(descriptor.components), on: b).valueForm
            let order = compare(left, right, descriptor.comparison)
            if order != .orderedSame {
                return (order == .orderedAscending) == descriptor.ascending
            }
        }
        return tieBreak(a.predicateObjectID, b.predicateObjectID)
    }

    /// nil first, then values in the evaluator's order, which is the order of an index
    /// on the attribute: a NaN number or date sorts after every other number or date,
    /// as in an index. Values of kinds that do not compare are equal.
    static func compare(_ left: PredicateValue, _ right: PredicateValue, _ comparison: FetchSortDescriptor.Comparison) -> ComparisonResult {
        switch (left, right) {
        case (.null, .null): return .orderedSame
        case (.null, _): return .orderedAscending
        case (_, .null): return .orderedDescending
        default:
            switch (left.isNaN, right.isNaN) {
            case (true, true): return .orderedSame
            case (true, false): return right.number != nil || right.isDate ? .orderedDescending : .orderedSame
            case (false, true): return left.number != nil || left.isDate ? .orderedAscending : .orderedSame
            case (false, false): break
            }
            let options: PredicateComparison.Options = switch comparison {
            case .literal: []
            case .caseInsensitive: [.caseInsensitive]
            case .localized: [.caseInsensitive, .diacriticInsensitive]
            }
            return PredicateEvaluator.order(left, right, options) ?? .orderedSame
        }
    }

    /// Saved objects by entity name, then primary key (the order of a scan of the
    /// store), then unsaved ones by their temporary identity.
    static func tieBreak(_ a: ManagedObjectID, _ b: ManagedObjectID) -> Bool {
        a.precedesInStoreOrder(b)
    }
}

extension PredicateValue {
    /// Whether the value is a NaN number, or a date whose time is NaN.
    var isNaN: Bool {
        switch self {
        case .double(let d): d.isNaN
        case .date(let date): date.timeIntervalSinceReferenceDate.isNaN
        default: false
        }
    }

    /// Whether the value is a date.
    var isDate: Bool {
        if case .date = self { return true }
        return false
    }
}
