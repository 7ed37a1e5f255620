import Foundation

// The operands of `#Predicate`: the closure's variables, key paths, captured values,
// nil, and the optional operators `?.`, `!` and `??`.

extension PredicateExpressions.Variable: FoundationTranslatable {
    /// The predicate's input (the evaluated object), or a closure's element.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        guard let path = translator.bindings[key] else {
            throw FoundationTranslator.refusal("a variable of type \(Output.self) that no enclosing closure binds")
        }
        return .operand(.path(path))
    }
}

extension PredicateExpressions.KeyPath: FoundationTranslatable {
    /// A property: `$0.title` is `title`, `$0.tags.count` is `tags.@count`, `$0.tags.isEmpty`
    /// is `tags.@count == 0`, `$0.title.isEmpty` is `title == ""`; a key path of a
    /// captured value is read now.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        if let constant = root as? any FoundationConstantExpression {
            guard let base = constant.constantValue as? Root.Output else {
                throw FoundationTranslator.refusal("a key path from \(Root.Output.self) does not apply to its captured value")
            }
            return try FoundationConstants.term(base[keyPath: keyPath as Swift.KeyPath<Root.Output, Output>])
        }
        let base = try translator.path(of: root, for: "a key path to a \(Output.self)")
        if Root.Output.self == String.self, keyPath as AnyKeyPath == \String.count {
            throw FoundationTranslator.refusal("the length of a string (String.count) cannot be expressed in a fetch predicate")
        }
        if Output.self == Bool.self, let test = try emptinessTest(of: base) {
            return .condition(test)
        }
        if let pending = base.pending {
            guard let joined = pending.appending(path: keyPath) else {
                throw FoundationTranslator.refusal("a key path from \(Root.Output.self) does not continue the key path before it")
            }
            return .operand(.path(FoundationPath(names: base.names, type: base.type, pending: joined, elements: base.elements)))
        }
        guard Root.Output.self is ManagedObject.Type else {
            throw FoundationTranslator.refusal(
                "a key path into a value of type \(Root.Output.self) (to a \(Output.self)) cannot be expressed in a fetch predicate")
        }
        return .operand(.path(FoundationPath(names: base.names, type: Root.Output.self, pending: keyPath, elements: base.elements)))
    }

    /// `isEmpty` of a to-many relationship or of a string, as a test.
    private func emptinessTest(of base: FoundationPath) throws(FetchPredicateError) -> FoundationCondition? {
        let keyPath = self.keyPath as AnyKeyPath
        if let toMany = Root.Output.self as? any FoundationToManyValue.Type, keyPath == toMany.isEmptyKeyPath {
            var count = try base.resolved()
            count.names.append(CollectionOperator.count.rawValue)
            count.type = Int.self
            return try .compare(.path(count), .equal, .constant(.integer(0)))
        }
        if Root.Output.self == String.self, keyPath == \String.isEmpty {
            return try .compare(.path(base), .equal, .constant(.string("")))
        }
        return nil
    }
}

extension PredicateExpressions.Value: FoundationTranslatable, FoundationConstantExpression {
    var constantValue: Any { value }

    /// A captured value or a literal: a constant, or the bounds of a range.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        try FoundationConstants.term(value)
    }
}

extension PredicateExpressions.NilLiteral: FoundationTranslatable {
    /// `nil`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        .operand(.constant(.null))
    }
}

extension PredicateExpressions.UnaryMinus: FoundationTranslatable {
    /// `-3`: a negated constant (negating a stored value is refused).
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        let negated: PredicateValue? = switch try translator.operand(of: wrapped) {
        case .constant(.integer(let value)): value == .min ? .decimal(-Decimal(value)) : .integer(-value)
        case .constant(.double(let value)): .double(-value)
        case .constant(.decimal(let value)): .decimal(-value)
        default: nil
        }
        guard let negated else { throw FoundationTranslator.unsupported(self) }
        return .operand(.constant(negated))
    }
}

extension PredicateExpressions.OptionalFlatMap: FoundationTranslatable {
    /// `$0.folder?.name` is `folder.name`: a key path through a nil to-one is nil, as the
    /// optional chain is. The chain must go on from the unwrapped value.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        let unwrapped = try translator.path(of: wrapped, for: "optional chaining (?.)").resolved()
        var bound = unwrapped
        bound.type = Wrapped.self
        let result = try translator.binding(variable.key, to: bound).term(transform)
        guard case .operand(.path(let path)) = result, path.names.starts(with: unwrapped.names) else {
            throw FoundationTranslator.refusal(
                "optional chaining (?.) on \(unwrapped.names.joined(separator: ".")) must end at a property "
                    + "(compare the optional value itself, as in $0.body == \"x\", or use ??)")
        }
        return .operand(.path(path))
    }
}

