/// An attribute of the destinations of a to-many relationship under `ANY`, `ALL` or
/// `NONE`: what ``Swift/KeyPath/any(_:)``, ``Swift/KeyPath/all(_:)`` and
/// ``Swift/KeyPath/none(_:)`` make. Compare it as you would a key path:
///
/// ```swift
/// (\Note.tags).any(\.label) == "swift"                 // ANY tags.label == "swift"
/// (\Note.tags).all(\.label).beginsWith("s")            // ALL tags.label BEGINSWITH "s"
/// (\Note.tags).none(\.label).in(["draft", "old"])      // NONE tags.label IN {"draft", "old"}
/// (\Note.folder?.notes).any(\.priority) > 4            // ANY folder.notes.priority > 4
/// ```
///
/// One comparison is quantified: `ANY tags.label == "a" AND ANY tags.label == "b"` may be
/// satisfied by two different tags.
public struct QuantifiedKeyPath<Root: ManagedObject, Value: AttributeStorable>: Sendable, Hashable {
    let operand: PredicateOperand

    init(_ operand: PredicateOperand) {
        self.operand = operand
    }

    /// `ANY key == value` (or `ALL`, `NONE`).
    public static func == (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.equal, PredicateOperand.constant(value))
    }

    /// `ANY key != value` (or `ALL`, `NONE`).
    public static func != (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.notEqual, PredicateOperand.constant(value))
    }

    /// `ANY key < value` (or `ALL`, `NONE`).
    public static func < (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.less, PredicateOperand.constant(value))
    }

    /// `ANY key <= value` (or `ALL`, `NONE`).
    public static func <= (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.lessOrEqual, PredicateOperand.constant(value))
    }

    /// `ANY key > value` (or `ALL`, `NONE`).
    public static func > (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.greater, PredicateOperand.constant(value))
    }

    /// `ANY key >= value` (or `ALL`, `NONE`).
    public static func >= (quantified: QuantifiedKeyPath, value: Value) -> FetchPredicate {
        quantified.operand.compared(.greaterOrEqual, PredicateOperand.constant(value))
    }

    /// `ANY key IN {a, b, …}` (or `ALL`, `NONE`).
    public func `in`(_ values: some Sequence<Value>) -> FetchPredicate {
        operand.compared(.in, PredicateOperand.constants(values))
    }

    /// `ANY key BETWEEN {low, high}` (or `ALL`, `NONE`), bounds included.
    public func between(_ range: ClosedRange<Value>) -> FetchPredicate where Value: Comparable {
        operand.compared(.between, PredicateOperand.constants([range.lowerBound, range.upperBound]))
    }

    /// `ANY key BETWEEN {low, high}` (or `ALL`, `NONE`) for an optional attribute.
    public func between<Wrapped: AttributeStorable & Comparable>(_ range: ClosedRange<Wrapped>) -> FetchPredicate
    where Value == Wrapped? {
        operand.compared(.between, PredicateOperand.constants([range.lowerBound, range.upperBound]))
    }
}

extension QuantifiedKeyPath where Value: StringAttributeValue {
    /// `ANY key ==[c] string` (or `ALL`, `NONE`): equality under `options`.
    public func equals(_ string: String, options: FetchPredicate.ComparisonOptions) -> FetchPredicate {
        operand.compared(.equal, .constant(.string(string)), options: options)
    }

    /// `ANY key BEGINSWITH prefix` (or `ALL`, `NONE`).
    public func beginsWith(_ prefix: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        operand.compared(.beginsWith, .constant(.string(prefix)), options: options)
    }

    /// `ANY key ENDSWITH suffix` (or `ALL`, `NONE`).
    public func endsWith(_ suffix: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        operand.compared(.endsWith, .constant(.string(suffix)), options: options)
    }

    /// `ANY key CONTAINS substring` (or `ALL`, `NONE`).
    public func contains(_ substring: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        operand.compared(.contains, .constant(.string(substring)), options: options)
    }

    /// `ANY key LIKE pattern` (or `ALL`, `NONE`): `?` is one character, `*` any run.
    public func like(_ pattern: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        operand.compared(.like, .constant(.string(pattern)), options: options)
    }

    /// `ANY key MATCHES regularExpression` (or `ALL`, `NONE`): a whole-string ICU match.
    public func matches(_ regularExpression: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        operand.compared(.matches, .constant(.string(regularExpression)), options: options)
    }
}
