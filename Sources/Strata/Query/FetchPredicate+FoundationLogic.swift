import Foundation

// The tests of `#Predicate`: &&, ||, !, ==, !=, <, <=, >, >=, the string tests
// `contains(_:)` and `starts(with:)`, and membership in a range.

extension PredicateExpressions.Conjunction: FoundationTranslatable {
    /// `a && b` is `a AND b`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(.all([try translator.condition(of: lhs), try translator.condition(of: rhs)]))
    }
}

extension PredicateExpressions.Disjunction: FoundationTranslatable {
    /// `a || b` is `a OR b`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(.any([try translator.condition(of: lhs), try translator.condition(of: rhs)]))
    }
}

extension PredicateExpressions.Negation: FoundationTranslatable {
    /// `!a` is `NOT a` (`NONE` before a quantified comparison).
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(.negation(try translator.condition(of: wrapped)))
    }
}

extension PredicateExpressions.Equal: FoundationTranslatable {
    /// `a == b`; a test compared with a Boolean constant is that test or its opposite.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(try FoundationCondition.equality(lhs, rhs, equal: true, in: translator))
    }
}

extension PredicateExpressions.NotEqual: FoundationTranslatable {
    /// `a != b`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(try FoundationCondition.equality(lhs, rhs, equal: false, in: translator))
    }
}

extension PredicateExpressions.Comparison: FoundationTranslatable {
    /// `a < b`, `a <= b`, `a > b`, `a >= b`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        let op: PredicateComparison.Operator = switch self.op {
        case .lessThan: .less
        case .lessThanOrEqual: .lessOrEqual
        case .greaterThan: .greater
        case .greaterThanOrEqual: .greaterOrEqual
        }
        return .condition(try .compare(translator.operand(of: lhs), op, translator.operand(of: rhs)))
    }
}

extension PredicateExpressions.SequenceStartsWith: FoundationTranslatable {
    /// `$0.title.starts(with: "a")` is `title BEGINSWITH "a"`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        guard Base.Output.self == String.self else {
            throw FoundationTranslator.refusal("starts(with:) on a value of type \(Base.Output.self): only strings have a prefix test")
        }
        return .condition(try .compare(translator.operand(of: base), .beginsWith, translator.operand(of: prefix)))
    }
}

extension PredicateExpressions.CollectionContainsCollection: FoundationTranslatable {
    /// `$0.title.contains("a")` is `title CONTAINS "a"`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        guard Base.Output.self == String.self else {
            throw FoundationTranslator.refusal("contains(_:) of a \(Other.Output.self) in a value of type \(Base.Output.self): only strings have a substring test")
        }
        return .condition(try .compare(translator.operand(of: base), .contains, translator.operand(of: other)))
    }
}

extension PredicateExpressions.RangeExpressionContains: FoundationTranslatable {
    /// `(1...3).contains(x)` is `x BETWEEN {1, 3}`; `(1..<3).contains(x)` is
    /// `x >= 1 AND x < 3`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        guard case .range(let lower, let upper, let isClosed) = try translator.term(range) else {
            throw FoundationTranslator.refusal("contains(_:) on a range that is not written lower...upper or lower..<upper")
        }
        return .condition(try .contains(translator.operand(of: element), lower: lower, upper: upper, isClosed: isClosed))
    }
}

extension PredicateExpressions.ClosedRange: FoundationTranslatable {
    /// `lower...upper`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .range(lower: try translator.operand(of: lower), upper: try translator.operand(of: upper), isClosed: true)
    }
}

extension PredicateExpressions.Range: FoundationTranslatable {
    /// `lower..<upper`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .range(lower: try translator.operand(of: lower), upper: try translator.operand(of: upper), isClosed: false)
    }
}

extension FoundationCondition {
    /// `a == b` (or `a != b` when `equal` is false).
    static func equality(
        _ lhs: Any, _ rhs: Any, equal: Bool, in translator: FoundationTranslator
    ) throws(FetchPredicateError) -> FoundationCondition {
        let left = try translator.term(lhs)
        let right = try translator.term(rhs)
        switch (left, right) {
        case (.condition(let test), .operand(.constant(.bool(let value)))),
             (.operand(.constant(.bool(let value))), .condition(let test)):
            return value == equal ? test : .negation(test)
        case (.operand(let a), .operand(let b)):
            return try .compare(a, equal ? .equal : .notEqual, b)
        default:
            throw FoundationTranslator.refusal(
                "\(equal ? "==" : "!=") between \(FoundationTranslator.plainName(of: lhs)) and "
                    + "\(FoundationTranslator.plainName(of: rhs)) cannot be expressed in a fetch predicate")
        }
    }

    /// Whether `element` lies in the range from `lower` to `upper` (either may be
    /// missing: a partial range).
    static func contains(
        _ element: FoundationOperand, lower: FoundationOperand?, upper: FoundationOperand?, isClosed: Bool
    ) throws(FetchPredicateError) -> FoundationCondition {
        switch (lower, upper) {
        case (let lower?, let upper?) where isClosed:
            return try compare(element, .between, .aggregate([lower, upper]))
        case (let lower?, let upper?):
            return all([try compare(element, .greaterOrEqual, lower), try compare(element, .less, upper)])
        case (let lower?, nil):
            return try compare(element, .greaterOrEqual, lower)
        case (nil, let upper?):
            return try compare(element, isClosed ? .lessOrEqual : .less, upper)
        case (nil, nil):
            return .constant(true)
        }
    }
}
