import Foundation

extension FetchPredicate {
    /// Translates a Foundation `#Predicate` into a fetch predicate.
    ///
    /// Write the condition in Swift, checked by the compiler, and fetch with it:
    ///
    /// ```swift
    /// let urgent = try FetchPredicate(#Predicate<Note> { note in
    ///     note.priority >= 3 && note.folder?.name == "Inbox"
    /// })
    /// // priority >= 3 AND folder.name == "Inbox"
    /// let tagged = try FetchPredicate(#Predicate<Note> { note in
    ///     note.tags.contains { $0.label == "swift" } && !note.title.contains("draft")
    /// })
    /// // ANY tags.label == "swift" AND NOT title CONTAINS "draft"
    /// ```
    ///
    /// The translation walks the predicate's expression tree: key paths of `@Attribute`
    /// and `@Relationship` properties become key paths (`$0.tags.count` is
    /// `tags.@count`), captured values become constants, and comparisons, `&&`, `||`,
    /// `!`, `contains`, `contains(where:)`, `allSatisfy`, `starts(with:)`, ranges, `??`
    /// and `!` map to what the format language says the same way. The article
    /// <doc:Queries> has the full table, and the few places where the result compares
    /// differently from Foundation's own `evaluate` (strings compare by bytes, not by
    /// canonical equivalence).
    ///
    /// - Parameter predicate: a predicate on a typed ``ManagedObject`` subclass.
    /// - Throws: ``FetchPredicateError`` of kind ``FetchPredicateError/Kind/unsupported``
    ///   naming the first part of the predicate a fetch cannot express: arithmetic,
    ///   conditionals, casts, regular expressions, dictionary lookups, a computed
    ///   property, the length of a string, or a `contains(where:)` whose test needs a
    ///   subquery.
    public init<Root: ManagedObject>(_ predicate: Predicate<Root>) throws(FetchPredicateError) {
        let input: PredicateExpressions.Variable<Root> = predicate.variable
        let translator = FoundationTranslator(bindings: [input.key: FoundationPath(object: Root.self)])
        self.init(node: try translator.condition(of: predicate.expression).node())
    }
}

/// A Foundation predicate expression that Strata translates. Each supported
/// `PredicateExpressions` type conforms (unconditionally: its operands are cast at run
/// time, so that a refusal names the operand that cannot be translated rather than the
/// whole expression around it).
protocol FoundationTranslatable {
    /// What the expression means, with the variables in scope of `translator`.
    func foundationTerm(in translator: FoundationTranslator) throws(FetchPredicateError) -> FoundationTerm
}

/// What one Foundation expression translates to.
enum FoundationTerm {
    /// A test (a `Bool`-valued expression).
    case condition(FoundationCondition)
    /// A value to compare.
    case operand(FoundationOperand)
    /// `lower...upper`, `lower..<upper` or a partial range (a missing bound is nil).
    case range(lower: FoundationOperand?, upper: FoundationOperand?, isClosed: Bool)
}

/// A value to compare, before it becomes a ``PredicateExpression``.
indirect enum FoundationOperand {
    /// A captured value or a literal.
    case constant(PredicateValue)
    /// A key path from the evaluated object.
    case path(FoundationPath)
    /// `{a, b}`: the bounds of a range.
    case aggregate([FoundationOperand])
    /// `path ?? fallback`: comparisons with it split into the two cases.
    case coalesced(FoundationPath, FoundationOperand)
}

/// A key path from the evaluated object, as far as it is known: property names, then
/// possibly a Swift key path not yet read (so that `\Note.tags` and `\Set<Tag>.count`
/// are read as one key path, `\Note.tags.count`, which ``KeyPathNames`` understands).
struct FoundationPath {
    /// The property names from the evaluated object.
    var names: [String]
    /// The Swift type of the value `names` lead to (the root of `pending`, if any).
    var type: Any.Type
    /// A Swift key path from `type`, still to be turned into names.
    var pending: AnyKeyPath?
    /// The `contains(where:)` and `allSatisfy` elements the path goes through.
    var elements: Set<PredicateExpressions.VariableID> = []

    /// The evaluated object itself, of class `type`.
    init(object type: ManagedObject.Type) {
        self.init(names: [], type: type, pending: nil)
    }

    init(names: [String], type: Any.Type, pending: AnyKeyPath?, elements: Set<PredicateExpressions.VariableID> = []) {
        self.names = names
        self.type = type
        self.pending = pending
        self.elements = elements
    }

    /// The path with its pending Swift key path read into names.
    ///
    /// - Throws: ``FetchPredicateError`` when the key path reads no stored property (a
    ///   computed property, the length of a string) or does not start at a managed
    ///   object.
    func resolved() throws(FetchPredicateError) -> FoundationPath {
        guard let pending else { return self }
        guard let root = type as? ManagedObject.Type else {
            throw FoundationTranslator.refusal(
                "a key path into a value of type \(type) (to a \(Swift.type(of: pending).valueType)) cannot be expressed in a fetch predicate")
        }
        let more: [String]
        do {
            more = try KeyPathNames.components(of: pending, rootClass: root).filter { $0 != "SELF" }
        } catch {
            throw FoundationTranslator.refusal(error.message)
        }
        return FoundationPath(names: names + more, type: Swift.type(of: pending).valueType, pending: nil, elements: elements)
    }
}

