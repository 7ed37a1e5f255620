import Foundation

/// The parser of the NSPredicate format language.
///
/// ```
/// predicate   := or
/// or          := and (("OR" | "||") and)*
/// and         := unary (("AND" | "&&") unary)*
/// unary       := ("NOT" | "!")* ("(" predicate ")" | "TRUEPREDICATE" | "FALSEPREDICATE" | comparison)
/// comparison  := [modifier] expression operator [options] expression
/// modifier    := "ANY" | "SOME" | "ALL" | "NONE"
/// operator    := "==" | "=" | "!=" | "<>" | "<" | "<=" | "=<" | ">" | ">=" | "=>"
///              | "BETWEEN" | "IN" | "BEGINSWITH" | "ENDSWITH" | "CONTAINS" | "LIKE" | "MATCHES"
/// options     := "[" ("c" | "d" | "cd" | "dc") "]"
/// expression  := keypath | literal | "%@" | "%d"… | "%f"… | "$" name | aggregate | cast
/// keypath     := head ("." component)*
/// head        := name | "#" name | "@" operator | "SELF" | "%K"
/// component   := name | "#" name | reserved word | "@" operator
/// literal     := string | number | "NIL" | "NULL" | "TRUE" | "YES" | "FALSE" | "NO"
/// aggregate   := "{" [expression ("," expression)*] "}"
/// cast        := "CAST" "(" expression "," string ")"      (see PredicateCast)
/// ```
///
/// Keywords are case-insensitive. AND and OR chains become one n-ary node each (a
/// parenthesized AND inside an AND stays a node of its own). Nesting of parentheses, NOT,
/// aggregates and casts deeper than ``maximumDepth`` is refused.
enum PredicateParser {
    /// The deepest nesting accepted.
    static let maximumDepth = 200

    /// Parses `format`, substituting `arguments` in order for its placeholders.
    static func parse(_ format: String, arguments: [any Sendable]) throws(FetchPredicateError) -> PredicateNode {
        do {
            return try PredicateFormatParser(format: format, arguments: arguments).parsePredicate()
        } catch let error as FetchPredicateError {
            throw error
        } catch {
            // Not reached: the parser throws FetchPredicateError only.
            throw FetchPredicateError(kind: .syntax, message: String(describing: error))
        }
    }
}

/// One parse of one format string (`PredicateParser.parse`).
///
/// Nesting costs stack: this is a class, so that the recursive descent does not copy the
/// parser's state into every frame; errors are built out of line; and its methods throw
/// untyped errors (always `FetchPredicateError`), which, unlike typed throws, take no room in
/// the frames. 200 levels of parentheses take about 70 KB of stack in a release build and
/// 300 KB in a debug build.
final class PredicateFormatParser {
    private(set) var lexer: PredicateLexer
    private(set) var token: PredicateToken
    private(set) var previous: PredicateToken?
    let arguments: [any Sendable]
    var argumentIndex = 0
    var depth = 0

    init(format: String, arguments: [any Sendable]) throws {
        lexer = PredicateLexer(format)
        self.arguments = arguments
        token = try lexer.next()
    }

    func parsePredicate() throws -> PredicateNode {
        if case .end = token.kind { throw syntax("the predicate is empty", at: token) }
        let node = try parseOr()
        guard case .end = token.kind else { throw unexpected(token) }
        if argumentIndex < arguments.count {
            throw FetchPredicateError(
                kind: .extraArgument,
                message: "\(arguments.count) arguments for \(argumentIndex) placeholder\(argumentIndex == 1 ? "" : "s")",
                position: lexer.characterOffset(lexer.scalars.count))
        }
        return node
    }

    // MARK: Tokens and errors

    @inline(never)
    func advance() throws {
        previous = token
        token = try lexer.next()
    }

    @inline(never)
    func syntax(_ message: String, at token: PredicateToken) -> FetchPredicateError {
        lexer.error(message, at: token.start)
    }

    /// `'AND'`, or `the end`.
    @inline(never)
    func describe(_ token: PredicateToken) -> String {
        if case .end = token.kind { return "the end" }
        return "'\(lexer.text(of: token))'"
    }

