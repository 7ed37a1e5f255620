import Foundation

/// A new value for one attribute of every row a ``BatchUpdateRequest`` changes: a
/// constant, or arithmetic over the row's own attribute values (Core Data's
/// `NSExpression` in `propertiesToUpdate`).
///
/// ```swift
/// var request = BatchUpdateRequest(entityName: "Task")
/// request.predicate = try FetchPredicate(format: "done == NO")
/// request.propertiesToUpdate = [
///     "priority": try UpdateExpression(format: "priority + 1"),
///     "note": .constant("bumped"),
///     "due": .constant(nil),
/// ]
/// ```
///
/// The format language: integer and decimal numbers, quoted strings (`'…'` or `"…"`),
/// `nil` / `NULL`, `TRUE` / `YES` / `FALSE` / `NO`, `%@` placeholders (filled from the
/// arguments, in order), attribute names of the entity (each row's own value, before the
/// update), parentheses, unary `-`, and `+ - * / %` with the usual precedence.
///
/// Values combine as SQL's do: an operand that is nil makes the result nil; two integers
/// give an integer (overflow and division by zero are errors, not wrapped), a double or
/// float with a number gives a double, a decimal with an integer or a decimal gives a
/// decimal; `string + string` concatenates; `date + number` and `date - number` move the
/// date by that many seconds, and `date - date` is the seconds between them. The result is
/// then stored in the attribute's type: an integer into a floating-point or decimal
/// attribute as that number; a double into an integer attribute only when it is a whole
/// number that fits. Anything else fails the whole request with
/// ``StrataError/typeMismatch(key:entity:expected:actual:)``, and nothing is written.
public struct UpdateExpression: Sendable, CustomStringConvertible {
    /// The expression tree.
    indirect enum Node: Sendable {
        /// A Swift value, converted for the attribute when the request runs.
        case constant(any Sendable)
        /// A number, string, boolean or nil from a format string.
        case literal(AttributeValue?)
        /// The row's value of an attribute.
        case key(String)
        /// `-operand`.
        case negate(Node)
        /// `left operator right`.
        case binary(Operator, Node, Node)
    }

    /// The arithmetic operators.
    enum Operator: Character, Sendable {
        case add = "+", subtract = "-", multiply = "*", divide = "/", remainder = "%"
    }

    let node: Node
    /// The format string, or a description of the constant.
    public let description: String

    private init(node: Node, description: String) {
        self.node = node
        self.description = description
    }

    /// Sets the attribute to `value`: a Swift value of the attribute's type (as
    /// ``ManagedObject/setValue(_:forKey:)`` takes it), or nil.
    public static func constant(_ value: (any Sendable)?) -> UpdateExpression {
        guard let value else { return UpdateExpression(node: .literal(nil), description: "nil") }
        return UpdateExpression(node: .constant(value), description: "\(value)")
    }

    /// Parses an arithmetic expression over the row's own attributes, such as
    /// `priority + 1` or `price * %@`.
    ///
    /// - Throws: ``FetchPredicateError`` of kind `syntax` for text that is not an
    ///   expression, `missingArgument` / `extraArgument` when the `%@` placeholders and
    ///   the arguments do not pair up. Attribute names are checked when the request runs.
    public init(format: String, _ arguments: any Sendable...) throws(FetchPredicateError) {
        try self.init(format: format, argumentArray: arguments)
    }

    /// ``init(format:_:)`` with the arguments in an array.
    public init(format: String, argumentArray arguments: [any Sendable]) throws(FetchPredicateError) {
        var parser = Parser(text: Array(format.unicodeScalars), arguments: arguments)
        let node = try parser.parse()
        self.init(node: node, description: format)
    }

    /// The attribute names the expression reads.
    var keys: [String] {
        var found: [String] = []
        func walk(_ node: Node) {
            switch node {
            case .key(let name): if !found.contains(name) { found.append(name) }
            case .negate(let operand): walk(operand)
            case .binary(_, let left, let right):
                walk(left)
                walk(right)
            case .constant, .literal: break
            }
        }
        walk(node)
        return found
    }
}

// MARK: Parsing

extension UpdateExpression {
    /// A recursive-descent parser of the format language.
    private struct Parser {
        let text: [Unicode.Scalar]
        let arguments: [any Sendable]
        var position = 0
        var argumentIndex = 0

        init(text: [Unicode.Scalar], arguments: [any Sendable]) {
            self.text = text
            self.arguments = arguments
        }

        mutating func parse() throws(FetchPredicateError) -> Node {
            let node = try sum()
            skipSpaces()
            guard position == text.count else { throw error("unexpected '\(String(String.UnicodeScalarView(text[position...])))'") }
            guard argumentIndex == arguments.count else {
                throw FetchPredicateError(
                    kind: .extraArgument, message: "\(arguments.count) argument(s) for \(argumentIndex) placeholder(s)")
            }
            return node
        }

