import Foundation

/// What the evaluator reads from an object: its entity, ID, attributes and related
/// objects. Managed objects conform (in-memory evaluation of pending changes); the
/// store's rows will too (filtering during a scan), so both follow the same rules.
protocol PredicateSubject {
    /// The object's entity.
    var predicateEntity: EntityDescription { get }
    /// The object's ID (what a key path ending at the object compares as).
    var predicateObjectID: ManagedObjectID { get }
    /// The value of attribute `name`, nil when nil.
    func predicateAttribute(_ name: String) throws -> AttributeValue?
    /// The destinations of relationship `name` (zero or one for a to-one).
    func predicateDestinations(_ name: String) throws -> [Self]
}

/// The one evaluator of ``FetchPredicate``s, with Core Data's comparison semantics:
///
/// - nil equals only nil; an ordering comparison with nil is false;
/// - integers, floating-point numbers and decimals compare numerically with each other
///   (a boolean is 0 or 1); dates by time;
/// - strings compare by UTF-8 bytes (the order of an index), `[c]` ignoring case and
///   `[d]` ignoring diacritics;
/// - a key path through a to-many relationship yields a collection, which `ANY`,
///   `ALL` and `NONE` quantify and `@count`, `@sum`, `@avg`, `@min`, `@max` reduce.
enum PredicateEvaluator {
    /// A resolved operand: one value, or the values of a collection.
    enum Operand {
        case value(PredicateValue)
        case collection([PredicateValue])

        var values: [PredicateValue] {
            switch self {
            case .value(.array(let values)): values
            case .value(let value): [value]
            case .collection(let values): values
            }
        }
    }

    /// Whether `subject` satisfies `node`. A variable left unsubstituted, or a key the
    /// entity lacks, throws ``FetchPredicateError``; so does what the subject throws.
    static func evaluate<Subject: PredicateSubject>(_ node: PredicateNode, on subject: Subject) throws -> Bool {
        switch node {
        case .constant(let value): return value
        case .not(let inner): return try !evaluate(inner, on: subject)
        case .and(let nodes):
            for inner in nodes where try !evaluate(inner, on: subject) { return false }
            return true
        case .or(let nodes):
            for inner in nodes where try evaluate(inner, on: subject) { return true }
            return false
        case .comparison(let comparison):
            return try evaluate(comparison, on: subject)
        }
    }

    private static func evaluate<Subject: PredicateSubject>(_ comparison: PredicateComparison, on subject: Subject) throws -> Bool {
        let left = try resolve(comparison.left, on: subject)
        let right = try resolve(comparison.right, on: subject)
        switch comparison.modifier {
        case .direct:
            if case .collection(let values) = left, !isCollectionOperator(comparison.op) {
                // Core Data refuses a to-many key path without a modifier; as a value it
                // is the array of values (so `tags.label == nil` compares an array).
                return compare(.array(values), comparison.op, right, comparison.options)
            }
            return compare(left.valueForm, comparison.op, right, comparison.options)
        case .any:
            return left.values.contains { compare($0, comparison.op, right, comparison.options) }
        case .all:
            return left.values.allSatisfy { compare($0, comparison.op, right, comparison.options) }
        case .none:
            return !left.values.contains { compare($0, comparison.op, right, comparison.options) }
        }
    }

    private static func isCollectionOperator(_ op: PredicateComparison.Operator) -> Bool {
        op == .contains || op == .in
    }

    // MARK: Operands

    static func resolve<Subject: PredicateSubject>(_ expression: PredicateExpression, on subject: Subject) throws -> Operand {
        switch expression {
        case .constant(let value): return .value(value)
        case .variable(let name):
            throw FetchPredicateError(kind: .missingVariable, message: "the variable $\(name) has no value")
        case .aggregate(let expressions):
            return .value(.array(try expressions.map { try resolve($0, on: subject).valueForm }))
        case .keyPath(let components):
            return try resolve(components[...], from: [subject], isCollection: false)
        }
    }