    @inline(never)
    func unexpected(_ token: PredicateToken) -> FetchPredicateError {
        if case .end = token.kind { return syntax("unexpected end of the predicate", at: token) }
        return syntax("unexpected \(describe(token))", at: token)
    }

    /// `expected a value after '==', found ')'` (after the previous token unless told).
    @inline(never)
    func expected(_ what: String, after: PredicateToken? = nil) -> FetchPredicateError {
        let after = (after ?? previous).map { " after '\(lexer.text(of: $0))'" } ?? ""
        return syntax("expected \(what)\(after), found \(describe(token))", at: token)
    }

    /// `expected ')' to close the '(' at 3, found the end`. (Errors are made out of line, so
    /// that the recursive functions keep small stack frames.)
    @inline(never)
    func unclosed(_ opener: String, openedAt start: Int) -> FetchPredicateError {
        let closer = switch opener {
        case "(": "')'"
        case "[": "']'"
        default: "',' or '}'"
        }
        let what = opener == "{" ? "in the aggregate" : "to close the '\(opener)'"
        return syntax("expected \(closer) \(what) at \(lexer.characterOffset(start)), found \(describe(token))", at: token)
    }

    func isSymbol(_ symbol: PredicateSymbol) -> Bool {
        if case .symbol(let found) = token.kind { return found == symbol }
        return false
    }

    func isKeyword(_ keyword: PredicateKeyword) -> Bool {
        if case .keyword(let found, _) = token.kind { return found == keyword }
        return false
    }

    /// Enters one level of nesting at `token`.
    func enter(_ token: PredicateToken) throws {
        depth += 1
        if depth > PredicateParser.maximumDepth { throw tooDeep(token) }
    }

    @inline(never)
    private func tooDeep(_ token: PredicateToken) -> FetchPredicateError {
        syntax("nesting deeper than \(PredicateParser.maximumDepth) levels", at: token)
    }

    // MARK: Predicates

    /// `or := and (OR and)*` and `and := unary (AND unary)*`, in one function (one stack frame
    /// for each level of parentheses instead of two).
    private func parseOr() throws -> PredicateNode {
        var disjuncts: [PredicateNode] = []
        var conjuncts = [try parseUnary()]
        while true {
            if isKeyword(.and) || isSymbol(.andAnd) {
                try advance()
                conjuncts.append(try parseUnary())
                continue
            }
            disjuncts.append(conjuncts.count == 1 ? conjuncts[0] : .and(conjuncts))
            guard isKeyword(.or) || isSymbol(.orOr) else { break }
            try advance()
            conjuncts = [try parseUnary()]
        }
        return disjuncts.count == 1 ? disjuncts[0] : .or(disjuncts)
    }

    /// `unary := (NOT | "!")* ("(" or ")" | leaf)`. A run of NOTs is read in a loop, but each
    /// counts as a level of nesting all the same (the node is that deep).
    private func parseUnary() throws -> PredicateNode {
        var negations = 0
        while isKeyword(.not) || isSymbol(.bang) {
            try enter(token)
            try advance()
            negations += 1
        }
        var node: PredicateNode
        if isSymbol(.leftParen) {
            let open = token.start
            try enter(token)
            try advance()
            node = try parseOr()
            guard isSymbol(.rightParen) else { throw unclosed("(", openedAt: open) }
            try advance()
            depth -= 1
        } else {
            node = try parseLeaf()
        }
        for _ in 0..<negations { node = .not(node) }
        depth -= negations
        return node
    }

    /// A predicate that nests nothing: TRUEPREDICATE, FALSEPREDICATE or a comparison.
    @inline(never)
    private func parseLeaf() throws -> PredicateNode {
        switch token.kind {
        case .keyword(.truePredicate, _):
            try advance()
            return .constant(true)
        case .keyword(.falsePredicate, _):
            try advance()
            return .constant(false)
        default:
            return .comparison(try parseComparison())
        }
    }

    // MARK: Comparisons

    private static let modifiers: [PredicateKeyword: PredicateComparison.Modifier] = [
        .any: .any, .some: .any, .all: .all, .none: .none,
    ]

