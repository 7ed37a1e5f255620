import Foundation

/// What one conjunct of a predicate says about an indexed attribute: the index ranges
/// that hold every row it can match.
///
/// The planner reads candidates from these ranges and, unless ``isExact``, tests each
/// candidate against the conjunct too, so a range only has to be a superset: it is exact
/// when it holds precisely the rows the evaluator accepts.
struct IndexConstraint: Hashable {
    /// The attribute (of the fetched entity) whose index answers the conjunct.
    var attribute: String
    /// The values the conjunct allows, encoded for the index.
    var ranges: IndexKeyRanges
    /// Whether the ranges hold exactly the rows the conjunct matches.
    var isExact: Bool

    /// The constraint `node` puts on an indexed attribute of `entity`, or nil when it
    /// puts none an index can use (a key path through a relationship, string options,
    /// `!=`, `CONTAINS`, a constant of the wrong kind, …).
    init?(_ node: PredicateNode, entity: EntityDescription) {
        guard case .comparison(let comparison) = node, comparison.modifier == .direct else { return nil }
        var op = comparison.op
        let key: [String], constant: PredicateExpression
        switch (comparison.left, comparison.right) {
        case (.keyPath(let path), .constant), (.keyPath(let path), .aggregate):
            (key, constant) = (path, comparison.right)
        case (.constant, .keyPath(let path)):
            guard let flipped = op.flipped else { return nil }
            (key, constant, op) = (path, comparison.left, flipped)
        default:
            return nil
        }
        guard key.count == 1, let attribute = entity.attribute(named: key[0]), attribute.isIndexed,
              !attribute.isTransient, let kind = attribute.type.indexKeyKind
        else { return nil }
        // Options fold strings, which the byte order of an index cannot follow.
        guard comparison.options.isEmpty || kind != .string else { return nil }
        guard let (ranges, exact) = Self.ranges(op, constant, kind: kind) else { return nil }
        self.attribute = attribute.name
        self.ranges = ranges
        self.isExact = exact
    }

    /// The ranges for `attribute op constant`.
    private static func ranges(
        _ op: PredicateComparison.Operator, _ constant: PredicateExpression, kind: IndexKeyKind
    ) -> (IndexKeyRanges, Bool)? {
        switch op {
        case .equal:
            guard let value = constant.constantValue else { return nil }
            return point(value, kind: kind)
        case .notEqual:
            // Only `!= nil` is a range: every value, nil excluded.
            guard constant.constantValue == .null else { return nil }
            return (IndexKeyRanges([IndexKeyRange(lower: [0x00], includesLower: false)]), true)
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            guard let value = constant.constantValue, let bound = bound(value, op, kind: kind) else { return nil }
            return bound
        case .between:
            guard let bounds = constant.constantValues, bounds.count == 2,
                  let low = bound(bounds[0], .greaterOrEqual, kind: kind),
                  let high = bound(bounds[1], .lessOrEqual, kind: kind)
            else { return nil }
            return (low.0.intersection(high.0), low.1 && high.1)
        case .in:
            guard let values = constant.constantValues else { return nil }
            var ranges: [IndexKeyRange] = []
            var exact = true
            for value in values {
                guard let (point, pointIsExact) = point(value, kind: kind) else {
                    // A value that is of no kind the attribute holds matches nothing,
                    // but one the planner cannot place (NaN, a huge double) spoils the plan.
                    if value.number != nil || value == .null { return nil }
                    continue
                }
                ranges += point.ranges
                exact = exact && pointIsExact
            }
            return (IndexKeyRanges(ranges), exact)
        case .beginsWith:
            guard kind == .string, case .string(let prefix)? = constant.constantValue else { return nil }
            return (IndexKeyRanges([IndexKeyRange.prefix(prefix)]), true)
        case .endsWith, .contains, .like, .matches:
            return nil
        }
    }