    /// Follows `components` from `subjects` (one object, or a collection of them).
    private static func resolve<Subject: PredicateSubject>(
        _ components: ArraySlice<String>, from subjects: [Subject], isCollection: Bool
    ) throws -> Operand {
        guard let key = components.first else {
            let ids = subjects.map { PredicateValue.objectID($0.predicateObjectID) }
            return isCollection ? .collection(ids) : .value(ids.first ?? .null)
        }
        let rest = components.dropFirst()
        if let op = CollectionOperator(rawValue: key) {
            return .value(try reduce(op, rest: rest, over: subjects, isCollection: isCollection))
        }
        if key == "SELF" { return try resolve(rest, from: subjects, isCollection: isCollection) }
        guard let entity = subjects.first?.predicateEntity else {
            return isCollection ? .collection([]) : .value(.null)
        }
        if entity.attribute(named: key) != nil {
            guard rest.isEmpty || rest.first.flatMap(CollectionOperator.init(rawValue:)) != nil else {
                throw FetchPredicateError(kind: .unknownKey, message: "\(entity.name).\(key) is an attribute: the key path cannot go on to '\(rest.joined(separator: "."))'")
            }
            let values = try subjects.map { PredicateValue(try $0.predicateAttribute(key)) }
            if let op = rest.first.flatMap(CollectionOperator.init(rawValue:)) {
                return .value(try reduce(op, values: values, isCollection: isCollection))
            }
            return isCollection ? .collection(values) : .value(values.first ?? .null)
        }
        guard let relationship = entity.relationship(named: key) else {
            throw FetchPredicateError(kind: .unknownKey, message: "entity '\(entity.name)' has no property named '\(key)'")
        }
        var next: [Subject] = []
        for subject in subjects { next += try subject.predicateDestinations(key) }
        if !relationship.isToMany && !isCollection {
            guard !next.isEmpty else { return .value(.null) }
            return try resolve(rest, from: next, isCollection: false)
        }
        return try resolve(rest, from: next, isCollection: true)
    }

    /// `@count`, `@sum`, … applied where the key path is at a collection of objects.
    private static func reduce<Subject: PredicateSubject>(
        _ op: CollectionOperator, rest: ArraySlice<String>, over subjects: [Subject], isCollection: Bool
    ) throws -> PredicateValue {
        if op == .count && rest.isEmpty { return .integer(Int64(subjects.count)) }
        let values = try resolve(rest, from: subjects, isCollection: true).values
        return try reduce(op, values: values, isCollection: true)
    }

    private static func reduce(_ op: CollectionOperator, values: [PredicateValue], isCollection: Bool) throws -> PredicateValue {
        let present = values.filter { $0 != .null }
        switch op {
        case .count:
            return .integer(Int64(values.count))
        case .min:
            return present.min { order($0, $1, []) == .orderedAscending } ?? .null
        case .max:
            return present.max { order($0, $1, []) == .orderedAscending } ?? .null
        case .sum, .avg:
            var exact = true
            var integerSum: Int64 = 0
            var doubleSum = 0.0
            for value in present {
                guard let number = value.number else {
                    throw FetchPredicateError(kind: .unsupported, message: "\(op.rawValue) needs numbers, not \(value)")
                }
                doubleSum += number.double
                if exact, case .integer(let n) = number {
                    let (sum, overflow) = integerSum.addingReportingOverflow(n)
                    if overflow { exact = false } else { integerSum = sum }
                } else {
                    exact = false
                }
            }
            if op == .sum { return exact ? .integer(integerSum) : .double(doubleSum) }
            return present.isEmpty ? .null : .double(doubleSum / Double(present.count))
        }
    }

    // MARK: Comparisons

    /// `left op right` for one left value.
    static func compare(
        _ left: PredicateValue, _ op: PredicateComparison.Operator, _ right: Operand,
        _ options: PredicateComparison.Options
    ) -> Bool {
        let rightValue = right.valueForm
        switch op {
        case .equal: return equal(left, rightValue, options)
        case .notEqual: return !equal(left, rightValue, options)
        case .less: return order(left, rightValue, options) == .orderedAscending
        case .lessOrEqual: return [.orderedAscending, .orderedSame].contains(order(left, rightValue, options))
        case .greater: return order(left, rightValue, options) == .orderedDescending
        case .greaterOrEqual: return [.orderedDescending, .orderedSame].contains(order(left, rightValue, options))
        case .between:
            let bounds = right.values
            guard bounds.count == 2 else { return false }
            return [.orderedDescending, .orderedSame].contains(order(left, bounds[0], options))
                && [.orderedAscending, .orderedSame].contains(order(left, bounds[1], options))
        case .in:
            if case .value(.string(let haystack)) = right, case .string(let needle) = left {
                return fold(haystack, options).contains(fold(needle, options))
            }
            return right.values.contains { equal(left, $0, options) }
        case .contains:
            if case .array(let values) = left { return values.contains { equal($0, rightValue, options) } }
            guard case .string(let haystack) = left, case .string(let needle) = rightValue else { return false }
            return needle.isEmpty || fold(haystack, options).contains(fold(needle, options))
        case .beginsWith:
            guard case .string(let string) = left, case .string(let prefix) = rightValue else { return false }
            return fold(string, options).utf8.starts(with: fold(prefix, options).utf8)
        case .endsWith:
            guard case .string(let string) = left, case .string(let suffix) = rightValue else { return false }
            return fold(string, options).utf8.reversed().starts(with: fold(suffix, options).utf8.reversed())
        case .like:
            guard case .string(let string) = left, case .string(let pattern) = rightValue else { return false }
            return like(Array(fold(string, options).unicodeScalars), Array(fold(pattern, options).unicodeScalars))
        case .matches:
            guard case .string(let string) = left, case .string(let pattern) = rightValue else { return false }
            return PatternCache.shared.wholeMatch(
                pattern, fold(string, options.subtracting(.caseInsensitive)),
                caseInsensitive: options.contains(.caseInsensitive))
        }
    }

