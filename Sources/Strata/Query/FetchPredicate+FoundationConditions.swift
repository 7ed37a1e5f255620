import Foundation

/// A translated test, before it becomes a ``PredicateNode``: its comparisons remember
/// which `contains(where:)` / `allSatisfy` elements their operands go through, so that
/// the enclosing call can quantify them (`ANY`, `ALL`) or refuse.
indirect enum FoundationCondition {
    case constant(Bool)
    case not(FoundationCondition)
    case and([FoundationCondition])
    case or([FoundationCondition])
    case comparison(FoundationComparison)
}

/// A comparison and the elements each side goes through.
struct FoundationComparison {
    var comparison: PredicateComparison
    var leftElements: Set<PredicateExpressions.VariableID>
    var rightElements: Set<PredicateExpressions.VariableID>
}

extension FoundationCondition {
    /// All of `conditions` (flattened; `true` dropped, `false` wins).
    static func all(_ conditions: [FoundationCondition]) -> FoundationCondition {
        var operands: [FoundationCondition] = []
        for condition in conditions {
            switch condition {
            case .constant(true): continue
            case .constant(false): return .constant(false)
            case .and(let inner): operands += inner
            default: operands.append(condition)
            }
        }
        return operands.count == 1 ? operands[0] : operands.isEmpty ? .constant(true) : .and(operands)
    }

    /// Any of `conditions` (flattened; `false` dropped, `true` wins).
    static func any(_ conditions: [FoundationCondition]) -> FoundationCondition {
        var operands: [FoundationCondition] = []
        for condition in conditions {
            switch condition {
            case .constant(false): continue
            case .constant(true): return .constant(true)
            case .or(let inner): operands += inner
            default: operands.append(condition)
            }
        }
        return operands.count == 1 ? operands[0] : operands.isEmpty ? .constant(false) : .or(operands)
    }

    /// The opposite of `condition`.
    static func negation(_ condition: FoundationCondition) -> FoundationCondition {
        if case .constant(let value) = condition { return .constant(!value) }
        return .not(condition)
    }

    // MARK: Comparisons

    /// `left op right`. A `??` operand splits the comparison into the case where its
    /// path has a value and the case where it is nil; two constants are compared now,
    /// with the evaluator's rules.
    static func compare(
        _ left: FoundationOperand, _ op: PredicateComparison.Operator, _ right: FoundationOperand,
        modifier: PredicateComparison.Modifier = .direct
    ) throws(FetchPredicateError) -> FoundationCondition {
        if case .coalesced(let path, let fallback) = left {
            let present = try compare(.path(path), op, right, modifier: modifier)
            let absent = try compare(fallback, op, right, modifier: modifier)
            return try split(path, present: present, absent: absent, needsGuard: !makesNilFalse(op, right))
        }
        if case .coalesced(let path, let fallback) = right {
            let present = try compare(left, op, .path(path), modifier: modifier)
            let absent = try compare(left, op, fallback, modifier: modifier)
            return try split(path, present: present, absent: absent, needsGuard: !makesNilFalse(op, left))
        }
        if modifier == .direct, let a = constantValue(left), let b = constantValue(right) {
            return .constant(PredicateEvaluator.compare(a, op, .value(b), []))
        }
        var (leftExpression, leftElements) = try expression(left, for: op, quantified: modifier != .direct)
        var (rightExpression, rightElements) = try expression(right, for: op, quantified: false)
        var op = op
        // Keep the quantified element on the left, where ANY and ALL apply.
        if leftElements.isEmpty, !rightElements.isEmpty, modifier == .direct, let flipped = flipped(op) {
            swap(&leftExpression, &rightExpression)
            swap(&leftElements, &rightElements)
            op = flipped
        }
        let comparison = PredicateComparison(modifier: modifier, left: leftExpression, op: op, right: rightExpression)
        return .comparison(FoundationComparison(comparison: comparison, leftElements: leftElements, rightElements: rightElements))
    }

