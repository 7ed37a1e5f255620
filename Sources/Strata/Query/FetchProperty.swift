/// One entry of ``FetchRequest/propertiesToFetch`` or ``FetchRequest/propertiesToGroupBy``:
/// a key path of the fetched entity, or an aggregate with a name of its own.
///
/// A string literal is a key path, so plain names read as they did:
///
/// ```swift
/// var request = FetchRequest<[String: any Sendable]>(entityName: "Note")
/// request.resultType = .dictionary
/// request.propertiesToFetch = ["folder.name", .expression(ExpressionDescription(name: "total", function: .sum, keyPath: "priority"))]
/// request.propertiesToGroupBy = ["folder.name"]
/// ```
public enum FetchProperty: Sendable, Hashable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// An attribute or relationship of the entity, or a key path through to-one
    /// relationships to one (`"folder.name"`). In a dictionary result it is the key.
    case keyPath(String)
    /// An aggregate of the matching objects (of each group, with
    /// ``FetchRequest/propertiesToGroupBy``), under its ``ExpressionDescription/name``.
    case expression(ExpressionDescription)

    /// A key path: `"title"`, `"folder.name"`.
    public init(stringLiteral value: String) {
        self = .keyPath(value)
    }

    /// The key the property has in a dictionary result: the key path, or the expression's
    /// name.
    public var name: String {
        switch self {
        case .keyPath(let path): path
        case .expression(let expression): expression.name
        }
    }

    /// The key path, or `name = function(keyPath)`.
    public var description: String {
        switch self {
        case .keyPath(let path): path
        case .expression(let expression): "\(expression)"
        }
    }
}

/// An aggregate in a dictionary fetch: a function of one key path over the matching
/// objects, with the name its value has in the result (Core Data's
/// `NSExpressionDescription` of `count:`, `sum:`, `average:`, `min:` and `max:`).
///
/// Nil values are left out of every function; `count` of `"self"` counts the objects.
/// Results: `count` an `Int`; `sum` an `Int64` for integer attributes (a sum that does
/// not fit fails with ``StrataError/invalidFetchRequest(_:)``), a `Double` for floating-point
/// ones and a `Decimal` for decimal ones, 0 when nothing is summed; `average` a `Double`
/// (a `Decimal` for decimal attributes); `min` and `max` the attribute's own type. A
/// function with no value to work on (`average`, `min`, `max` of no objects, or of nil
/// values only) leaves its key out of the result, as a nil attribute is left out.
public struct ExpressionDescription: Sendable, Hashable, CustomStringConvertible {
    /// What an expression computes.
    public enum Function: String, Sendable, Hashable, CaseIterable {
        /// How many objects have a value (all of them for `"self"`).
        case count
        /// The sum of the values (numbers).
        case sum
        /// The arithmetic mean of the values (numbers).
        case average
        /// The smallest value (numbers, strings, dates, UUIDs and binary data, in the order
        /// sorting uses).
        case min
        /// The largest value.
        case max
    }

    /// The key of the value in each result dictionary.
    public var name: String
    /// What is computed.
    public var function: Function
    /// The attribute aggregated: a key path of the fetched entity, through to-one
    /// relationships if need be; `"self"` with ``Function/count``.
    public var keyPath: String

    /// `function` of `keyPath`, named `name` in the results.
    public init(name: String, function: Function, keyPath: String) {
        self.name = name
        self.function = function
        self.keyPath = keyPath
    }

    /// `total = sum(priority)`.
    public var description: String {
        "\(name) = \(function.rawValue)(\(keyPath))"
    }
}
