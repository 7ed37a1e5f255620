import Foundation

/// The syntax tree of a ``FetchPredicate``: what the format parser, the key-path builder
/// and the `#Predicate` translation produce, and what the evaluator and the query
/// planner consume.
indirect enum PredicateNode: Sendable, Hashable {
    /// `TRUEPREDICATE` or `FALSEPREDICATE`.
    case constant(Bool)
    /// `NOT p`, `!p`.
    case not(PredicateNode)
    /// `p AND q AND …` (`&&`).
    case and([PredicateNode])
    /// `p OR q OR …` (`||`).
    case or([PredicateNode])
    /// A comparison of two expressions.
    case comparison(PredicateComparison)
}

/// `left op right`, optionally under an aggregate modifier (`ANY tags.name == "x"`).
struct PredicateComparison: Sendable, Hashable {
    /// The comparison operators of the NSPredicate format language.
    enum Operator: String, Sendable, Hashable, CaseIterable {
        case equal = "=="
        case notEqual = "!="
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
        /// `x BETWEEN {low, high}`: inclusive at both ends.
        case between = "BETWEEN"
        /// `x IN {a, b}` or `x IN collectionKeyPath`.
        case `in` = "IN"
        case beginsWith = "BEGINSWITH"
        case endsWith = "ENDSWITH"
        /// String containment, or collection membership when the left side is a collection.
        case contains = "CONTAINS"
        /// `?` matches one character, `*` any run of characters.
        case like = "LIKE"
        /// An ICU regular expression that must match the whole string.
        case matches = "MATCHES"
    }

    /// `ANY` / `SOME`, `ALL`, `NONE`, or none (`direct`).
    enum Modifier: String, Sendable, Hashable {
        case direct = ""
        case any = "ANY"
        case all = "ALL"
        case none = "NONE"
    }

    /// `[c]`, `[d]`, `[cd]`: string comparison options.
    struct Options: OptionSet, Sendable, Hashable {
        let rawValue: UInt8
        /// `[c]`: case-insensitive.
        static let caseInsensitive = Options(rawValue: 1)
        /// `[d]`: diacritic-insensitive.
        static let diacriticInsensitive = Options(rawValue: 2)
    }

    var modifier: Modifier = .direct
    var left: PredicateExpression
    var op: Operator
    var options: Options = []
    var right: PredicateExpression
}

/// An operand of a comparison.
indirect enum PredicateExpression: Sendable, Hashable {
    /// A key path from the evaluated object: `title`, `folder.name`, `tags.@count`,
    /// `notes.@avg.priority`. `SELF` is the empty path. Collection operators
    /// (`@count`, `@sum`, `@avg`, `@min`, `@max`) appear as components.
    case keyPath([String])
    /// A constant: a literal or a substituted argument.
    case constant(PredicateValue)
    /// `$NAME`, until substituted.
    case variable(String)
    /// `{a, b, c}`: an aggregate of expressions (for `IN` and `BETWEEN`).
    case aggregate([PredicateExpression])
}

/// A value a predicate compares: a literal, an argument, or a value read from an object.
enum PredicateValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case double(Double)
    case decimal(Decimal)
    case string(String)
    case date(Date)
    case data(Data)
    case uuid(UUID)
    case uri(URL)
    case objectID(ManagedObjectID)
    /// A transformable attribute's encoded bytes (compared for equality only).
    case transformable(Data)
    case array([PredicateValue])
}

/// The collection operators of key paths.
enum CollectionOperator: String, Sendable, Hashable, CaseIterable {
    case count = "@count"
    case sum = "@sum"
    case avg = "@avg"
    case min = "@min"
    case max = "@max"
}

extension PredicateNode {
    /// The operands of a top-level AND (the node itself otherwise).
    var conjuncts: [PredicateNode] {
        if case .and(let nodes) = self { return nodes }
        return [self]
    }

    /// The operands of a top-level OR (the node itself otherwise).
    var disjuncts: [PredicateNode] {
        if case .or(let nodes) = self { return nodes }
        return [self]
    }
}