        private func error(_ message: String) -> FetchPredicateError {
            FetchPredicateError(kind: .syntax, message: message, position: position)
        }

        private mutating func skipSpaces() {
            while position < text.count, text[position].properties.isWhitespace { position += 1 }
        }

        /// The next character (after spaces), not consumed.
        private mutating func peek() -> Unicode.Scalar? {
            skipSpaces()
            return position < text.count ? text[position] : nil
        }

        private mutating func sum() throws(FetchPredicateError) -> Node {
            var node = try product()
            while let next = peek(), next == "+" || next == "-" {
                position += 1
                node = .binary(next == "+" ? .add : .subtract, node, try product())
            }
            return node
        }

        private mutating func product() throws(FetchPredicateError) -> Node {
            var node = try unary()
            while let next = peek(), next == "*" || next == "/" || (next == "%" && !isPlaceholder(at: position)) {
                position += 1
                let op: Operator = next == "*" ? .multiply : next == "/" ? .divide : .remainder
                node = .binary(op, node, try unary())
            }
            return node
        }

        private func isPlaceholder(at index: Int) -> Bool {
            index + 1 < text.count && text[index] == "%" && text[index + 1] == "@"
        }

        private mutating func unary() throws(FetchPredicateError) -> Node {
            if peek() == "-" {
                position += 1
                return .negate(try unary())
            }
            if peek() == "+" {
                position += 1
                return try unary()
            }
            return try primary()
        }

        private mutating func primary() throws(FetchPredicateError) -> Node {
            guard let next = peek() else { throw error("expected a value, found the end") }
            if next == "(" {
                position += 1
                let node = try sum()
                guard peek() == ")" else { throw error("expected ')'") }
                position += 1
                return node
            }
            if isPlaceholder(at: position) {
                position += 2
                guard argumentIndex < arguments.count else {
                    throw FetchPredicateError(kind: .missingArgument, message: "no argument for placeholder \(argumentIndex + 1)", position: position - 2)
                }
                defer { argumentIndex += 1 }
                return .constant(arguments[argumentIndex])
            }
            if next == "'" || next == "\"" { return .literal(.string(try string(quote: next))) }
            if ("0"..."9").contains(next) || next == "." { return try number() }
            if PredicateLexer.isIdentifierStart(next) {
                let start = position
                while position < text.count, PredicateLexer.isIdentifierContinue(text[position]) { position += 1 }
                let word = String(String.UnicodeScalarView(text[start..<position]))
                switch word.uppercased() {
                case "NIL", "NULL": return .literal(nil)
                case "TRUE", "YES": return .literal(.boolean(true))
                case "FALSE", "NO": return .literal(.boolean(false))
                default: return .key(word)
                }
            }
            throw error("unexpected '\(Character(next))'")
        }

        private mutating func string(quote: Unicode.Scalar) throws(FetchPredicateError) -> String {
            let start = position
            position += 1
            var scalars = String.UnicodeScalarView()
            while position < text.count {
                let scalar = text[position]
                position += 1
                if scalar == quote { return String(scalars) }
                if scalar == "\\", position < text.count {
                    let escaped = text[position]
                    position += 1
                    switch escaped {
                    case "n": scalars.append("\n")
                    case "t": scalars.append("\t")
                    default: scalars.append(escaped)
                    }
                } else {
                    scalars.append(scalar)
                }
            }
            position = start
            throw error("a string is not closed")
        }

        private mutating func number() throws(FetchPredicateError) -> Node {
            let start = position
            var isDecimal = false
            while position < text.count {
                let scalar = text[position]
                if ("0"..."9").contains(scalar) {
                    position += 1
                } else if scalar == "." && !isDecimal {
                    isDecimal = true
                    position += 1
                } else if (scalar == "e" || scalar == "E") && position > start {
                    isDecimal = true
                    position += 1
                    if position < text.count, text[position] == "-" || text[position] == "+" { position += 1 }
                } else {
                    break
                }
            }
            let word = String(String.UnicodeScalarView(text[start..<position]))
            if !isDecimal, let integer = Int64(word) { return .literal(.integer(integer)) }
            if let double = Double(word) { return .literal(.double(double)) }
            position = start
            throw error("'\(word)' is not a number")
        }
    }
}

// MARK: Evaluation

extension UpdateExpression {
    /// Why an expression could not give a value for a row.
    struct EvaluationError: Error {
        let message: String
    }

    /// The expression's value for a row whose attribute values `value(name)` gives.
    /// Constants come out converted for `attribute` (of entity `entityName`).
    func evaluate(
        for attribute: AttributeDescription, entityName: String, _ value: (String) -> AttributeValue?
    ) throws -> AttributeValue? {
        var names: [String] = []
        let compiled = try compiled(for: attribute, entityName: entityName) { name in
            if let index = names.firstIndex(of: name) { return index }
            names.append(name)
            return names.count - 1
        }
        let values = names.map(value)
        return try compiled.evaluate(values)
    }

