import Foundation

// The key-path builder: comparisons of typed subclasses' key paths with Swift values,
// producing the same `PredicateNode`s the format parser does.
//
//     request.predicate = \Note.priority > 3 && \Note.title == "Groceries"
//
// Every function here is total: a key path that reads no stored property gives a
// predicate carrying the error (`FetchPredicate.deferredError`).

extension FetchPredicate {
    /// How strings compare in the builder's string operations: `[c]`, `[d]`, `[cd]` of the
    /// format language (Core Data's `NSComparisonPredicate.Options`).
    public struct ComparisonOptions: OptionSet, Sendable, Hashable {
        /// The options' bits.
        public let rawValue: UInt8

        /// Options from their bits.
        public init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        /// `[c]`: ignore case.
        public static let caseInsensitive = ComparisonOptions(rawValue: 1)
        /// `[d]`: ignore diacritics (`é` equals `e`).
        public static let diacriticInsensitive = ComparisonOptions(rawValue: 2)

        var predicateOptions: PredicateComparison.Options {
            var options: PredicateComparison.Options = []
            if contains(.caseInsensitive) { options.insert(.caseInsensitive) }
            if contains(.diacriticInsensitive) { options.insert(.diacriticInsensitive) }
            return options
        }
    }
}

/// The Swift types of string attributes, `String` and `String?`: key paths to them take
/// the builder's string operations (``Swift/KeyPath/beginsWith(_:options:)`` and the
/// others).
public protocol StringAttributeValue: AttributeStorable {}

extension String: StringAttributeValue {}
extension Optional: StringAttributeValue where Wrapped == String {}

/// The Swift types a key path to a to-many relationship has: `Set<Destination>`,
/// `[Destination]`, or an optional of one (through an optional to-one,
/// `\Note.folder?.notes`). Key paths to them take the quantifiers
/// ``Swift/KeyPath/any(_:)``, ``Swift/KeyPath/all(_:)`` and ``Swift/KeyPath/none(_:)``.
public protocol ToManyKeyPathValue {
    /// The destination class.
    associatedtype Element: ManagedObject
}

extension Set: ToManyKeyPathValue where Element: ManagedObject {}
extension Array: ToManyKeyPathValue where Element: ManagedObject {}
extension Optional: ToManyKeyPathValue where Wrapped: ToManyKeyPathValue {
    /// The wrapped relationship's destination class.
    public typealias Element = Wrapped.Element
}

/// The left side of a comparison the builder makes: a key path's property names (or the
/// error of a refused key path) under a quantifier.
struct PredicateOperand: Sendable, Hashable {
    let components: Result<[String], FetchPredicateError>
    var modifier: PredicateComparison.Modifier = .direct

    init<Root: ManagedObject, Value>(_ keyPath: KeyPath<Root, Value>) {
        do throws(FetchPredicateError) {
            let names = try KeyPathNames.components(of: keyPath)
            // The parser reads SELF as the empty path.
            components = .success(names == ["SELF"] ? [] : names)
        } catch {
            components = .failure(error)
        }
    }

    init(components: Result<[String], FetchPredicateError>, modifier: PredicateComparison.Modifier) {
        self.components = components
        self.modifier = modifier
    }

    /// `self op right`, or a predicate carrying the key path's error.
    func compared(
        _ op: PredicateComparison.Operator, _ right: PredicateExpression,
        options: FetchPredicate.ComparisonOptions = []
    ) -> FetchPredicate {
        switch components {
        case .success(let names):
            FetchPredicate(node: .comparison(PredicateComparison(
                modifier: modifier, left: .keyPath(names), op: op, options: options.predicateOptions, right: right)))
        case .failure(let error):
            FetchPredicate(node: .constant(false), deferredError: error)
        }
    }

    /// This (to-many) operand followed on through `attribute`, under `modifier`.
    func quantified(_ modifier: PredicateComparison.Modifier, through attribute: PredicateOperand) -> PredicateOperand {
        let joined: Result<[String], FetchPredicateError> = switch (components, attribute.components) {
        case (.success(let relationship), .success(let attribute)): .success(relationship + attribute)
        case (.failure(let error), _), (_, .failure(let error)): .failure(error)
        }
        return PredicateOperand(components: joined, modifier: modifier)
    }

