import Foundation

/// What a ``FetchRequest/ResultType/dictionary`` fetch reads and computes, checked
/// against the model: the key paths it needs (resolved to slots), and the aggregates.
struct DictionaryShape {
    /// One step of a key path: a property of the entity reached so far.
    enum Step: Hashable {
        case attribute(name: String, type: AttributeType)
        case toOne(name: String, destination: String)
        case toMany(name: String)
    }

    /// A key path of the fetched entity, resolved.
    struct Path: Hashable {
        let name: String
        let steps: [Step]
        /// The attribute it ends at, if it does.
        var attributeType: AttributeType? {
            if case .attribute(_, let type)? = steps.last { return type }
            return nil
        }
    }

    /// The key paths needed, each once: fetched, grouped, aggregated and sorted.
    private(set) var paths: [Path] = []
    /// The positions in `paths` of the result's key paths (fetched ones, or the grouped
    /// ones when only aggregates are fetched), with their result names.
    private(set) var outputs: [(name: String, path: Int)] = []
    /// The aggregates, with the position of the path each aggregates.
    private(set) var aggregates: [(expression: ExpressionDescription, path: Int)] = []
    /// The positions of the grouped key paths.
    private(set) var groups: [Int] = []
    /// The positions of the sort key paths, for sorting rows (a fetch without groups or
    /// aggregates).
    private(set) var sortPaths: [Int] = []
    /// Whether results are groups (grouped key paths, or aggregates over everything).
    var isAggregating: Bool { !groups.isEmpty || !aggregates.isEmpty }
    /// The names of the result keys.
    var resultNames: [String] { outputs.map(\.name) + aggregates.map(\.expression.name) }

    /// The shape of `request`, a dictionary fetch of `entity`.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` for a key path the entity does
    ///   not have; ``StrataError/invalidFetchRequest(_:)`` for parts that do not fit
    ///   together (see ``FetchRequest/propertiesToGroupBy``, ``ExpressionDescription``).
    init<Result>(_ request: FetchRequest<Result>, entity: EntityDescription, model: ManagedObjectModel) throws {
        var groupNames: [String] = []
        for property in request.propertiesToGroupBy {
            guard case .keyPath(let path) = property else {
                throw StrataError.invalidFetchRequest("propertiesToGroupBy takes key paths, not the expression \(property)")
            }
            let resolved = try Self.resolve(path, from: entity, in: model)
            if case .toMany? = resolved.steps.last { throw StrataError.invalidFetchRequest("cannot group by the to-many relationship \(path)") }
            groups.append(position(of: resolved))
            groupNames.append(path)
        }
        var names = Set<String>()
        let fetched = request.propertiesToFetch.isEmpty
            ? (groupNames.isEmpty ? entity.attributes.filter { !$0.isTransient }.map { FetchProperty.keyPath($0.name) } : groupNames.map(FetchProperty.keyPath))
            : request.propertiesToFetch
        for property in fetched {
            guard names.insert(property.name).inserted else {
                throw StrataError.invalidFetchRequest("two properties to fetch are named \(property.name)")
            }
            switch property {
            case .keyPath(let path):
                let resolved = try Self.resolve(path, from: entity, in: model)
                if !groupNames.isEmpty && !groupNames.contains(path) {
                    throw StrataError.invalidFetchRequest("\(path) is fetched but not in propertiesToGroupBy: each result is a group")
                }
                outputs.append((path, position(of: resolved)))
            case .expression(let expression):
                let resolved = try Self.resolve(expression.keyPath, from: entity, in: model, allowingSelf: expression.function == .count)
                try Self.check(expression, resolved)
                aggregates.append((expression, position(of: resolved)))
            }
        }
        if !aggregates.isEmpty && groups.isEmpty, let plain = outputs.first {
            throw StrataError.invalidFetchRequest(
                "\(plain.name) is fetched with aggregates but not grouped: add it to propertiesToGroupBy, or fetch aggregates only")
        }
        if request.havingPredicate != nil && groups.isEmpty {
            throw StrataError.invalidFetchRequest("havingPredicate needs propertiesToGroupBy")
        }
        if isAggregating {
            let results = Set(resultNames)
            for descriptor in request.sortDescriptors where !results.contains(descriptor.key) {
                throw StrataError.invalidFetchRequest("grouped results sort by result keys; \(descriptor.key) is not one")
            }
        } else {
            for descriptor in request.sortDescriptors {
                sortPaths.append(position(of: try Self.resolve(descriptor.key, from: entity, in: model)))
            }
        }
    }

    private mutating func position(of path: Path) -> Int {
        if let index = paths.firstIndex(of: path) { return index }
        paths.append(path)
        return paths.count - 1
    }

    /// Checks that `expression`'s function applies to what its key path ends at.
    private static func check(_ expression: ExpressionDescription, _ path: Path) throws {
        switch expression.function {
        case .count:
            if case .toMany? = path.steps.last {
                throw StrataError.invalidFetchRequest("count takes an attribute, a to-one relationship or self, not the to-many \(expression.keyPath)")
            }
        case .sum, .average:
            guard let type = path.attributeType, type.isNumeric else {
                throw StrataError.invalidFetchRequest("\(expression.function.rawValue) of \(expression.keyPath) needs a numeric attribute")
            }
        case .min, .max:
            guard let type = path.attributeType, !type.isTransformableType else {
                throw StrataError.invalidFetchRequest("\(expression.function.rawValue) of \(expression.keyPath) needs an attribute that orders")
            }
        }
    }

    /// `keyPath` resolved from `entity`: to-one relationships lead on; it ends at an
    /// attribute, or at a relationship (a to-many only as its first step).
    static func resolve(_ keyPath: String, from entity: EntityDescription, in model: ManagedObjectModel, allowingSelf: Bool = false) throws -> Path {
        if keyPath == "self" || keyPath == "SELF" {
            guard allowingSelf else { throw StrataError.invalidFetchRequest("self is only counted (a count expression)") }
            return Path(name: keyPath, steps: [])
        }
        var steps: [Step] = []
        var current = entity
        let components = keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        for (index, component) in components.enumerated() {
            let last = index == components.count - 1
            if let attribute = current.attribute(named: component) {
                guard last else { throw StrataError.unknownKey(key: components[(index + 1)...].joined(separator: "."), entity: "\(current.name).\(component) (an attribute)") }
                if attribute.isTransient {
                    throw StrataError.invalidFetchRequest("\(keyPath) is transient: it is not stored, so a dictionary fetch cannot read it")
                }
                steps.append(.attribute(name: component, type: attribute.type))
            } else if let relationship = current.relationship(named: component), let destination = model.entitiesByName[relationship.destinationEntityName] {
                if relationship.isToMany {
                    guard last, index == 0 else {
                        throw StrataError.invalidFetchRequest("\(keyPath) goes through the to-many relationship \(component): a dictionary result holds one value per key")
                    }
                    steps.append(.toMany(name: component))
                } else {
                    steps.append(.toOne(name: component, destination: destination.name))
                    current = destination
                }
            } else {
                throw StrataError.unknownKey(key: component, entity: current.name)
            }
        }
        return Path(name: keyPath, steps: steps)
    }
}

extension AttributeType {
    /// Whether the type is a transformable one (its values do not order).
    var isTransformableType: Bool {
        if case .transformable = self { true } else { false }
    }

    /// Whether values of the type are numbers (sums and averages apply).
    var isNumeric: Bool {
        switch self {
        case .integer16, .integer32, .integer64, .double, .float, .decimal: true
        default: false
        }
    }
}