    /// The entries equal to `value`; nil when the planner cannot place it.
    private static func point(_ value: PredicateValue, kind: IndexKeyKind) -> (IndexKeyRanges, Bool)? {
        if value == .null { return (IndexKeyRanges([.equal([0x00])]), true) }
        switch kind {
        case .integer:
            guard let number = value.number else { return (.none, true) }  // never equal
            switch number {
            case .integer(let n): return encoded(.integer(n), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
            case .double(let d):
                guard d.isFinite, abs(d) < 0x1p53 else { return nil }
                guard d == d.rounded() else { return (.none, true) }
                return encoded(.integer(Int64(d)), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
            case .decimal:
                return nil
            }
        case .double:
            guard let number = value.number else { return (.none, true) }
            let double = number.double
            guard !double.isNaN else { return (.none, true) }  // NaN equals nothing
            return encoded(.double(double), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
        case .boolean:
            switch value {
            case .bool(let b): return encoded(.boolean(b), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
            case .integer(let n) where n == 0 || n == 1:
                return encoded(.boolean(n == 1), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
            default: return nil
            }
        case .date:
            guard case .date(let date) = value else { return (.none, true) }
            guard !date.timeIntervalSinceReferenceDate.isNaN else { return (.none, true) }
            return encoded(.date(date), kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
        case .string, .uuid, .binaryData, .uri:
            guard let attributeValue = value.indexAttributeValue(kind: kind) else { return (.none, true) }
            return encoded(attributeValue, kind: kind).map { (IndexKeyRanges([.equal($0)]), true) }
        }
    }

    /// The entries `op value` admits (`op` an ordering comparison); nil when the
    /// planner cannot place the value. nil values never satisfy an ordering comparison.
    private static func bound(
        _ value: PredicateValue, _ op: PredicateComparison.Operator, kind: IndexKeyKind
    ) -> (IndexKeyRanges, Bool)? {
        let isLower = op == .greater || op == .greaterOrEqual
        var inclusive = op == .greaterOrEqual || op == .lessOrEqual
        let encodedValue: [UInt8]
        var exact = true
        switch kind {
        case .integer:
            guard let number = value.number else { return value == .null ? (.none, true) : nil }
            switch number {
            case .integer(let n): encodedValue = encoded(.integer(n), kind: kind)!
            case .double(let d):
                guard d.isFinite, abs(d) < 0x1p53 else { return nil }
                // x > 2.5 is x >= 3; x < 2.5 is x <= 2; a whole number stays as it is.
                var whole = d
                if d != d.rounded() {
                    whole = isLower ? d.rounded(.up) : d.rounded(.down)
                    inclusive = true
                }
                encodedValue = encoded(.integer(Int64(whole)), kind: kind)!
            case .decimal:
                return nil
            }
        case .double:
            guard let number = value.number else { return value == .null ? (.none, true) : nil }
            guard !number.double.isNaN else { return (.none, true) }
            encodedValue = encoded(.double(number.double), kind: kind)!
            // NaN sorts after +infinity in the index but compares with nothing.
            exact = !isLower
        case .date:
            guard case .date(let date) = value else { return value == .null ? (.none, true) : nil }
            guard !date.timeIntervalSinceReferenceDate.isNaN else { return (.none, true) }
            encodedValue = encoded(.date(date), kind: kind)!
            exact = !isLower
        case .boolean:
            return nil
        case .string, .uuid, .binaryData, .uri:
            guard let attributeValue = value.indexAttributeValue(kind: kind),
                  let bytes = encoded(attributeValue, kind: kind)
            else { return value == .null ? (.none, true) : nil }
            encodedValue = bytes
        }
        // nil sorts first in every index: a lower bound excludes it already; an upper
        // bound needs a lower one that does.
        let range = isLower
            ? IndexKeyRange(lower: encodedValue, includesLower: inclusive)
            : IndexKeyRange(lower: [0x00], includesLower: false, upper: encodedValue, includesUpper: inclusive)
        return (IndexKeyRanges([range]), exact)
    }

    private static func encoded(_ value: AttributeValue, kind: IndexKeyKind) -> [UInt8]? {
        IndexKeyEncoding.encode(value, as: kind)
    }
}

extension PredicateComparison.Operator {
    /// The operator with its operands swapped (`3 < x` is `x > 3`); nil when it has none.
    var flipped: Self? {
        switch self {
        case .equal, .notEqual: self
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        default: nil
        }
    }
}

extension PredicateExpression {
    /// The value of a constant.
    var constantValue: PredicateValue? {
        if case .constant(let value) = self { return value }
        return nil
    }

    /// The values of a constant collection or an aggregate of constants.
    var constantValues: [PredicateValue]? {
        switch self {
        case .constant(.array(let values)): values
        case .aggregate(let expressions):
            expressions.allSatisfy { $0.constantValue != nil } ? expressions.compactMap(\.constantValue) : nil
        default: nil
        }
    }
}

extension PredicateValue {
    /// The attribute value of an index of `kind` (string, UUID, data or URL kinds) this
    /// value equals under the evaluator's rules; nil when it equals none.
    func indexAttributeValue(kind: IndexKeyKind) -> AttributeValue? {
        switch (kind, self) {
        case (.string, .string(let s)): .string(s)
        case (.uuid, .uuid(let u)): .uuid(u)
        case (.binaryData, .data(let d)): .binaryData(d)
        case (.uri, .uri(let u)): .uri(u)
        default: nil
        }
    }
}