/// Walks the expression tree of a Foundation `Predicate` and builds the condition it
/// means. It carries what each variable in scope stands for: the predicate's input is
/// the evaluated object; a `?.` or `contains(where:)` closure's variable is a path from
/// it.
struct FoundationTranslator {
    /// The variables in scope, as paths from the evaluated object.
    var bindings: [PredicateExpressions.VariableID: FoundationPath]

    /// This translator with `variable` standing for `path`.
    func binding(_ variable: PredicateExpressions.VariableID, to path: FoundationPath) -> FoundationTranslator {
        var copy = self
        copy.bindings[variable] = path
        return copy
    }

    /// What `expression` means.
    func term(_ expression: Any) throws(FetchPredicateError) -> FoundationTerm {
        guard let translatable = expression as? any FoundationTranslatable else {
            throw Self.unsupported(expression)
        }
        return try translatable.foundationTerm(in: self)
    }

    /// `expression` as a test: a `Bool` key path `k` is `k == TRUE`.
    func condition(of expression: Any) throws(FetchPredicateError) -> FoundationCondition {
        switch try term(expression) {
        case .condition(let condition): return condition
        case .operand(.constant(.bool(let value))): return .constant(value)
        case .operand(.constant(let value)):
            throw Self.refusal("the constant \(PredicateFormatter.format(value)) is used as a test")
        case .operand(let operand): return try .compare(operand, .equal, .constant(.bool(true)))
        case .range: throw Self.refusal("a range is used as a test")
        }
    }

    /// `expression` as a value to compare.
    func operand(of expression: Any) throws(FetchPredicateError) -> FoundationOperand {
        switch try term(expression) {
        case .operand(let operand): return operand
        case .condition: throw Self.refusal("a test (\(Self.plainName(of: expression))) is used as a value; compare it with == true or use it directly")
        case .range: throw Self.refusal("a range is used as a value; test membership with contains")
        }
    }

    /// `expression` as a key path, for `use` (in messages).
    func path(of expression: Any, for use: String) throws(FetchPredicateError) -> FoundationPath {
        if case .path(let path) = try operand(of: expression) { return path }
        throw Self.refusal("\(use) applies to \(Self.plainName(of: expression)), not to a property of the evaluated object")
    }

    // MARK: Refusals

    /// An ``FetchPredicateError/Kind/unsupported`` error with `message`.
    static func refusal(_ message: String) -> FetchPredicateError {
        FetchPredicateError(kind: .unsupported, message: "#Predicate: " + message)
    }

    /// The refusal of an expression type with no translation.
    static func unsupported(_ expression: Any) -> FetchPredicateError {
        refusal("\(plainName(of: expression)) cannot be expressed in a fetch predicate")
    }

    /// The kind of `expression` in plain words: `arithmetic (+, -, *)
    /// (PredicateExpressions.Arithmetic)`.
    static func plainName(of expression: Any) -> String {
        let typeName = String(describing: Swift.type(of: expression))
        let base = String(typeName.prefix { $0 != "<" })
        guard let words = plainNames[base] else { return "the expression \(typeName)" }
        return "\(words) (PredicateExpressions.\(base))"
    }

    private static let plainNames: [String: String] = [
        "Arithmetic": "arithmetic (+, -, *)",
        "IntDivision": "division (/)",
        "FloatDivision": "division (/)",
        "IntRemainder": "a remainder (%)",
        "UnaryMinus": "a negated value (unary -)",
        "Conditional": "a conditional (?: or if)",
        "ConditionalCast": "a conditional cast (as?)",
        "ForceCast": "a forced cast (as!)",
        "TypeCheck": "a type check (is)",
        "StringContainsRegex": "a regular expression match",
        "DictionaryKeySubscript": "a dictionary lookup",
        "DictionaryKeyDefaultValueSubscript": "a dictionary lookup",
        "CollectionIndexSubscript": "a collection subscript ([i])",
        "CollectionRangeSubscript": "a collection slice ([a..<b])",
        "Filter": "filter",
        "SequenceMaximum": "max() of a sequence",
        "SequenceMinimum": "min() of a sequence",
        "ExpressionEvaluate": "the evaluation of an Expression",
        "Value": "a captured value",
        "KeyPath": "a key path",
        "Variable": "a closure's variable",
        "OptionalFlatMap": "optional chaining (?.)",
        "NilCoalesce": "nil-coalescing (??)",
        "ForcedUnwrap": "a forced unwrap (!)",
        "Range": "a range (..<)",
        "ClosedRange": "a range (...)",
        "Equal": "a test (==)",
        "NotEqual": "a test (!=)",
        "Comparison": "a comparison (<, <=, >, >=)",
        "Conjunction": "a test (&&)",
        "Disjunction": "a test (||)",
        "Negation": "a test (!)",
        "SequenceContains": "contains(_:)",
        "SequenceContainsWhere": "contains(where:)",
        "SequenceAllSatisfy": "allSatisfy",
        "SequenceStartsWith": "starts(with:)",
        "CollectionContainsCollection": "contains(_:)",
        "RangeExpressionContains": "contains(_:) on a range",
    ]
}
