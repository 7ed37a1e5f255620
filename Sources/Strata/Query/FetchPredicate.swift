import Foundation

/// A condition on objects, for fetch requests and in-memory filtering.
///
/// Parse Core Data's NSPredicate format language (which Linux Foundation refuses to
/// compile), with arguments substituted for `%@`, `%d`, `%f` and `%K`:
///
/// ```swift
/// let urgent = try FetchPredicate(format: "priority >= %d AND folder.name ==[c] %@", 3, "inbox")
/// let tagged = try FetchPredicate(format: "ANY tags.label IN %@", ["swift", "linux"])
/// let busy = try FetchPredicate(format: "notes.@count > 10")
/// ```
///
/// Or build one from the key paths of typed subclasses, with no string and no `try`:
///
/// ```swift
/// let urgent = \Note.priority >= 3 && (\Note.folder?.name).equals("inbox", options: .caseInsensitive)
/// let tagged = (\Note.tags).any(\.label).in(["swift", "linux"])
/// let busy = \Folder.notes.count > 10
/// ```
///
/// A malformed string, an argument of the wrong type or too few arguments throws a
/// ``FetchPredicateError`` pointing at the position in the string; nothing traps. Keys are
/// checked against the entity when a request runs. A key path that reads no stored
/// property (a computed property, say) cannot be refused when the predicate is built, so
/// the predicate carries the error: ``evaluate(with:)`` and a fetch throw it.
///
/// Or write the condition in Swift with Foundation's `#Predicate` and translate it with
/// ``init(_:)``: `try FetchPredicate(#Predicate<Note> { $0.priority >= 3 })`.
public struct FetchPredicate: Sendable, Hashable, CustomStringConvertible {
    let node: PredicateNode
    /// Why the predicate cannot be used: a key path of the builder that names no stored
    /// property. Kept through `&&`, `||`, `!` and substitution, thrown by evaluation and by
    /// a request's validation before anything else.
    let deferredError: FetchPredicateError?

    init(node: PredicateNode, deferredError: FetchPredicateError? = nil) {
        self.node = node
        self.deferredError = deferredError
    }

    /// Parses `format`, substituting `arguments` in order for `%@`, `%d`, `%i`, `%ld`,
    /// `%f`, `%lf` and `%K`.
    ///
    /// - Throws: ``FetchPredicateError`` with the position of the problem.
    public init(format: String, _ arguments: any Sendable...) throws(FetchPredicateError) {
        try self.init(format: format, argumentArray: arguments)
    }

    /// Parses `format` with an array of arguments.
    ///
    /// - Throws: ``FetchPredicateError`` with the position of the problem.
    public init(format: String, argumentArray arguments: [any Sendable]) throws(FetchPredicateError) {
        node = try PredicateParser.parse(format, arguments: arguments)
        deferredError = nil
    }

    /// `TRUEPREDICATE`: every object.
    public static let `true` = FetchPredicate(node: .constant(true))
    /// `FALSEPREDICATE`: no object.
    public static let `false` = FetchPredicate(node: .constant(false))

    /// Both conditions.
    public static func && (lhs: FetchPredicate, rhs: FetchPredicate) -> FetchPredicate {
        FetchPredicate(node: .and(lhs.node.conjuncts + rhs.node.conjuncts), deferredError: lhs.deferredError ?? rhs.deferredError)
    }

    /// Either condition.
    public static func || (lhs: FetchPredicate, rhs: FetchPredicate) -> FetchPredicate {
        FetchPredicate(node: .or(lhs.node.disjuncts + rhs.node.disjuncts), deferredError: lhs.deferredError ?? rhs.deferredError)
    }

    /// The opposite condition.
    public static prefix func ! (operand: FetchPredicate) -> FetchPredicate {
        FetchPredicate(node: .not(operand.node), deferredError: operand.deferredError)
    }

    /// The predicate with every `$NAME` variable replaced by `variables[NAME]`.
    ///
    /// A predicate carrying the error of a refused key path still carries it.
    ///
    /// - Throws: ``FetchPredicateError`` for a variable missing from `variables` or a value
    ///   that cannot appear in a predicate.
    public func substituting(_ variables: [String: any Sendable]) throws(FetchPredicateError) -> FetchPredicate {
        FetchPredicate(node: try node.substituting(variables), deferredError: deferredError)
    }

    /// The predicate in the format language (parsing it gives an equal predicate); for a
    /// predicate carrying the error of a refused key path, the error in angle brackets:
    /// `<predicate error: …>`.
    public var description: String {
        deferredError.map { "<\($0)>" } ?? node.formatted
    }

    /// The names of the `$VARIABLE`s still to substitute.
    public var variableNames: Set<String> { node.variableNames }
}

/// Why a predicate could not be parsed or used.
public struct FetchPredicateError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of problem.
    public enum Kind: Sendable, Hashable {
        /// The format string is not valid syntax.
        case syntax
        /// Fewer arguments than `%` placeholders.
        case missingArgument
        /// More arguments than `%` placeholders.
        case extraArgument
        /// An argument of a type the placeholder does not take (`%d` with a string,
        /// `%K` with a non-string, a value no predicate can hold).
        case argumentType
        /// A `$VARIABLE` with no value.
        case missingVariable
        /// A key that the entity does not have, or one used where it cannot be (an
        /// aggregate on a to-one, a key path through an attribute).
        case unknownKey
        /// An expression the predicate language cannot express (from a key path or a
        /// `#Predicate`).
        case unsupported
    }

    /// The kind of problem.
    public let kind: Kind
    /// What is wrong, in a sentence.
    public let message: String
    /// The offset in the format string, in characters, where the problem is (nil when it
    /// is not about a position).
    public let position: Int?

    /// A predicate error.
    public init(kind: Kind, message: String, position: Int? = nil) {
        self.kind = kind
        self.message = message
        self.position = position
    }

    /// `predicate error at 12: expected ')'`.
    public var description: String {
        position.map { "predicate error at \($0): \(message)" } ?? "predicate error: \(message)"
    }
}