    /// The expression made ready to run on many rows: attribute names replaced by the
    /// positions `position(name)` gives in the array of values each row is evaluated
    /// with, constants converted once (a lone constant for `attribute`, of entity
    /// `entityName`; a constant operand as the number, string or date it is).
    ///
    /// - Throws: ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a constant
    ///   the attribute (or arithmetic) cannot take; ``StrataError/unknownKey(key:entity:)``
    ///   for a name `position` does not know.
    func compiled(
        for attribute: AttributeDescription, entityName: String, position: (String) -> Int?
    ) throws(StrataError) -> Compiled {
        func compile(_ node: Node) throws(StrataError) -> Compiled {
            switch node {
            case .literal(let value): return .value(value)
            case .constant(let constant): return .value(try Self.operand(constant, for: attribute, entityName: entityName))
            case .key(let name):
                guard let index = position(name) else { throw StrataError.unknownKey(key: name, entity: entityName) }
                return .field(index)
            case .negate(let operand): return .negate(try compile(operand))
            case .binary(let op, let left, let right): return .binary(op, try compile(left), try compile(right))
            }
        }
        if case .constant(let constant) = node {
            return .value(try ManagedObject.attributeValue(from: constant, for: attribute, entityName: entityName))
        }
        return try compile(node)
    }

    /// A Swift value used as an operand of arithmetic.
    private static func operand(_ value: any Sendable, for attribute: AttributeDescription, entityName: String) throws(StrataError) -> AttributeValue? {
        switch ManagedObject.flattened(value) {
        case nil: return nil
        case let value as AttributeValue: return value
        case let n as Int: return .integer(Int64(n))
        case let n as Int64: return .integer(n)
        case let n as Int32: return .integer(Int64(n))
        case let n as Int16: return .integer(Int64(n))
        case let d as Double: return .double(d)
        case let f as Float: return .float(f)
        case let d as Decimal: return .decimal(d)
        case let b as Bool: return .boolean(b)
        case let s as String: return .string(s)
        case let d as Date: return .date(d)
        default:
            throw StrataError.typeMismatch(
                key: attribute.name, entity: entityName, expected: "a number, string, date or boolean operand",
                actual: "\(type(of: value))")
        }
    }

    /// An expression ready to run (``compiled(for:entityName:position:)``).
    indirect enum Compiled: Sendable {
        case value(AttributeValue?)
        case field(Int)
        case negate(Compiled)
        case binary(Operator, Compiled, Compiled)

        /// The value for a row whose read values are `values`.
        ///
        /// - Throws: ``EvaluationError`` for an overflow, a division by zero, or operands
        ///   that do not combine.
        func evaluate(_ values: [AttributeValue?]) throws -> AttributeValue? {
            switch self {
            case .value(let value): return value
            case .field(let index): return values[index]
            case .negate(let operand):
                switch try operand.evaluate(values) {
                case nil: return nil
                case .integer(let n)?:
                    guard n != .min else { throw EvaluationError(message: "-(\(n)) overflows") }
                    return .integer(-n)
                case .double(let d)?: return .double(-d)
                case .float(let f)?: return .double(-Double(f))
                case .decimal(let d)?: return .decimal(-d)
                case let other?: throw EvaluationError(message: "cannot negate a \(other.kindName)")
                }
            case .binary(let op, let left, let right):
                guard let l = try left.evaluate(values), let r = try right.evaluate(values) else { return nil }
                return try UpdateExpression.apply(op, l, r)
            }
        }
    }