    /// `(path != nil AND present) OR (path == nil AND absent)`; the first guard is left
    /// out when `present` is false for nil anyway.
    private static func split(
        _ path: FoundationPath, present: FoundationCondition, absent: FoundationCondition, needsGuard: Bool
    ) throws(FetchPredicateError) -> FoundationCondition {
        let presentCase = needsGuard ? all([try compare(.path(path), .notEqual, .constant(.null)), present]) : present
        return any([presentCase, all([try compare(.path(path), .equal, .constant(.null)), absent])])
    }

    /// Whether `x op other` is false whenever `x` is nil (so `x != nil` need not be said).
    private static func makesNilFalse(_ op: PredicateComparison.Operator, _ other: FoundationOperand) -> Bool {
        guard let value = constantValue(other) else { return false }
        switch value {
        case .null, .array: return false
        default: return [.equal, .less, .lessOrEqual, .greater, .greaterOrEqual, .beginsWith, .endsWith, .contains].contains(op)
        }
    }

    /// The value of a constant operand (an aggregate of constants is an array).
    private static func constantValue(_ operand: FoundationOperand) -> PredicateValue? {
        switch operand {
        case .constant(let value): return value
        case .aggregate(let operands):
            var values: [PredicateValue] = []
            for operand in operands {
                guard case .constant(let value) = operand else { return nil }
                values.append(value)
            }
            return .array(values)
        default: return nil
        }
    }

    /// The operand as an expression (an array for `IN` or `BETWEEN` as `{…}`), and the
    /// elements it goes through. A to-many relationship must be `quantified`: as a whole
    /// it has no value to compare.
    private static func expression(
        _ operand: FoundationOperand, for op: PredicateComparison.Operator, quantified: Bool
    ) throws(FetchPredicateError) -> (PredicateExpression, Set<PredicateExpressions.VariableID>) {
        switch operand {
        case .constant(.array(let values)) where op == .in || op == .between:
            return (.aggregate(values.map(PredicateExpression.constant)), [])
        case .constant(let value):
            return (.constant(value), [])
        case .path(let path):
            let resolved = try path.resolved()
            if !quantified, (resolved.type as? any RelationshipStorable.Type)?.isToMany == true {
                throw FoundationTranslator.refusal(
                    "the to-many relationship \(resolved.names.joined(separator: ".")) is compared as a whole; "
                        + "test its elements with contains(where:) or allSatisfy, or its count")
            }
            return (.keyPath(resolved.names), resolved.elements)
        case .aggregate(let operands):
            var expressions: [PredicateExpression] = []
            var elements: Set<PredicateExpressions.VariableID> = []
            for operand in operands {
                let (expression, inner) = try expression(operand, for: .equal, quantified: false)
                expressions.append(expression)
                elements.formUnion(inner)
            }
            return (.aggregate(expressions), elements)
        case .coalesced:
            throw FoundationTranslator.refusal("nil-coalescing (??) inside a range bound cannot be expressed in a fetch predicate")
        }
    }

    /// The operator that compares the same way with its operands swapped.
    private static func flipped(_ op: PredicateComparison.Operator) -> PredicateComparison.Operator? {
        switch op {
        case .equal, .notEqual: op
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        case .contains: .in  // "text".contains(x) is x IN "text"
        default: nil
        }
    }

    // MARK: The predicate node

    /// The condition as a predicate node; `NOT ANY` becomes `NONE`.
    func node() throws(FetchPredicateError) -> PredicateNode {
        switch self {
        case .constant(let value): return .constant(value)
        case .not(.comparison(let inner)) where inner.comparison.modifier == .any:
            var none = inner
            none.comparison.modifier = .none
            return try FoundationCondition.comparison(none).node()
        case .not(let inner): return .not(try inner.node())
        case .and(let operands):
            var nodes: [PredicateNode] = []
            for operand in operands { nodes.append(try operand.node()) }
            return .and(nodes)
        case .or(let operands):
            var nodes: [PredicateNode] = []
            for operand in operands { nodes.append(try operand.node()) }
            return .or(nodes)
        case .comparison(let comparison):
            guard comparison.leftElements.isEmpty, comparison.rightElements.isEmpty else {
                throw FoundationTranslator.refusal("a closure's element is used outside its contains(where:) or allSatisfy")
            }
            return .comparison(comparison.comparison)
        }
    }
}