extension PredicateExpressions.ForcedUnwrap: FoundationTranslatable {
    /// `$0.folder!.name` is `folder.name`, `$0.created!` is `created`: where Foundation's
    /// `evaluate` throws on nil, the fetch compares nil by its rules (equal to nothing but
    /// nil, ordered before nothing).
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        switch try translator.operand(of: inner) {
        case .constant(.null):
            throw FoundationTranslator.refusal("a forced unwrap (!) of a captured nil, on which Foundation's evaluate throws")
        case .constant(let value):
            return .operand(.constant(value))
        case .path(let path):
            var unwrapped = try path.resolved()
            unwrapped.type = Wrapped.self
            return .operand(.path(unwrapped))
        default:
            throw FoundationTranslator.unsupported(self)
        }
    }
}

extension PredicateExpressions.NilCoalesce: FoundationTranslatable {
    /// `($0.body ?? "") == "x"`: comparisons split into the case where `body` has a
    /// value and the case where it is nil (`body == "x"`, and `body == nil` only when
    /// `"" == "x"`).
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm {
        let fallback = try translator.operand(of: rhs)
        switch try translator.operand(of: lhs) {
        case .constant(.null): return .operand(fallback)
        case .constant(let value): return .operand(.constant(value))
        case .path(let path): return .operand(.coalesced(try path.resolved(), fallback))
        default: throw FoundationTranslator.unsupported(self)
        }
    }
}

// MARK: Constants

/// A `PredicateExpressions.Value`, seen through `Any`.
protocol FoundationConstantExpression {
    var constantValue: Any { get }
}

/// How captured values become constants.
enum FoundationConstants {
    /// A range's bounds, or a constant.
    static func term(_ value: Any) throws(FetchPredicateError) -> FoundationTerm {
        if let range = value as? any FoundationRangeValue {
            let bounds = range.foundationBounds
            var lower: FoundationOperand?
            var upper: FoundationOperand?
            if let bound = bounds.lower { lower = .constant(try constant(bound)) }
            if let bound = bounds.upper { upper = .constant(try constant(bound)) }
            return .range(lower: lower, upper: upper, isClosed: bounds.isClosed)
        }
        return .operand(.constant(try constant(value)))
    }

    /// The predicate value of a captured value: what `%@` takes (numbers, strings, dates,
    /// data, UUIDs, URLs, decimals, object IDs, nil, arrays and sets of them), or a
    /// transformable attribute's value.
    static func constant(_ value: Any) throws(FetchPredicateError) -> PredicateValue {
        if let constant = PredicateArguments.value(value) { return constant }
        if let storable = value as? any AttributeStorable { return PredicateValue(storable.attributeValue) }
        throw FoundationTranslator.refusal("a captured value of type \(type(of: value)) cannot be a constant of a fetch predicate")
    }
}

/// Ranges captured as values (`let r = 1...3; r.contains($0.priority)`).
protocol FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { get }
}

extension ClosedRange: FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { (lowerBound, upperBound, true) }
}

extension Range: FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { (lowerBound, upperBound, false) }
}

extension PartialRangeFrom: FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { (lowerBound, nil, true) }
}

extension PartialRangeThrough: FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { (nil, upperBound, true) }
}

extension PartialRangeUpTo: FoundationRangeValue {
    var foundationBounds: (lower: Any?, upper: Any?, isClosed: Bool) { (nil, upperBound, false) }
}

/// The Swift value of a to-many relationship, and the key path of its `isEmpty`.
protocol FoundationToManyValue {
    static var isEmptyKeyPath: AnyKeyPath { get }
}

// (`\Set<Element>.isEmpty` written in these extensions crashes the 6.3 compiler, in
// IRGen: "Failed to find conformance path for τ_0_0 : Hashable"; through a generic
// function it builds, and equals the key path a #Predicate makes.)
private func setIsEmpty<Element: Hashable>(_: Element.Type) -> AnyKeyPath { \Set<Element>.isEmpty }
private func arrayIsEmpty<Element>(_: Element.Type) -> AnyKeyPath { \[Element].isEmpty }

extension Set: FoundationToManyValue where Element: ManagedObject {
    static var isEmptyKeyPath: AnyKeyPath { setIsEmpty(Element.self) }
}

extension Array: FoundationToManyValue where Element: ManagedObject {
    static var isEmptyKeyPath: AnyKeyPath { arrayIsEmpty(Element.self) }
}