    fileprivate static func apply(_ op: Operator, _ l: AttributeValue, _ r: AttributeValue) throws -> AttributeValue {
        switch (l, r) {
        case (.integer(let a), .integer(let b)):
            let (result, overflow): (Int64, Bool)
            switch op {
            case .add: (result, overflow) = a.addingReportingOverflow(b)
            case .subtract: (result, overflow) = a.subtractingReportingOverflow(b)
            case .multiply: (result, overflow) = a.multipliedReportingOverflow(by: b)
            case .divide, .remainder:
                guard b != 0 else { throw EvaluationError(message: "\(a) \(op.rawValue) 0 divides by zero") }
                (result, overflow) = op == .divide ? a.dividedReportingOverflow(by: b) : a.remainderReportingOverflow(dividingBy: b)
            }
            guard !overflow else { throw EvaluationError(message: "\(a) \(op.rawValue) \(b) overflows a 64-bit integer") }
            return .integer(result)
        case (.decimal(let a), _):
            guard let b = decimal(r) else { break }
            return try decimalResult(op, a, b)
        case (_, .decimal(let b)):
            guard let a = decimal(l) else { break }
            return try decimalResult(op, a, b)
        case (.string(let a), .string(let b)) where op == .add:
            return .string(a + b)
        case (.date(let a), _) where op == .add || op == .subtract:
            if case .date(let b) = r, op == .subtract { return .double(a.timeIntervalSince(b)) }
            guard let seconds = double(r) else { break }
            return .date(a.addingTimeInterval(op == .add ? seconds : -seconds))
        case (_, .date(let b)) where op == .add:
            guard let seconds = double(l) else { break }
            return .date(b.addingTimeInterval(seconds))
        default:
            guard let a = double(l), let b = double(r) else { break }
            switch op {
            case .add: return .double(a + b)
            case .subtract: return .double(a - b)
            case .multiply: return .double(a * b)
            case .divide:
                guard b != 0 else { throw EvaluationError(message: "\(a) / 0 divides by zero") }
                return .double(a / b)
            case .remainder:
                guard b != 0 else { throw EvaluationError(message: "\(a) % 0 divides by zero") }
                return .double(a.truncatingRemainder(dividingBy: b))
            }
        }
        throw EvaluationError(message: "cannot compute \(l.kindName) \(op.rawValue) \(r.kindName)")
    }

    private static func double(_ value: AttributeValue) -> Double? {
        switch value {
        case .integer(let n): Double(n)
        case .double(let d): d
        case .float(let f): Double(f)
        default: nil
        }
    }

    private static func decimal(_ value: AttributeValue) -> Decimal? {
        switch value {
        case .integer(let n): Decimal(n)
        case .decimal(let d): d
        default: nil
        }
    }

    private static func decimalResult(_ op: Operator, _ a: Decimal, _ b: Decimal) throws -> AttributeValue {
        switch op {
        case .add: return .decimal(a + b)
        case .subtract: return .decimal(a - b)
        case .multiply: return .decimal(a * b)
        case .divide:
            guard !b.isZero else { throw EvaluationError(message: "\(a) / 0 divides by zero") }
            return .decimal(a / b)
        case .remainder:
            throw EvaluationError(message: "% is not defined for decimals")
        }
    }

    /// `value` stored as `type`: the same case, or a number converted exactly.
    static func stored(_ value: AttributeValue, as type: AttributeType) -> AttributeValue? {
        if type.accepts(value) { return value }
        switch (value, type) {
        case (.integer(let n), .double): return .double(Double(n))
        case (.integer(let n), .float): return .float(Float(n))
        case (.integer(let n), .decimal): return .decimal(Decimal(n))
        case (.double(let d), .float): return .float(Float(d))
        case (.float(let f), .double): return .double(Double(f))
        case (.double(let d), .integer16), (.double(let d), .integer32), (.double(let d), .integer64):
            guard d.rounded(.towardZero) == d, let n = Int64(exactly: d), type.accepts(.integer(n)) else { return nil }
            return .integer(n)
        case (.double(let d), .decimal): return .decimal(Decimal(d))
        default: return nil
        }
    }
}

extension UpdateExpression {
    /// The value `compiled` (this expression, compiled) gives a row whose read values are
    /// `values`, in `attribute`'s type: what a batch update writes, on any store.
    ///
    /// - Throws: ``StrataError/typeMismatch(key:entity:expected:actual:)`` naming `row`
    ///   for arithmetic that fails (a division by zero, an overflow) or a value the
    ///   attribute cannot hold.
    func value(
        of compiled: Compiled, on values: [AttributeValue?], for attribute: AttributeDescription, entityName: String, row: ManagedObjectID
    ) throws -> AttributeValue? {
        let value: AttributeValue?
        do {
            value = try compiled.evaluate(values)
        } catch let error as EvaluationError {
            throw StrataError.typeMismatch(
                key: attribute.name, entity: entityName, expected: attribute.type.swiftTypeName, actual: "\(self) for \(row): \(error.message)")
        }
        guard let value else { return nil }
        if attribute.type.accepts(value) { return value }   // most often: no conversion
        return try converted(value, for: attribute, entityName: entityName, row: row)
    }

    /// `value` (this expression's) in `attribute`'s type.
    ///
    /// - Throws: ``StrataError/typeMismatch(key:entity:expected:actual:)`` when it has
    ///   none there.
    func converted(_ value: AttributeValue?, for attribute: AttributeDescription, entityName: String, row: ManagedObjectID?) throws(StrataError) -> AttributeValue? {
        guard let value else { return nil }
        guard let converted = Self.stored(value, as: attribute.type) else {
            throw StrataError.typeMismatch(
                key: attribute.name, entity: entityName, expected: attribute.type.swiftTypeName,
                actual: "\(value.kindName) \(value) from \(self)\(row.map { " for \($0)" } ?? "")")
        }
        return converted
    }
}