    /// A Swift value as a constant: its stored form (Int16, Int32, Int64 and Int as
    /// integers, Float as a Double), nil as nil.
    static func constant(_ value: some AttributeStorable) -> PredicateExpression {
        switch PredicateValue(value.attributeValue) {
        case .uri(let url): .constant(.uri(PredicateArguments.normalized(url)))
        case let converted: .constant(converted)
        }
    }

    /// An object as a constant: its ID (nil as nil).
    static func constant(_ object: ManagedObject?) -> PredicateExpression {
        .constant(object.map { .objectID($0.objectID) } ?? .null)
    }

    static func constants(_ values: some Sequence<some AttributeStorable>) -> PredicateExpression {
        .aggregate(values.map { constant($0) })
    }
}

// MARK: Attributes

extension KeyPath where Root: ManagedObject, Value: AttributeStorable {
    /// `key == value`: the attribute equals `value` (nil for an optional attribute).
    ///
    /// ```swift
    /// request.predicate = \Note.title == "Groceries" && \Note.body == nil
    /// ```
    public static func == (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.equal, PredicateOperand.constant(value))
    }

    /// `key != value`.
    public static func != (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.notEqual, PredicateOperand.constant(value))
    }

    /// `key < value`. Numbers compare numerically, strings by UTF-8 bytes, dates by time; a
    /// comparison with nil is false.
    public static func < (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.less, PredicateOperand.constant(value))
    }

    /// `key <= value`.
    public static func <= (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.lessOrEqual, PredicateOperand.constant(value))
    }

    /// `key > value`.
    public static func > (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.greater, PredicateOperand.constant(value))
    }

    /// `key >= value`.
    public static func >= (keyPath: KeyPath, value: Value) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.greaterOrEqual, PredicateOperand.constant(value))
    }

    /// `key IN {a, b, …}`: the attribute equals one of `values`.
    ///
    /// ```swift
    /// request.predicate = (\Note.priority).in([1, 3, 5])
    /// ```
    public func `in`(_ values: some Sequence<Value>) -> FetchPredicate {
        PredicateOperand(self).compared(.in, PredicateOperand.constants(values))
    }
}

extension KeyPath where Root: ManagedObject, Value: AttributeStorable & Comparable {
    /// `key BETWEEN {low, high}`: the attribute lies in `range`, bounds included.
    ///
    /// ```swift
    /// request.predicate = (\Note.priority).between(1...3)
    /// ```
    public func between(_ range: ClosedRange<Value>) -> FetchPredicate {
        PredicateOperand(self).compared(.between, PredicateOperand.constants([range.lowerBound, range.upperBound]))
    }
}

extension KeyPath where Root: ManagedObject {
    /// `key BETWEEN {low, high}` for an optional attribute: it lies in `range`, bounds
    /// included (nil never does).
    public func between<Wrapped: AttributeStorable & Comparable>(_ range: ClosedRange<Wrapped>) -> FetchPredicate
    where Value == Wrapped? {
        PredicateOperand(self).compared(.between, PredicateOperand.constants([range.lowerBound, range.upperBound]))
    }
}

// MARK: Strings

extension KeyPath where Root: ManagedObject, Value: StringAttributeValue {
    /// `key ==[c] string`: equality under `options` (`==` compares exactly).
    ///
    /// ```swift
    /// request.predicate = (\Note.folder?.name).equals("inbox", options: .caseInsensitive)
    /// ```
    public func equals(_ string: String, options: FetchPredicate.ComparisonOptions) -> FetchPredicate {
        PredicateOperand(self).compared(.equal, .constant(.string(string)), options: options)
    }

    /// `key BEGINSWITH prefix`.
    public func beginsWith(_ prefix: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        PredicateOperand(self).compared(.beginsWith, .constant(.string(prefix)), options: options)
    }

    /// `key ENDSWITH suffix`.
    public func endsWith(_ suffix: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        PredicateOperand(self).compared(.endsWith, .constant(.string(suffix)), options: options)
    }

    /// `key CONTAINS substring`.
    ///
    /// ```swift
    /// request.predicate = (\Note.body).contains("cafe", options: [.caseInsensitive, .diacriticInsensitive])
    /// ```
    public func contains(_ substring: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        PredicateOperand(self).compared(.contains, .constant(.string(substring)), options: options)
    }

    /// `key LIKE pattern`: `?` matches one character, `*` any run of characters.
    public func like(_ pattern: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        PredicateOperand(self).compared(.like, .constant(.string(pattern)), options: options)
    }

