import Foundation

// The expressions of the format language: key paths, literals, placeholders, variables,
// aggregates and casts (the grammar is on `PredicateParser`).
extension PredicateFormatParser {
    /// The expression at `token`, or nil (nothing consumed) when `token` cannot start one.
    func parseExpression() throws -> PredicateExpression? {
        // Only aggregates and casts nest: they are parsed here, everything else out of line,
        // so that the frames of the recursion stay small.
        switch token.kind {
        case .symbol(.leftBrace): try parseAggregate()
        case .keyword(.cast, _): try parseCast()
        default: try parseSimpleExpression()
        }
    }

    @inline(never)
    private func parseSimpleExpression() throws -> PredicateExpression? {
        let start = token
        switch token.kind {
        case .word, .escapedWord, .collectionOperator, .keyword(.selfValue, _), .placeholder(.keyPath):
            return try parseKeyPath()
        case .string(let text):
            try advance()
            return .constant(.string(text))
        case .number(let value):
            try advance()
            return .constant(value)
        case .keyword(.null, _), .keyword(.nilValue, _):
            try advance()
            return .constant(.null)
        case .keyword(.trueValue, _), .keyword(.yes, _):
            try advance()
            return .constant(.bool(true))
        case .keyword(.falseValue, _), .keyword(.no, _):
            try advance()
            return .constant(.bool(false))
        case .variable(let name):
            try advance()
            return .variable(name)
        case .placeholder(let placeholder):
            let value = try argumentValue(for: placeholder, at: start)
            try advance()
            return .constant(value)
        case .keyword(let keyword, let text):
            switch keyword {
            case .first, .last, .size, .anyKey, .caseInsensitive, .ci:
                throw syntax("'\(text)' is a reserved word: write #\(text) for a key of that name", at: start)
            case .subquery, .fetch:
                throw syntax("\(keyword.rawValue) is not supported", at: start)
            default:
                return nil
            }
        default:
            return nil
        }
    }

    @inline(never)
    private func parseKeyPath() throws -> PredicateExpression {
        var components: [String] = []
        switch token.kind {
        case .word(let name), .escapedWord(let name):
            components.append(name)
        case .collectionOperator(let name):
            components.append(try collectionOperator(name))
        case .placeholder(.keyPath):
            let argument = try takeArgument(for: token, placeholder: "%K")
            guard let path = PredicateArguments.keyPath(argument) else {
                let text = PredicateArguments.unwrapped(argument) as? String
                throw FetchPredicateError(
                    kind: .argumentType,
                    message: "%K takes a key path string (keys separated by dots), not "
                        + (text.map { PredicateFormatter.quoted($0) } ?? describeArgument(argument)),
                    position: lexer.characterOffset(token.start))
            }
            components = path
        default:
            break  // SELF
        }
        try advance()
        while isSymbol(.dot) {
            try advance()
            switch token.kind {
            case .word(let name), .escapedWord(let name), .keyword(_, let name):
                components.append(name)
            case .collectionOperator(let name):
                components.append(try collectionOperator(name))
            default:
                throw expected("a key")
            }
            try advance()
        }
        return .keyPath(components)
    }

    private func collectionOperator(_ name: String) throws -> String {
        guard let op = PredicateArguments.collectionOperator(name) else {
            throw syntax("unknown collection operator '@\(name)' (use @count, @sum, @avg, @min or @max)", at: token)
        }
        return op.rawValue
    }

    private func parseAggregate() throws -> PredicateExpression {
        let open = token.start
        try enter(token)
        try advance()
        var elements: [PredicateExpression] = []
        if isSymbol(.rightBrace) {
            try advance()
            depth -= 1
            return .aggregate(elements)
        }
        while true {
            guard let element = try parseExpression() else { throw expected("a value") }
            elements.append(element)
            if isSymbol(.rightBrace) { break }
            guard isSymbol(.comma) else { throw unclosed("{", openedAt: open) }
            try advance()
        }
        try advance()
        depth -= 1
        return .aggregate(elements)
    }

    /// `CAST(value, "Type")`: a constant of a type the literals cannot write (see
    /// `PredicateCast`).
    private func parseCast() throws -> PredicateExpression {
        try enter(token)
        try advance()
        guard isSymbol(.leftParen) else { throw expected("'('") }
        let open = token.start
        try advance()
        let sourceStart = token.start
        guard let source = try parseExpression() else { throw expected("a value") }
        let value = try finishCast(source, sourceStart: sourceStart, openedAt: open)
        depth -= 1
        return .constant(value)
    }

    /// `, "Type")` after the value of a CAST, and the value cast.
    @inline(never)
    private func finishCast(
        _ source: PredicateExpression, sourceStart: Int, openedAt open: Int
    ) throws -> PredicateValue {
        guard isSymbol(.comma) else { throw expected("',' and a type name") }
        try advance()
        guard case .string(let typeName) = token.kind else {
            throw syntax("expected a type name string (such as \"NSDate\") in CAST, found \(describe(token))", at: token)
        }
        let typeToken = token
        try advance()
        guard isSymbol(.rightParen) else { throw unclosed("(", openedAt: open) }
        guard let type = PredicateCast(name: typeName) else {
            throw syntax("CAST to \(lexer.text(of: typeToken)) is not supported (use \(PredicateCast.names))", at: typeToken)
        }
        let value: PredicateValue
        do throws(PredicateCast.Failure) {
            value = try type.value(of: source)
        } catch {
            throw lexer.error("CAST(…, \"\(type.rawValue)\"): \(error.message)", at: sourceStart)
        }
        try advance()
        return value
    }

    // MARK: Arguments

    private func takeArgument(for token: PredicateToken, placeholder: String) throws -> any Sendable {
        guard argumentIndex < arguments.count else {
            throw FetchPredicateError(
                kind: .missingArgument,
                message: "no argument for \(placeholder) (placeholder \(argumentIndex + 1), "
                    + "\(arguments.count) argument\(arguments.count == 1 ? "" : "s") given)",
                position: lexer.characterOffset(token.start))
        }
        defer { argumentIndex += 1 }
        return arguments[argumentIndex]
    }

    private func describeArgument(_ argument: Any) -> String {
        PredicateArguments.typeName(argument)
    }

    private func argumentValue(
        for placeholder: PredicatePlaceholder, at token: PredicateToken
    ) throws -> PredicateValue {
        let text = lexer.text(of: token)
        let argument = try takeArgument(for: token, placeholder: text)
        let value: PredicateValue?
        let expectation: String
        switch placeholder {
        case .object, .keyPath:
            value = PredicateArguments.value(argument)
            expectation = PredicateArguments.objectTypes
        case .integer:
            value = PredicateArguments.integerPlaceholderValue(argument)
            expectation = "an integer"
        case .float:
            value = PredicateArguments.floatPlaceholderValue(argument)
            expectation = "a Double, a Float or an integer"
        }
        guard let value else {
            throw FetchPredicateError(
                kind: .argumentType, message: "\(text) takes \(expectation), not \(describeArgument(argument))",
                position: lexer.characterOffset(token.start))
        }
        return value
    }
}