    /// Equality with numeric promotion and string options; nil equals only nil.
    static func equal(_ left: PredicateValue, _ right: PredicateValue, _ options: PredicateComparison.Options) -> Bool {
        switch (left, right) {
        case (.null, .null): return true
        case (.null, _), (_, .null): return false
        case (.string(let a), .string(let b)): return options.isEmpty ? a.utf8.elementsEqual(b.utf8) : fold(a, options) == fold(b, options)
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { equal($0, $1, options) }
        default:
            if let a = left.number, let b = right.number { return a.compare(b) == .orderedSame }
            return order(left, right, options) == .orderedSame && sameKind(left, right)
        }
    }

    /// The order of two values of comparable kinds; nil when they do not compare (which
    /// makes every ordering comparison false).
    static func order(_ left: PredicateValue, _ right: PredicateValue, _ options: PredicateComparison.Options) -> ComparisonResult? {
        switch (left, right) {
        case (.string(let a), .string(let b)):
            let (x, y) = options.isEmpty ? (a, b) : (fold(a, options), fold(b, options))
            return compareBytes(Array(x.utf8), Array(y.utf8))
        case (.date(let a), .date(let b)):
            // By time; a date whose time is NaN compares with nothing, like a NaN number.
            return PredicateNumber.double(a.timeIntervalSinceReferenceDate)
                .compare(.double(b.timeIntervalSinceReferenceDate))
        case (.data(let a), .data(let b)), (.transformable(let a), .transformable(let b)):
            return compareBytes(Array(a), Array(b))
        case (.uuid(let a), .uuid(let b)):
            return compareBytes(withUnsafeBytes(of: a.uuid) { Array($0) }, withUnsafeBytes(of: b.uuid) { Array($0) })
        case (.uri(let a), .uri(let b)):
            return compareBytes(Array(a.absoluteString.utf8), Array(b.absoluteString.utf8))
        case (.objectID(let a), .objectID(let b)):
            return a == b ? .orderedSame : compareBytes(Array(a.description.utf8), Array(b.description.utf8))
        default:
            guard let a = left.number, let b = right.number else { return nil }
            return a.compare(b)
        }
    }

    private static func sameKind(_ left: PredicateValue, _ right: PredicateValue) -> Bool {
        switch (left, right) {
        case (.date, .date), (.data, .data), (.transformable, .transformable), (.uuid, .uuid), (.uri, .uri),
             (.objectID, .objectID):
            true
        default: false
        }
    }

    static func compareBytes(_ a: [UInt8], _ b: [UInt8]) -> ComparisonResult {
        for (x, y) in zip(a, b) where x != y { return x < y ? .orderedAscending : .orderedDescending }
        return a.count == b.count ? .orderedSame : a.count < b.count ? .orderedAscending : .orderedDescending
    }

    /// The string under `[c]` / `[d]`.
    static func fold(_ string: String, _ options: PredicateComparison.Options) -> String {
        var folding: String.CompareOptions = []
        if options.contains(.caseInsensitive) { folding.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { folding.insert(.diacriticInsensitive) }
        return folding.isEmpty ? string : string.folding(options: folding, locale: nil)
    }

    /// `LIKE`: `?` is one character, `*` any run (iterative, no backtracking blow-up).
    static func like(_ text: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
        var t = 0, p = 0
        var star: Int?
        var resume = 0
        while t < text.count {
            if p < pattern.count && (pattern[p] == "?" || pattern[p] == text[t]) {
                t += 1
                p += 1
            } else if p < pattern.count && pattern[p] == "*" {
                star = p
                resume = t
                p += 1
            } else if let star {
                p = star + 1
                resume += 1
                t = resume
            } else {
                return false
            }
        }
        while p < pattern.count && pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }
}

extension PredicateEvaluator.Operand {
    /// A collection as one array value (for direct comparisons and aggregates).
    var valueForm: PredicateValue {
        switch self {
        case .value(let value): value
        case .collection(let values): .array(values)
        }
    }
}

/// A number for promotion across integer, floating-point and decimal values.
enum PredicateNumber {
    case integer(Int64)
    case double(Double)
    case decimal(Decimal)

