import Foundation

/// How arguments (`%@`, `%d`, `%f`, `%K`) and substitution variables become predicate values.
enum PredicateArguments {
    /// Arrays nested deeper than this are refused. (Each level prints as a `CAST({…},
    /// "NSArray")`, two of the parser's 200 levels of nesting.)
    static let maximumNesting = 32

    /// What `%@` (and a `$VARIABLE`) takes, for messages.
    static let objectTypes = "String, Bool, an integer, Double, Float, Decimal, Date, Data, UUID, URL, "
        + "ManagedObjectID, nil, or an array or set of those"

    /// The value of `argument` for `%@` or a variable: nil when no predicate can hold it.
    static func value(_ argument: Any) -> PredicateValue? {
        value(argument, depth: 0)
    }

    private static func value(_ argument: Any, depth: Int) -> PredicateValue? {
        if let optional = argument as? any PredicateOptionalArgument {
            guard let wrapped = optional.predicateWrapped else { return .null }
            return value(wrapped, depth: depth)
        }
        if let scalar = scalarValue(argument) { return scalar }
        if let collection = argument as? any PredicateCollectionArgument {
            guard depth < maximumNesting else { return nil }
            var values: [PredicateValue] = []
            for element in collection.predicateElements {
                guard let element = value(element, depth: depth + 1) else { return nil }
                values.append(element)
            }
            return .array(values)
        }
        return nil
    }

    private static func scalarValue(_ argument: Any) -> PredicateValue? {
        switch argument {
        case let value as PredicateValue: value
        case let value as String: .string(value)
        case let value as Substring: .string(String(value))
        case let value as Character: .string(String(value))
        case let value as Bool: .bool(value)
        case let value as Double: .double(value)
        case let value as Float: .double(Double(value))
        case let value as CGFloat: .double(Double(value))
        case let value as Decimal: .decimal(value)
        case let value as Date: .date(value)
        case let value as Data: .data(value)
        case let value as UUID: .uuid(value)
        case let value as URL: .uri(normalized(value))
        case let value as ManagedObjectID: .objectID(value)
        case is NSNull: .null
        default: integer(argument)
        }
    }

    /// A URL with a base URL becomes the absolute URL its text names, so that the value
    /// survives printing (which prints the absolute string).
    static func normalized(_ url: URL) -> URL {
        guard url.baseURL != nil else { return url }
        return URL(string: url.absoluteString) ?? url
    }

    /// The value of an integer of any type (`Int`, `UInt64`, `Int128`…; Bool is none);
    /// beyond Int64, a Decimal (nil beyond 38 digits).
    static func integer(_ argument: Any) -> PredicateValue? {
        guard let integer = argument as? any BinaryInteger else { return nil }
        if let value = Int64(exactly: integer) { return .integer(value) }
        if let magnitude = UInt64(exactly: integer) { return PredicateLexer.integer(magnitude: magnitude, negative: false) }
        let text = String(describing: integer)
        guard text.utf8.count <= 39 else { return nil }
        return Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")).map { .decimal($0) }
    }

    /// The value of `argument` for `%d` and the like: an integer, not a Bool.
    static func integerPlaceholderValue(_ argument: Any) -> PredicateValue? {
        let argument = unwrapped(argument)
        if argument is Bool { return nil }
        return integer(argument)
    }

    /// The value of `argument` for `%f` and the like: a Double or a Float, or an integer
    /// (promoted to Double).
    static func floatPlaceholderValue(_ argument: Any) -> PredicateValue? {
        let argument = unwrapped(argument)
        switch argument {
        case is Bool: return nil
        case let value as Double: return .double(value)
        case let value as Float: return .double(Double(value))
        case let value as CGFloat: return .double(Double(value))
        default: break
        }
        switch integer(argument) {
        case .integer(let value)?: return .double(Double(value))
        case .decimal(let value)?: return .double(NSDecimalNumber(decimal: value).doubleValue)
        default: return nil
        }
    }

    /// The components of the key path `argument` names for `%K`: a string of keys (or
    /// collection operators) separated by dots; nil for anything else.
    static func keyPath(_ argument: Any) -> [String]? {
        let text: String
        switch unwrapped(argument) {
        case let value as String: text = value
        case let value as Substring: text = String(value)
        default: return nil
        }
        var components: [String] = []
        for part in text.unicodeScalars.split(separator: ".", omittingEmptySubsequences: false) {
            let component = String(String.UnicodeScalarView(part))
            if component.hasPrefix("@") {
                guard let op = collectionOperator(String(component.dropFirst())) else { return nil }
                components.append(op.rawValue)
            } else {
                guard PredicateLexer.isIdentifier(component) else { return nil }
                components.append(component)
            }
        }
        return components
    }

    /// `count` (in any case) → `@count`…
    static func collectionOperator(_ name: String) -> CollectionOperator? {
        guard name.unicodeScalars.allSatisfy(\.isASCII) else { return nil }
        return CollectionOperator(rawValue: "@" + name.lowercased())
    }

    /// `argument` without its Optional wrappers (nil stays an Optional).
    static func unwrapped(_ argument: Any) -> Any {
        var argument = argument
        while let optional = argument as? any PredicateOptionalArgument, let wrapped = optional.predicateWrapped {
            argument = wrapped
        }
        return argument
    }

    /// The type of `argument` for messages: `String`, `nil`, `[String: Int]`.
    static func typeName(_ argument: Any) -> String {
        let argument = unwrapped(argument)
        if let optional = argument as? any PredicateOptionalArgument, optional.predicateWrapped == nil { return "nil" }
        return String(describing: type(of: argument))
    }
}

/// `Optional`, seen through `Any`.
protocol PredicateOptionalArgument {
    var predicateWrapped: Any? { get }
}

extension Optional: PredicateOptionalArgument {
    var predicateWrapped: Any? { self.map { $0 as Any } }
}

/// Arrays and sets, seen through `Any`.
protocol PredicateCollectionArgument {
    var predicateElements: [Any] { get }
}

extension Array: PredicateCollectionArgument {
    var predicateElements: [Any] { map { $0 } }
}

extension ArraySlice: PredicateCollectionArgument {
    var predicateElements: [Any] { map { $0 } }
}

extension ContiguousArray: PredicateCollectionArgument {
    var predicateElements: [Any] { map { $0 } }
}

extension Set: PredicateCollectionArgument {
    var predicateElements: [Any] { map { $0 } }
}