    /// `key MATCHES regularExpression`: an ICU regular expression matching the whole string
    /// (one that does not compile matches nothing).
    public func matches(_ regularExpression: String, options: FetchPredicate.ComparisonOptions = []) -> FetchPredicate {
        PredicateOperand(self).compared(.matches, .constant(.string(regularExpression)), options: options)
    }
}

// MARK: Objects

extension KeyPath where Root: ManagedObject {
    /// `relationship == object`: the to-one relationship holds `object` (compared by
    /// object ID), or is empty for nil.
    ///
    /// ```swift
    /// request.predicate = \Note.folder == inbox
    /// ```
    public static func == <Destination: ManagedObject>(keyPath: KeyPath, object: Destination?) -> FetchPredicate
    where Value == Destination? {
        PredicateOperand(keyPath).compared(.equal, PredicateOperand.constant(object))
    }

    /// `relationship != object`.
    public static func != <Destination: ManagedObject>(keyPath: KeyPath, object: Destination?) -> FetchPredicate
    where Value == Destination? {
        PredicateOperand(keyPath).compared(.notEqual, PredicateOperand.constant(object))
    }

    /// `relationship IN {…}`: the to-one relationship holds one of `objects`.
    public func `in`<Destination: ManagedObject>(_ objects: some Sequence<Destination>) -> FetchPredicate
    where Value == Destination? {
        PredicateOperand(self).compared(.in, .aggregate(objects.map { PredicateOperand.constant($0) }))
    }
}

extension KeyPath where Root: ManagedObject, Value == ManagedObjectID {
    /// `SELF == id`: the object is the one `id` names (`\Note.objectID == id`).
    public static func == (keyPath: KeyPath, id: ManagedObjectID) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.equal, .constant(.objectID(id)))
    }

    /// `SELF != id`.
    public static func != (keyPath: KeyPath, id: ManagedObjectID) -> FetchPredicate {
        PredicateOperand(keyPath).compared(.notEqual, .constant(.objectID(id)))
    }

    /// `SELF IN {…}`: the object is one of those `ids` name.
    ///
    /// ```swift
    /// request.predicate = (\Note.objectID).in(savedIDs)
    /// ```
    public func `in`(_ ids: some Sequence<ManagedObjectID>) -> FetchPredicate {
        PredicateOperand(self).compared(.in, .aggregate(ids.map { .constant(.objectID($0)) }))
    }
}

// MARK: To-many relationships

extension KeyPath where Root: ManagedObject, Value: ToManyKeyPathValue {
    /// `ANY relationship.attribute`: compare it to test whether at least one destination's
    /// `attribute` passes.
    ///
    /// ```swift
    /// request.predicate = (\Note.tags).any(\.label) == "swift"
    /// request.predicate = (\Note.tags).any(\.label).beginsWith("sw")
    /// ```
    public func any<Attribute: AttributeStorable>(_ attribute: KeyPath<Value.Element, Attribute>) -> QuantifiedKeyPath<Root, Attribute> {
        QuantifiedKeyPath(PredicateOperand(self).quantified(.any, through: PredicateOperand(attribute)))
    }

    /// `ALL relationship.attribute`: compare it to test whether every destination's
    /// `attribute` passes (true when there is none).
    public func all<Attribute: AttributeStorable>(_ attribute: KeyPath<Value.Element, Attribute>) -> QuantifiedKeyPath<Root, Attribute> {
        QuantifiedKeyPath(PredicateOperand(self).quantified(.all, through: PredicateOperand(attribute)))
    }

    /// `NONE relationship.attribute`: compare it to test whether no destination's
    /// `attribute` passes.
    public func none<Attribute: AttributeStorable>(_ attribute: KeyPath<Value.Element, Attribute>) -> QuantifiedKeyPath<Root, Attribute> {
        QuantifiedKeyPath(PredicateOperand(self).quantified(.none, through: PredicateOperand(attribute)))
    }

    /// `relationship CONTAINS object`: `object` is one of the destinations.
    ///
    /// ```swift
    /// request.predicate = (\Note.tags).contains(swiftTag)
    /// ```
    public func contains(_ object: Value.Element) -> FetchPredicate {
        PredicateOperand(self).compared(.contains, PredicateOperand.constant(object))
    }
}