    private func parseComparison() throws -> PredicateComparison {
        var modifier = PredicateComparison.Modifier.direct
        var modifierToken: PredicateToken?
        if case .keyword(let keyword, _) = token.kind, let found = Self.modifiers[keyword] {
            modifier = found
            modifierToken = token
            try advance()
        }
        let leftStart = token
        guard let left = try parseExpression() else {
            if modifierToken == nil, case .symbol = token.kind { throw unexpected(token) }
            throw expected(modifierToken == nil ? "a predicate" : "a key path")
        }
        let operatorToken = token
        guard let op = comparisonOperator() else { throw missingOperator(leftStart: leftStart.start) }
        try advance()
        let options = try parseOptions()
        let rightStart = token
        let argumentsBefore = argumentIndex
        guard let right = try parseExpression() else { throw expected("a value", after: operatorToken) }
        if let problem = Self.checkRightOperand(right, of: op) {
            throw FetchPredicateError(
                kind: argumentIndex > argumentsBefore && isArgument(right) ? .argumentType : .syntax,
                message: problem, position: lexer.characterOffset(rightStart.start))
        }
        return PredicateComparison(modifier: modifier, left: left, op: op, options: options, right: right)
    }

    @inline(never)
    private func missingOperator(leftStart: Int) -> FetchPredicateError {
        let hint = isKeyword(.not) ? " (write NOT (a IN b) to negate a comparison)" : ""
        let leftText = lexer.text(from: leftStart, to: previous?.end ?? leftStart)
        return syntax("expected a comparison operator after '\(leftText)', found \(describe(token))\(hint)", at: token)
    }

    private func isArgument(_ expression: PredicateExpression) -> Bool {
        if case .constant = expression { return true }
        return false
    }

    /// Why `right` cannot be the right side of `op` (nil when it can): BETWEEN takes two
    /// bounds, IN a collection (or a string, or a key path).
    static func checkRightOperand(_ right: PredicateExpression, of op: PredicateComparison.Operator) -> String? {
        switch (op, right) {
        case (.between, .aggregate(let bounds)):
            return bounds.count == 2 ? nil : "BETWEEN takes 2 bounds {low, high}, not \(bounds.count)"
        case (.between, .constant(.array(let bounds))):
            return bounds.count == 2 ? nil : "BETWEEN takes 2 bounds {low, high}, not an array of \(bounds.count)"
        case (.between, .variable):
            return nil
        case (.between, .constant(let value)):
            return "BETWEEN takes 2 bounds {low, high}, not \(value.kindName)"
        case (.between, _):
            return "BETWEEN takes 2 bounds {low, high}"
        case (.in, .constant(.array)), (.in, .constant(.string)), (.in, .aggregate), (.in, .keyPath), (.in, .variable):
            return nil
        case (.in, .constant(let value)):
            return "IN takes a collection ({a, b}, an array or a key path) or a string, not \(value.kindName)"
        default:
            return nil
        }
    }

    private func comparisonOperator() -> PredicateComparison.Operator? {
        switch token.kind {
        case .symbol(.equal): .equal
        case .symbol(.notEqual): .notEqual
        case .symbol(.less): .less
        case .symbol(.lessOrEqual): .lessOrEqual
        case .symbol(.greater): .greater
        case .symbol(.greaterOrEqual): .greaterOrEqual
        case .keyword(.between, _): .between
        case .keyword(.in, _): .in
        case .keyword(.beginsWith, _): .beginsWith
        case .keyword(.endsWith, _): .endsWith
        case .keyword(.contains, _): .contains
        case .keyword(.like, _): .like
        case .keyword(.matches, _): .matches
        default: nil
        }
    }

    /// `[c]`, `[d]`, `[cd]` (either order, either case).
    private func parseOptions() throws -> PredicateComparison.Options {
        guard isSymbol(.leftBracket) else { return [] }
        let open = token
        try advance()
        guard case .word(let letters) = token.kind else {
            throw syntax("expected comparison options (c, d or cd) after '[', found \(describe(token))", at: token)
        }
        var options: PredicateComparison.Options = []
        for letter in letters.unicodeScalars {
            switch letter {
            case "c", "C": options.insert(.caseInsensitive)
            case "d", "D": options.insert(.diacriticInsensitive)
            default: throw syntax("unknown comparison option '\(letters)' (use c, d or cd)", at: token)
            }
        }
        try advance()
        guard isSymbol(.rightBracket) else { throw unclosed("[", openedAt: open.start) }
        try advance()
        return options
    }
}
