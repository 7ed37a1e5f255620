import Foundation

// `contains(_:)`, `contains(where:)` and `allSatisfy` of `#Predicate`: membership in a
// constant collection is IN; a test on the elements of a to-many relationship becomes
// ANY or ALL on each comparison that reads the element, which is exact only where the
// quantifier distributes over the test. Anything else needs SUBQUERY, which Strata's
// predicates do not have, and is refused.

extension PredicateExpressions.SequenceContains: FoundationTranslatable {
    /// `[1, 2].contains(x)` is `x IN {1, 2}`; `tags.contains(t)` is `ANY tags == t`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        let element = try translator.operand(of: self.element)
        switch try translator.term(sequence) {
        case .operand(.constant(.array(let values))):
            return .condition(try .compare(element, .in, .constant(.array(values))))
        case .operand(.path(let path)) where LHS.Output.Element.self is ManagedObject.Type:
            return .condition(try .compare(.path(path), .equal, element, modifier: .any))
        case .range(let lower, let upper, let isClosed):
            return .condition(try FoundationCondition.contains(element, lower: lower, upper: upper, isClosed: isClosed))
        default:
            throw FoundationTranslator.refusal(
                "contains(_:) on a value of type \(LHS.Output.self) works only on a captured array or set, or a to-many relationship")
        }
    }
}

extension PredicateExpressions.SequenceContainsWhere: FoundationTranslatable {
    /// `tags.contains { $0.label == "x" }` is `ANY tags.label == "x"`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(try FoundationCondition.quantifying(
            .any, "contains(where:)", sequence: sequence, elementType: Element.self, variable: variable.key,
            test: test, in: translator))
    }
}

extension PredicateExpressions.SequenceAllSatisfy: FoundationTranslatable {
    /// `tags.allSatisfy { $0.label != "x" }` is `ALL tags.label != "x"`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .condition(try FoundationCondition.quantifying(
            .all, "allSatisfy", sequence: sequence, elementType: Element.self, variable: variable.key,
            test: test, in: translator))
    }
}

extension FoundationCondition {
    /// `sequence.contains(where: test)` (`.any`) or `sequence.allSatisfy(test)` (`.all`),
    /// where `sequence` must be a to-many relationship.
    static func quantifying(
        _ quantifier: PredicateComparison.Modifier, _ call: String, sequence: Any, elementType: Any.Type,
        variable: PredicateExpressions.VariableID, test: Any, in translator: FoundationTranslator
    ) throws(FetchPredicateError) -> FoundationCondition {
        guard elementType is ManagedObject.Type else {
            throw FoundationTranslator.refusal(
                "\(call) over elements of type \(elementType) works only on a to-many relationship; "
                    + "for a captured collection, use contains(_:)")
        }
        let collection = try translator.path(of: sequence, for: call).resolved()
        var element = collection
        element.type = elementType
        element.elements.insert(variable)
        let condition = try translator.binding(variable, to: element).condition(of: test)
        return try condition.quantified(quantifier, over: variable, in: collection, call: call)
    }

    /// Whether a comparison in the condition reads `variable`.
    func reads(_ variable: PredicateExpressions.VariableID) -> Bool {
        switch self {
        case .constant: false
        case .not(let inner): inner.reads(variable)
        case .and(let operands), .or(let operands): operands.contains { $0.reads(variable) }
        case .comparison(let comparison):
            comparison.leftElements.contains(variable) || comparison.rightElements.contains(variable)
        }
    }

    /// The condition "for some element" (`.any`) or "for every element" (`.all`) of
    /// `collection`, where `variable` is the element.
    ///
    /// ANY distributes over OR and ALL over AND; ANY of `a AND c` is `ANY a AND c` when
    /// only `a` reads the element (and dually for ALL); NOT swaps them. A part that does
    /// not read the element holds for some element when there is one (`@count > 0`).
    /// What is left (two tests of one element joined by AND under ANY, one comparison
    /// reading the element on both sides, a count per element) needs SUBQUERY.
    func quantified(
        _ quantifier: PredicateComparison.Modifier, over variable: PredicateExpressions.VariableID,
        in collection: FoundationPath, call: String
    ) throws(FetchPredicateError) -> FoundationCondition {
        guard reads(variable) else {
            let count = FoundationComparison(
                comparison: PredicateComparison(
                    left: .keyPath(collection.names + [CollectionOperator.count.rawValue]),
                    op: quantifier == .any ? .greater : .equal, right: .constant(.integer(0))),
                leftElements: collection.elements, rightElements: [])
            return quantifier == .any ? .all([.comparison(count), self]) : .any([.comparison(count), self])
        }
        switch self {
        case .constant:
            return self
        case .not(let inner):
            return .negation(try inner.quantified(quantifier == .any ? .all : .any, over: variable, in: collection, call: call))
        case .or(let operands) where quantifier == .any, .and(let operands) where quantifier == .all:
            var quantified: [FoundationCondition] = []
            for operand in operands {
                quantified.append(try operand.quantified(quantifier, over: variable, in: collection, call: call))
            }
            return quantifier == .any ? .any(quantified) : .all(quantified)
        case .and(let operands), .or(let operands):
            let reading = operands.filter { $0.reads(variable) }
            guard reading.count == 1 else {
                let (joint, meaning) = quantifier == .any
                    ? ("&&", "one element satisfying all of them") : ("||", "each element satisfying one of them")
                throw FoundationTranslator.refusal(
                    "\(call) joins \(reading.count) tests of the element with \(joint), which needs a subquery "
                        + "(\(meaning)); write one \(call) per test if that is what you mean")
            }
            let others = operands.filter { !$0.reads(variable) }
            let inner = try reading[0].quantified(quantifier, over: variable, in: collection, call: call)
            return quantifier == .any ? .all(others + [inner]) : .any(others + [inner])
        case .comparison(var comparison):
            try comparison.quantify(quantifier, over: variable, in: collection, call: call)
            return .comparison(comparison)
        }
    }
}

extension FoundationComparison {
    /// Puts `quantifier` on a comparison whose left side reads the element.
    mutating func quantify(
        _ quantifier: PredicateComparison.Modifier, over variable: PredicateExpressions.VariableID,
        in collection: FoundationPath, call: String
    ) throws(FetchPredicateError) {
        guard !rightElements.contains(variable) else {
            throw FoundationTranslator.refusal(
                "\(call) compares the element with \(PredicateFormatter.format(comparison.right)), "
                    + "which reads the element too and needs a subquery")
        }
        switch comparison.modifier {
        case .direct:
            // `ANY tags.notes.@count` counts the notes of all the tags together.
            if case .keyPath(let names) = comparison.left,
               let aggregate = names.dropFirst(collection.names.count).first(where: { CollectionOperator(rawValue: $0) != nil }) {
                throw FoundationTranslator.refusal(
                    "\(call) tests \(aggregate) of each element's to-many relationship, which needs a subquery "
                        + "(a key path through \(collection.names.joined(separator: ".")) gathers all the elements' objects)")
            }
            comparison.modifier = quantifier
        case quantifier:
            break  // nested: ANY of ANY (or ALL of ALL) is one quantifier over the joined key path
        default:
            throw FoundationTranslator.refusal(
                "\(call) contains a test quantified the other way (\(comparison.modifier.rawValue)), which needs a subquery")
        }
        leftElements.remove(variable)
    }
}