    var double: Double {
        switch self {
        case .integer(let n): Double(n)
        case .double(let d): d
        case .decimal(let d): NSDecimalNumber(decimal: d).doubleValue
        }
    }

    func compare(_ other: PredicateNumber) -> ComparisonResult? {
        switch (self, other) {
        case (.integer(let a), .integer(let b)):
            return a < b ? .orderedAscending : a > b ? .orderedDescending : .orderedSame
        case (.decimal(let a), .decimal(let b)):
            return a < b ? .orderedAscending : a > b ? .orderedDescending : .orderedSame
        case (.decimal(let a), .integer(let b)):
            return PredicateNumber.decimal(a).compare(.decimal(Decimal(b)))
        case (.integer(let a), .decimal(let b)):
            return PredicateNumber.decimal(Decimal(a)).compare(.decimal(b))
        default:
            let a = double, b = other.double
            if a.isNaN || b.isNaN { return nil }
            return a < b ? .orderedAscending : a > b ? .orderedDescending : .orderedSame
        }
    }
}

extension PredicateValue {
    /// The value as a number, when it is one (a boolean counts as 0 or 1).
    var number: PredicateNumber? {
        switch self {
        case .integer(let n): .integer(n)
        case .double(let d): .double(d)
        case .decimal(let d): .decimal(d)
        case .bool(let b): .integer(b ? 1 : 0)
        default: nil
        }
    }

    /// A stored attribute value as a predicate value.
    init(_ value: AttributeValue?) {
        switch value {
        case nil: self = .null
        case .integer(let n)?: self = .integer(n)
        case .double(let d)?: self = .double(d)
        case .float(let f)?: self = .double(Double(f))
        case .boolean(let b)?: self = .bool(b)
        case .string(let s)?: self = .string(s)
        case .date(let d)?: self = .date(d)
        case .binaryData(let d)?: self = .data(d)
        case .uuid(let u)?: self = .uuid(u)
        case .uri(let u)?: self = .uri(u)
        case .decimal(let d)?: self = .decimal(d)
        case .transformable(let d)?: self = .transformable(d)
        }
    }
}

/// A managed object as a ``PredicateSubject``: in-memory evaluation (pending changes).
struct ObjectSubject: PredicateSubject {
    let object: ManagedObject

    var predicateEntity: EntityDescription { object.entity }
    var predicateObjectID: ManagedObjectID { object.objectID }

    func predicateAttribute(_ name: String) throws -> AttributeValue? {
        guard let slot = object.entity.attributeSlot(named: name) else {
            throw FetchPredicateError(kind: .unknownKey, message: "entity '\(object.entity.name)' has no attribute named '\(name)'")
        }
        guard object.fulfilIfNeeded(property: name) else { throw object.inaccessibleError }
        return object.attributeValue(at: slot)
    }

    func predicateDestinations(_ name: String) throws -> [ObjectSubject] {
        guard let slot = object.entity.relationshipSlot(named: name) else {
            throw FetchPredicateError(kind: .unknownKey, message: "entity '\(object.entity.name)' has no relationship named '\(name)'")
        }
        guard object.loadRelationshipIfNeeded(slot) else { throw object.inaccessibleError }
        return object.relationshipStorage(at: slot).objects.map(ObjectSubject.init)
    }
}

extension FetchPredicate {
    /// Whether `object` satisfies the predicate, with the same rules as a fetch (reading
    /// the object's current, unsaved values; firing its fault if it is one).
    ///
    /// - Throws: ``FetchPredicateError`` for a key the object's entity lacks, a variable
    ///   left unsubstituted or a key path the builder refused (kind
    ///   ``FetchPredicateError/Kind/unsupported``); ``StrataError/inaccessibleFault(_:)``
    ///   when the object's row is gone.
    public func evaluate(with object: ManagedObject) throws -> Bool {
        if let deferredError { throw deferredError }
        return try PredicateEvaluator.evaluate(node, on: ObjectSubject(object: object))
    }
}
